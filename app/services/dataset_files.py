"""Datasets on disk: parsing an upload into arrays (run in a child process), loading them back,
and re-numbering columns between files of different index bases.

A stored dataset is a directory DATA_DIR/datasets/<id>/ of raw `.npy` files: the CSR arrays
`data`, `indices`, `indptr`, the labels `y` and, for qid-grouped files, `qid`.
"""

from __future__ import annotations

import errno
import io
import multiprocessing
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

ARRAYS = ("data", "indices", "indptr", "y")
MAX_CLASSES = 1000


def summarize_labels(y: np.ndarray) -> dict[str, Any]:
    """Classes with counts when the labels look like classes, else a real-valued target.

    Labels look like classes when they are all integers and either at most two distinct values
    occur or at most `MAX_CLASSES` do and each class has two rows or more on average.
    """
    target = {"min": _number(y.min()), "max": _number(y.max()), "mean": float(y.mean())}
    values, counts = np.unique(y, return_counts=True)
    integral = bool(np.all(values == np.round(values)))
    k = len(values)
    if integral and (k <= 2 or (k <= MAX_CLASSES and k <= len(y) // 2)):
        classes = [
            {"label": _number(v), "count": int(c)} for v, c in zip(values, counts, strict=True)
        ]
        return {"label_kind": "classes", "classes": classes, "target": target}
    return {"label_kind": "real", "classes": None, "target": target}


def _number(value: float) -> int | float:
    value = float(value)
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


class UploadAborted(Exception):
    """The upload being followed was abandoned (too large, malformed request, client gone)."""


class GrowingFile(io.RawIOBase):
    """Reads a file that another process is still writing (`uploads.UploadSink`).

    At the end of the data written so far it waits for more, until the writer's `.done` marker
    gives the final size; the writer's `.abort` marker (checked a few times a second) or no
    growth for `stall_s` seconds raises `UploadAborted`. Parsing thus overlaps the upload.
    """

    def __init__(self, path: str, poll_s: float = 0.005, stall_s: float = 300.0):
        self.path = path
        self.poll_s = poll_s
        self.stall_s = stall_s
        self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        self._final: int | None = None
        self._checked = time.monotonic()

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._file.close()
        super().close()

    def readinto(self, buffer) -> int:
        waited = 0.0
        while True:
            if time.monotonic() - self._checked > 0.1:
                self._check_abort()
            n = self._file.readinto(buffer)
            if n:
                return n
            if self._final is None:
                self._check_abort()
                self._final = self._final_size()
            if self._final is not None and self._file.tell() >= self._final:
                return 0
            time.sleep(self.poll_s)
            waited += self.poll_s
            if waited > self.stall_s:
                raise UploadAborted(f"the upload stalled for {self.stall_s:g} s")

    def _check_abort(self) -> None:
        self._checked = time.monotonic()
        if os.path.exists(self.path + ".abort"):
            raise UploadAborted("the upload was abandoned")

    def _final_size(self) -> int | None:
        try:
            with open(self.path + ".done") as marker:
                return int(marker.read())
        except FileNotFoundError:
            return None


def parse_to_arrays(
    source: str,
    out_dir: str,
    growing: bool = False,
    max_expanded: int | None = None,
    fmt: str | None = None,
) -> dict[str, Any]:
    """Parse an uploaded file and save its arrays into `out_dir` (runs in a child process).

    `fmt` is the upload's format (`app.services.formats`; None: recognised from its first bytes).

    With `growing`, the file is still being uploaded and is followed as it grows. A compressed
    file may expand to at most `max_expanded` bytes (`app.limits.open_expanded`). Returns the
    dataset's metadata, or ``{"error": message, "line": n, "status": http status}`` (errors are
    returned, not raised, so that nothing custom has to cross the process boundary).
    """
    try:
        return _parse_and_save(source, out_dir, growing, max_expanded, fmt)
    except OSError as exc:
        if _disk_full(exc):
            shutil.rmtree(out_dir, ignore_errors=True)
            return {"error": DISK_FULL, "line": None, "status": 507}
        raise


def _disk_full(exc: OSError) -> bool:
    # numpy reports a short write to a full device as "N requested and M written", no errno
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or (
        exc.errno is None and "requested and" in str(exc) and "written" in str(exc)
    )


DISK_FULL = "the server's disk is full: the dataset could not be stored; nothing was kept"


def _parse_and_save(
    source: str, out_dir: str, growing: bool, max_expanded: int | None, fmt: str | None = None
) -> dict[str, Any]:
    from app.limits import ExpansionTooLarge, open_expanded
    from app.services import formats
    from solvers.io import LibsvmFormatError

    limit = max_expanded if max_expanded is not None else 2**62
    try:
        with GrowingFile(source) if growing else open(source, "rb") as stream:
            plain = open_expanded(stream, limit)
            kind = formats.resolve(fmt, plain.peek(4)[:4])
            parsed = formats.read(kind, plain, source, limit)
    except UploadAborted as exc:
        return {"error": str(exc), "line": None, "aborted": True}
    except ExpansionTooLarge as exc:
        return {"error": str(exc), "line": None, "status": 413}
    except LibsvmFormatError as exc:
        return {"error": str(exc), "line": getattr(exc, "line", None)}
    except (ValueError, EOFError) as exc:
        return {"error": str(exc) or type(exc).__name__, "line": getattr(exc, "line", None)}
    except MemoryError:
        return {"error": "the parsed dataset does not fit in the parser's memory", "line": None}
    X = parsed.X.tocsr()
    if X.shape[0] == 0:
        return {"error": "the file has no data rows", "line": None}
    y = np.asarray(parsed.y, dtype=np.float64)
    if not np.all(np.isfinite(y)):
        bad = int(np.flatnonzero(~np.isfinite(y))[0])
        return {"error": f"row {bad + 1}: the label is not a finite number", "line": None}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=False)
    for name, array in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr), ("y", y)):
        np.save(out / f"{name}.npy", array)
    if parsed.qid is not None:
        np.save(out / "qid.npy", np.asarray(parsed.qid))
    return {
        "n_rows": int(X.shape[0]),
        "n_features": int(parsed.n_features),
        "nnz": int(X.nnz),
        "zero_based": bool(parsed.zero_based),
        "has_qid": parsed.qid is not None,
        **summarize_labels(y),
    }


