"""Writing a parsed dataset to disk while it is read, counting what it stores.

A reader of any upload format (LIBSVM text today) hands `DatasetWriter` chunks of rows; each
chunk goes straight to the dataset's array files, so the parser holds one chunk, never the
dataset. What is written is counted against a `StorageBudget` (the tenant's room under its
storage quota) as it grows: the write that would cross it raises `QuotaExceeded` before it is
made. Labels are summarized on the way (`LabelSummary`), with the rule of
`dataset_files.summarize_labels`.

`open_array` is the one place that decides where and how an array is written (an `.npy` file in
the dataset's directory, appended to and given its final length at the end).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from numpy.lib import format as npy

from solvers._core.sparse import MAX_ABS_VALUE

HEADER_BYTES = 128  # a 1-D array's .npy header, whatever its length
BLOCK = 1 << 20  # elements rewritten at a time by the finishing passes
INT32_MAX = 2**31 - 1
MAX_CLASSES = 1000
# float64 (y's type) holds every integer below 2**53, not every one beyond: 9007199254740993 reads
# as 9007199254740992, so two such classes would be one (a regression target may be that large)
MAX_EXACT_CLASS = 2**53


def inexact_class(value: float) -> str:
    """Why a class label of magnitude MAX_EXACT_CLASS or more is refused."""
    return (
        f"the class label {value:.17g} (as a float64) is of magnitude 2^53 ({MAX_EXACT_CLASS}) "
        "or more, where float64 labels do not hold every integer (9007199254740993 reads as "
        "9007199254740992: two classes would be one); renumber the classes (e.g. 0..k-1)"
    )


class QuotaExceeded(Exception):
    """Storing more would put the tenant over its storage quota."""

    def __init__(self, limit: int):
        super().__init__(
            f"the parsed dataset exceeds the {limit} bytes left under the tenant's storage "
            "quota (delete datasets, models or prediction runs to make room)"
        )
        self.limit = limit

    def __reduce__(self):  # across the parser's process pool: rebuilt from the limit
        return (QuotaExceeded, (self.limit,))


class StorageBudget:
    """Bytes that may still be stored; `spend` raises QuotaExceeded past them (None: no limit)."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.spent = 0

    def spend(self, n: int) -> None:
        if self.limit is not None and self.spent + n > self.limit:
            raise QuotaExceeded(self.limit)
        self.spent += n


class ArrayFile:
    """A 1-D `.npy` array written by appending; `close` writes its final length into the header."""

    def __init__(self, path: Path, dtype):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.length = 0
        self.file = open(self.path, "w+b")  # noqa: SIM115 - closed in close()
        self._header(0)

    def _header(self, length: int) -> None:
        header = io.BytesIO()
        npy.write_array_header_1_0(
            header, {"descr": npy.dtype_to_descr(self.dtype), "fortran_order": False,
                     "shape": (length,)}
        )  # fmt: skip
        assert len(header.getvalue()) == HEADER_BYTES
        self.file.seek(0)
        self.file.write(header.getvalue())
        self.file.seek(0, os.SEEK_END)

    @property
    def nbytes(self) -> int:
        return HEADER_BYTES + self.length * self.dtype.itemsize

    def append(self, values: np.ndarray) -> None:
        self.file.write(np.ascontiguousarray(values, dtype=self.dtype).data)
        self.length += len(values)

    def blocks(self):
        """(first element, block) over the array as written so far, BLOCK elements at a time."""
        self.file.flush()
        for start in range(0, self.length, BLOCK):
            count = min(BLOCK, self.length - start)
            self.file.seek(HEADER_BYTES + start * self.dtype.itemsize)
            yield start, np.fromfile(self.file, dtype=self.dtype, count=count)

    def rewrite(self, start: int, block: np.ndarray) -> None:
        self.file.seek(HEADER_BYTES + start * self.dtype.itemsize)
        self.file.write(np.ascontiguousarray(block, dtype=self.dtype).data)

    def close(self) -> None:
        if not self.file.closed:
            self._header(self.length)
            self.file.close()


def open_array(directory: Path, name: str, dtype) -> ArrayFile:
    """Where a dataset's array `name` is written (the dataset's directory, as `name.npy`)."""
    return ArrayFile(Path(directory) / f"{name}.npy", dtype)


