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
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from app.services.dataset_store import (
    MAX_CLASSES,  # noqa: F401 - part of this module's interface
    DatasetWriter,
    LabelSummary,
    QuotaExceeded,
    StorageBudget,
)

ARRAYS = ("data", "indices", "indptr", "y")
CHUNK_ROWS, CHUNK_NNZ = 65536, 1 << 20  # rows and entries the parser holds at a time


def summarize_labels(y: np.ndarray) -> dict[str, Any]:
    """Classes with counts when the labels look like classes, else a real-valued target.

    Labels look like classes when they are all integers of magnitude below 2^53 (float64 holds
    every integer only there) and either at most two distinct values occur or at most
    `MAX_CLASSES` do and each class has two rows or more on average.
    """
    summary = LabelSummary()
    summary.add(np.asarray(y, dtype=np.float64))
    return summary.result()


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


def _quota_error(exc: QuotaExceeded) -> dict:
    """The error a parse returns (not raises) when the dataset outgrows the tenant's room."""
    return {"error": str(exc), "line": None, "status": 429, "quota_room": exc.limit}


def parse_to_arrays(
    source: str,
    out_dir: str,
    growing: bool = False,
    limits: dict | None = None,
    fmt: str | None = None,
    options: dict | None = None,
) -> dict[str, Any]:
    """Parse an uploaded file into a dataset's arrays in `out_dir` (runs in a child process),
    writing them as it reads: the parser's memory is one chunk, not the dataset. `fmt` is the
    upload's format (`app.services.formats`; None: recognised from its first bytes), `options`
    its parse options (``label_column``, ``empty_cells``).

    With `growing`, the file is still being uploaded and is followed as it grows. `limits`
    (each optional): ``max_expanded`` bytes of decompressed text, ``max_line`` bytes in a line,
    ``max_features``, ``budget`` bytes that may be stored (the tenant's quota room). Returns the
    dataset's metadata with ``stored_bytes``, or ``{"error": message, "line": n, "status": http
    status}`` (errors are returned, not raised, so nothing custom crosses the process boundary).
    On error nothing is left in `out_dir`.
    """
    limits = limits or {}
    writer = None
    try:
        writer = DatasetWriter(Path(out_dir), StorageBudget(limits.get("budget")))
        meta = _parse_into(source, writer, growing, limits, fmt, options or {})
    except QuotaExceeded as exc:  # the writer's first bytes (indptr's 0) already exceed the room
        if writer is not None:
            writer.abort()
        return _quota_error(exc)
    except OSError as exc:
        if writer is not None:
            writer.abort()
        if _disk_full(exc):
            return {"error": DISK_FULL, "line": None, "status": 507}
        raise
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if "error" in meta:
        writer.abort()
    return meta


def _disk_full(exc: OSError) -> bool:
    # numpy reports a short write to a full device as "N requested and M written", no errno
    return exc.errno in (errno.ENOSPC, errno.EDQUOT) or (
        exc.errno is None and "requested and" in str(exc) and "written" in str(exc)
    )


DISK_FULL = "the server's disk is full: the dataset could not be stored; nothing was kept"


def _parse_into(
    source: str, writer: DatasetWriter, growing: bool, limits: dict, fmt: str | None,
    options: dict,
) -> dict[str, Any]:
    from app.limits import ExpansionTooLarge, open_expanded
    from app.services import formats
    from solvers.io import LibsvmFormatError, LibsvmLimitError

    expanded = limits.get("max_expanded") or 2**62
    try:
        with GrowingFile(source) if growing else open(source, "rb") as stream:
            plain = open_expanded(stream, expanded)
            kind = formats.resolve(fmt, _head(plain))
            bounds = {**limits, "max_expanded": expanded}
            chunks = formats.chunks(kind, plain, source, bounds, CHUNK_ROWS, CHUNK_NNZ, options)
            for chunk in chunks:
                writer.append(*chunk)
    except UploadAborted as exc:
        return {"error": str(exc), "line": None, "aborted": True}
    except QuotaExceeded as exc:
        return _quota_error(exc)
    except (ExpansionTooLarge, LibsvmLimitError) as exc:
        return {"error": str(exc), "line": getattr(exc, "line", None), "status": 413}
    except (ValueError, EOFError) as exc:  # LibsvmFormatError and corrupt compressed data
        line = exc.line if isinstance(exc, LibsvmFormatError) else getattr(exc, "line", None)
        return {"error": str(exc) or type(exc).__name__, "line": line}
    except MemoryError:
        return {"error": "the dataset does not fit in the parser's memory", "line": None}
    try:
        shift = 0 if chunks.zero_based else 1  # a one-based file's raw indices, minus one
        text = chunks.label_text() if hasattr(chunks, "label_text") else None
        stored = writer.finish(chunks.zero_based, chunks.has_qid, shift=shift, text=text)
    except QuotaExceeded as exc:
        return _quota_error(exc)
    # the feature names are kept in the database, not in the arrays: counted all the same, or a
    # table of 100,000 long column names over one row (under 1 MB each) cost the quota nothing
    stored["stored_bytes"] += json_bytes(getattr(chunks, "feature_names", None))
    # so are the class names of text labels (1,000 names of 255 characters over 1,000 rows:
    # 16 kB of arrays, 260 kB of names)
    stored["stored_bytes"] += json_bytes(text["names"] if text else None)
    return {
        "n_rows": chunks.n_rows,
        "n_features": chunks.n_features,
        "zero_based": bool(chunks.zero_based),
        "has_qid": bool(chunks.has_qid),
        "format": kind,
        "feature_names": getattr(chunks, "feature_names", None),
        **stored,
    }


def _head(plain: io.BufferedReader) -> bytes:
    """The first bytes of an upload (decompressed) that recognise an unnamed format: those
    `open_expanded` read ahead (`READ_AHEAD`) and hands back in one read."""
    from app.limits import READ_AHEAD

    return plain.peek(READ_AHEAD)[:READ_AHEAD]


def recognised_format(path: Path, max_expanded: int) -> str | None:
    """The format the whole upload at `path` is recognised as when none is named, as the parse
    recognises it; None when its compressed bytes cannot be read (the parse says why)."""
    from app.limits import open_expanded
    from app.services import formats

    try:
        with open(path, "rb") as stream:
            return formats.resolve(None, _head(open_expanded(stream, max_expanded)))
    except (OSError, ValueError, EOFError):
        return None


def json_bytes(value) -> int:
    """The size of ``value`` as the database's JSON column holds it (0 for None)."""
    import json

    return 0 if value is None else len(json.dumps(value, ensure_ascii=False).encode())


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
    from solvers.io import LibsvmChunks

    for _ in LibsvmChunks(io.BytesIO(b"1 1:1\n-1 2:1\n")):
        pass


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