def watch_parent() -> None:
    """Exit this parser process as soon as the API process that started it is gone (killed):
    it would otherwise wait for work forever."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if not parent.is_alive():
                os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def warm_up() -> None:
    """Load the reader's compiled kernels (run once in a fresh parser process)."""
    from solvers.io import load_libsvm

    load_libsvm(io.BytesIO(b"1 1:1\n-1 2:1\n"))


def load_arrays(
    directory: Path, n_features: int
) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray | None]:
    """(X, y, qid or None) of a stored dataset; X has `n_features` columns."""
    parts = {name: np.load(directory / f"{name}.npy", allow_pickle=False) for name in ARRAYS}
    n_rows = len(parts["indptr"]) - 1
    X = sp.csr_matrix(
        (parts["data"], parts["indices"], parts["indptr"]), shape=(n_rows, n_features), copy=False
    )
    qid_path = directory / "qid.npy"
    qid = np.load(qid_path, allow_pickle=False) if qid_path.exists() else None
    return X, parts["y"], qid


def align_columns(
    X: sp.csr_matrix, zero_based: bool, to_zero_based: bool, to_n_features: int
) -> sp.csr_matrix:
    """Re-number X's columns into another file's numbering and width.

    Both files use the same raw feature indices; only the column of index i differs (i for
    zero-based files, i - 1 for one-based ones). Features beyond `to_n_features` are dropped, as
    LIBLINEAR's predict ignores them; a raw index 0 cannot be expressed in a one-based numbering
    and raises ValueError.
    """
    shift = (0 if zero_based else 1) - (0 if to_zero_based else 1)
    indices = X.indices.astype(np.int64) + shift
    if shift < 0 and indices.size and indices.min() < 0:
        raise ValueError(
            "the dataset uses feature index 0, but the model's training file is one-based"
        )
    keep = indices < to_n_features
    if keep.all():
        return sp.csr_matrix(
            (X.data, indices.astype(X.indices.dtype), X.indptr), shape=(X.shape[0], to_n_features)
        )
    row = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[keep]
    return sp.csr_matrix(
        (X.data[keep], (row, indices[keep])), shape=(X.shape[0], to_n_features)
    ).tocsr()