class LabelSummary:
    """The labels' classes with counts, min, max and mean, from chunks of labels."""

    def __init__(self):
        self.n = 0
        self.total = 0.0
        self.low = np.inf
        self.high = -np.inf
        self.counts: dict[float, int] | None = {}  # None once they cannot be classes

    def add(self, y: np.ndarray) -> None:
        if y.size == 0:
            return
        self.n += y.size
        self.total += float(np.sum(y))
        self.low, self.high = min(self.low, float(y.min())), max(self.high, float(y.max()))
        if self.counts is None:
            return
        values, counts = np.unique(y, return_counts=True)
        # integers of magnitude 2^53 or more are no exact class labels (`inexact_class`): such
        # labels are a real-valued target, which a float may round as any float does
        if not np.all(values == np.round(values)) or np.any(np.abs(values) >= MAX_EXACT_CLASS):
            self.counts = None
            return
        for v, c in zip(values.tolist(), counts.tolist(), strict=True):
            self.counts[v] = self.counts.get(v, 0) + c
        if len(self.counts) > MAX_CLASSES:
            self.counts = None

    def result(self) -> dict[str, Any]:
        target = {"min": _number(self.low), "max": _number(self.high), "mean": self.total / self.n}
        k = len(self.counts) if self.counts is not None else None
        if k is not None and (k <= 2 or k <= self.n // 2):
            classes = [{"label": _number(v), "count": c} for v, c in sorted(self.counts.items())]
            return {"label_kind": "classes", "classes": classes, "target": target}
        return {"label_kind": "real", "classes": None, "target": target}


def _number(value: float) -> int | float:
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _refuse_huge_values(indptr: np.ndarray, data: np.ndarray, rows_before: int) -> None:
    """Refuse a chunk holding a value beyond the solvers' bound (±1e100), naming its row: no
    job could train on it (the squares of a row's values overflow), so it is refused at the
    upload rather than at every job on it."""
    beyond = np.flatnonzero(np.abs(data) > MAX_ABS_VALUE)
    if beyond.size:
        k = int(beyond[0])
        row = rows_before + int(np.searchsorted(indptr, k, side="right"))  # counted from 1
        raise ValueError(
            f"row {row}: the value {float(data[k]):g} is beyond ±{MAX_ABS_VALUE:g}, where the "
            "squares of a row's values overflow a float64; scale the features"
        )


class DatasetWriter:
    """A dataset's arrays (`data`, `indices`, `indptr`, `y`, `qid`) written a chunk at a time
    into `directory` (created here), each write counted against `budget`."""

    def __init__(self, directory: Path, budget: StorageBudget, dtype=np.float64):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=False)
        self.budget = budget
        self.arrays = {
            "data": open_array(self.directory, "data", dtype),
            "indices": open_array(self.directory, "indices", np.int32),
            "indptr": open_array(self.directory, "indptr", np.int64),
            "y": open_array(self.directory, "y", np.float64),
            "qid": open_array(self.directory, "qid", np.int64),
        }
        self.labels = LabelSummary()
        self.nnz = 0
        self.n_rows = 0
        self._append("indptr", np.zeros(1, dtype=np.int64))

    def _append(self, name: str, values: np.ndarray, counted: bool = True) -> None:
        array = self.arrays[name]
        if counted:
            self.budget.spend(len(values) * array.dtype.itemsize)
        array.append(values)

    def append(self, indptr, indices, data, labels, qids) -> None:
        """Rows with local `indptr` (starting at 0) and their entries, labels and qids."""
        _refuse_huge_values(indptr, data, self.n_rows)
        self.labels.add(labels)
        self._append("data", data)
        self._append("indices", indices)
        self._append("indptr", indptr[1:] + self.nnz)
        self._append("y", labels)
        self._append("qid", qids, counted=False)  # counted at the end, if the file has qids
        self.nnz += len(indices)
        self.n_rows += len(indptr) - 1

    def finish(
        self, zero_based: bool, has_qid: bool, shift: int = 0, text: dict | None = None
    ) -> dict[str, Any]:
        """Close the arrays: subtract `shift` from the stored indices (a one-based file's raw
        indices), narrow indptr to int32 when it fits, drop qid unless the file has qids, and
        store text labels (`text`: `formats.labels.LabelColumn.text()`) as class codes.
        Returns the summary of what was stored."""
        summary = self.labels.result() if text is None else self._store_text(text)
        if shift:
            indices = self.arrays["indices"]
            for start, block in indices.blocks():
                indices.rewrite(start, block - shift)
        if self.nnz <= INT32_MAX:
            self._narrow_indptr()
        qid = self.arrays.pop("qid")
        qid.close()
        if has_qid:
            self.budget.spend(qid.nbytes - HEADER_BYTES)
        else:
            qid.path.unlink()
        for array in self.arrays.values():
            array.close()
        stored = sum(p.stat().st_size for p in self.directory.iterdir())
        return {"nnz": self.nnz, "stored_bytes": stored, **summary}

    def _store_text(self, text: dict) -> dict[str, Any]:
        """Rewrite y as codes 0..k-1 in the sorted order of the class names: the rows before
        ``text_from`` hold numbers (named through ``number_codes``), the others first-seen
        codes. Returns the labels' summary: the classes by name with counts."""
        names = text["names"]
        order = sorted(range(len(names)), key=names.__getitem__)
        rank = np.empty(len(names), dtype=np.float64)
        rank[order] = np.arange(len(names))
        numbers = np.asarray(sorted(text["number_codes"]), dtype=np.float64)
        number_rank = rank[[text["number_codes"][v] for v in numbers.tolist()]]
        counts = np.zeros(len(names), dtype=np.int64)
        y = self.arrays["y"]
        for start, block in y.blocks():
            coded = rank[block.astype(np.int64).clip(0, len(names) - 1)]
            before = max(0, min(text["text_from"] - start, len(block)))
            if before:
                coded[:before] = number_rank[np.searchsorted(numbers, block[:before])]
            y.rewrite(start, coded)
            counts += np.bincount(coded.astype(np.int64), minlength=len(names))
        classes = [{"label": names[i], "count": int(counts[k])} for k, i in enumerate(order)]
        return {"label_kind": "classes", "classes": classes, "target": {}}  # no numeric target

    def _narrow_indptr(self) -> None:
        wide = self.arrays["indptr"]
        narrow = ArrayFile(self.directory / "indptr.narrow", np.int32)
        for _, block in wide.blocks():
            narrow.append(block)
        narrow.close()
        wide.close()
        os.replace(narrow.path, wide.path)
        self.arrays["indptr"] = narrow
        narrow.path = wide.path

    def abort(self) -> None:
        for array in self.arrays.values():
            array.file.close()
        shutil.rmtree(self.directory, ignore_errors=True)
