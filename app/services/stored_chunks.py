"""A stored dataset read a chunk at a time from its memory-mapped arrays, for the online
(out-of-core) structural solver.

Nothing here loads a whole array: the `.npy` files under DATA_DIR/datasets/<id>/ are mapped
read-only and each chunk copies only its own rows, so a worker's memory is bounded by the
solver's cache and one chunk, not by the dataset. The chunk size follows from the cache budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

# A chunk (with the copies the solver makes of it) may take this share of the cache budget.
CHUNK_SHARE = 0.25
# Rows read at a time when only the qid column is scanned.
SCAN_ROWS = 1 << 20


@dataclass(frozen=True)
class MappedCSR:
    """The CSR arrays of a stored dataset, memory-mapped (nothing read until sliced)."""

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])


def map_arrays(directory: Path, n_features: int) -> tuple[MappedCSR, np.ndarray, np.ndarray]:
    """(X, y, qid) of a stored qid-grouped dataset, every array memory-mapped read-only."""

    def load(name: str) -> np.ndarray:
        return np.load(Path(directory) / f"{name}.npy", mmap_mode="r", allow_pickle=False)

    qid_path = Path(directory) / "qid.npy"
    if not qid_path.exists():
        raise ValueError("the online structural mode needs a qid-grouped dataset (no qid stored)")
    indptr = load("indptr")
    X = MappedCSR(load("data"), load("indices"), indptr, (len(indptr) - 1, int(n_features)))
    return X, load("y"), load("qid")


def chunk_rows_for(X: MappedCSR, qid: np.ndarray, cache_size_mb: float) -> int:
    """Rows per chunk so that one chunk takes about CHUNK_SHARE of the cache budget.

    A row costs its non-zeros (value and index) plus its pointer, margin and qid; the solver
    makes one more float64 copy of the margins per chunk.
    """
    n_rows = X.shape[0]
    if n_rows == 0:
        return 1
    per_nnz = X.data.dtype.itemsize + X.indices.dtype.itemsize
    per_row = X.indptr.dtype.itemsize + 8 + 8 + qid.dtype.itemsize
    row_bytes = per_row + per_nnz * X.nnz / n_rows
    budget = float(cache_size_mb) * 2**20 * CHUNK_SHARE
    return int(max(1, min(n_rows, budget // row_bytes)))


def chunk_source(
    X: MappedCSR, margins: np.ndarray, qid: np.ndarray, chunk_rows: int
) -> Callable[[], Iterator[tuple[sp.csr_matrix, np.ndarray, np.ndarray]]]:
    """A callable giving a fresh iterator of (X, margins, qid) chunks of `chunk_rows` rows, each
    a copy of its rows only (the form `solvers.fit_structural_stream` takes as `source`)."""
    n_rows, n_features = X.shape
    step = int(chunk_rows)
    if step < 1:
        raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows!r}")

    def chunks():
        for r0 in range(0, n_rows, step):
            r1 = min(n_rows, r0 + step)
            ptr = np.array(X.indptr[r0 : r1 + 1], dtype=np.int64)
            p0, p1 = int(ptr[0]), int(ptr[-1])
            part = sp.csr_matrix(
                (np.array(X.data[p0:p1]), np.array(X.indices[p0:p1]), ptr - p0),
                shape=(r1 - r0, n_features),
            )
            yield part, np.array(margins[r0:r1], dtype=np.float64), np.array(qid[r0:r1])

    return chunks


def check_contiguous(qid: np.ndarray, scan_rows: int = SCAN_ROWS) -> None:
    """Raise ValueError unless each example's rows (equal qid) form one contiguous run.

    The online solver takes a run of equal qid as one example; an example split into several
    runs would silently become several examples. Runs in increasing qid order (the usual file
    layout) are confirmed in one scan with constant memory; otherwise a second scan compares the
    runs' values (one entry per run).
    """
    previous = None
    for _, values in _runs(qid, scan_rows):
        if values.size == 0:
            continue
        seq = values if previous is None else np.concatenate([[previous], values])
        if not np.all(seq[1:] > seq[:-1]):
            break
        previous = values[-1]
    else:
        return
    starts, values = zip(*_runs(qid, scan_rows), strict=True)
    _raise_on_split_example(np.concatenate(starts), np.concatenate(values))


def _runs(qid: np.ndarray, scan_rows: int):
    """(first rows, qid values) of the runs of equal qid, a block of rows at a time."""
    last = None
    for r0 in range(0, len(qid), scan_rows):
        part = np.asarray(qid[r0 : r0 + scan_rows])
        change = np.flatnonzero(part[1:] != part[:-1]) + 1
        if last is None or part[0] != last:
            change = np.concatenate([np.zeros(1, dtype=change.dtype), change])
        last = part[-1]
        yield change + r0, part[change]


def _raise_on_split_example(starts: np.ndarray, values: np.ndarray) -> None:
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    repeated = np.flatnonzero(sorted_values[1:] == sorted_values[:-1])
    if repeated.size == 0:
        return
    first = int(repeated[0])
    a, b = sorted((int(starts[order[first]]), int(starts[order[first + 1]])))
    value = sorted_values[first].item()
    raise ValueError(
        "the online mode reads each example's rows as one contiguous run, but qid "
        f"{value} appears in two separate runs (rows {a + 1} and {b + 1}); store the file "
        "with each qid's lines together, or train with online: false"
    )
