"""Where a distributed solve's partitions come from, and how each reaches its Dask worker.

A partition is a block of rows: its CSR matrix, its labels and optionally its sample weights
(`Partition`). Three kinds of source place one on a worker, each with its own way back after
that worker is lost:

- `InMemory`: the caller's own matrices, scattered to the worker by the driver; a lost copy is
  sent again from the driver (which holds them anyway).
- `InCluster`: a future of a `Partition` (or of an ``(X, y)`` pair) already in the cluster;
  a second copy is made on another worker when placed, so a lost worker leaves one elsewhere.
- `StoredRows`: rows [start, stop) of a dataset stored as `.npy` arrays (``data``, ``indices``,
  ``indptr``, ``y``, optionally ``sample_weight``) in a directory every worker can read; the
  worker reads its row range itself (only that range is read), and a lost
  worker's rows are simply read again elsewhere. The data never passes through the driver.

`stored_partitions` splits a stored dataset into K row ranges of about equal non-zeros.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import scipy.sparse as sp
from numpy.lib import format as npy


class Partition(NamedTuple):
    """One block of rows: X (CSR), y, and sample weights (None: all 1)."""

    X: Any
    y: np.ndarray
    sample_weight: np.ndarray | None = None


def as_partition(value) -> Partition:
    if isinstance(value, Partition):
        return value
    if isinstance(value, tuple) and len(value) in (2, 3):
        return Partition(*value)
    raise TypeError(f"a partition must be a Partition or an (X, y) pair, got {type(value)}")


class InMemory:
    """A partition held by the driver: scattered to a worker, sent again when lost."""

    kind = "memory"

    def __init__(self, partition: Partition):
        self.partition = partition
        self.n_rows = partition.X.shape[0]
        self.n_features = partition.X.shape[1]

    def place(self, client, worker):
        [future] = client.scatter([self.partition], workers=[worker], hash=False)
        return future

    def describe(self) -> dict:
        return {"kind": self.kind, "rows": self.n_rows}


class InCluster:
    """A future of a partition already in the cluster, kept in two copies on two workers.

    The second copy is a task of its own (not a Dask replica, which the cluster's memory
    manager may drop), so losing either worker leaves the other copy.
    """

    kind = "future"

    def __init__(self, future):
        self.copies = [future]
        self.n_rows = None

    def place(self, client, worker):
        if len(self.copies) == 1:
            self._copy_elsewhere(client)
        alive = [f for f in self.copies if f.status == "finished"]
        if not alive:
            raise RuntimeError("both copies of an in-cluster partition were lost")
        # the copy on the target worker first, else any live one
        who_has = client.who_has(alive)
        alive.sort(key=lambda f: worker not in who_has.get(f.key, ()))
        return alive[0]

    def _copy_elsewhere(self, client):
        original = self.copies[0]
        holders = set(client.who_has([original]).get(original.key, ()))
        others = [w for w in sorted(client.scheduler_info()["workers"]) if w not in holders]
        if not others:
            return  # one worker: nowhere else to keep a copy
        copy = client.submit(_same, original, workers=[others[0]], allow_other_workers=False,
                             pure=False)  # fmt: skip
        copy.result()
        self.copies.append(copy)

    def describe(self) -> dict:
        return {"kind": self.kind, "copies": len(self.copies)}


def _same(value):
    return value


class StoredRows:
    """Rows [start, stop) of a stored dataset, read by the worker that holds them."""

    kind = "stored"

    def __init__(self, directory, start: int, stop: int, n_features: int):
        self.directory = str(directory)
        self.start, self.stop, self.n_features = int(start), int(stop), int(n_features)
        self.n_rows = self.stop - self.start

    def place(self, client, worker):
        return self  # small: the worker reads the rows itself

    def load(self) -> Partition:
        directory = Path(self.directory)
        indptr = read_range(directory / "indptr.npy", self.start, self.stop + 1)
        first, last = int(indptr[0]), int(indptr[-1])
        data = read_range(directory / "data.npy", first, last)
        indices = read_range(directory / "indices.npy", first, last)
        X = sp.csr_matrix(
            (data, indices, indptr - first), shape=(self.n_rows, self.n_features), copy=False
        )
        y = read_range(directory / "y.npy", self.start, self.stop)
        weights = directory / "sample_weight.npy"
        sw = read_range(weights, self.start, self.stop) if weights.exists() else None
        return Partition(X, y, sw)

    def describe(self) -> dict:
        return {"kind": self.kind, "rows": self.n_rows, "start": self.start, "stop": self.stop}


def read_range(path, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of a 1-D `.npy` file, read into a new array (no memory map, whose
    pages would count in the process's memory while the copy is made)."""
    with open(path, "rb") as f:
        major, _ = npy.read_magic(f)
        read_header = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if len(shape) != 1 or fortran:
            raise ValueError(f"{path} is not a 1-D array")
        if not 0 <= start <= stop <= shape[0]:
            raise ValueError(f"rows [{start}, {stop}) are outside {path} of length {shape[0]}")
        f.seek(start * dtype.itemsize, 1)
        out = np.fromfile(f, dtype=dtype, count=stop - start)
    if out.shape[0] != stop - start:
        raise ValueError(f"{path} is shorter than its header says")
    return out


def stored_partitions(directory, n_partitions: int, n_features: int | None = None):
    """K `StoredRows` over a stored dataset, cut where the non-zeros split evenly.

    Only ``indptr`` is read here (memory-mapped: a few pages per cut); ``n_features`` defaults to
    the largest column index + 1, which reads ``indices`` once (pass it when it is known).
    """
    directory = Path(directory)
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, int) or n_partitions < 1:
        raise ValueError(f"n_partitions must be an integer >= 1, got {n_partitions!r}")
    indptr = np.load(directory / "indptr.npy", mmap_mode="r", allow_pickle=False)
    n_rows = indptr.shape[0] - 1
    if n_partitions > max(n_rows, 1):
        raise ValueError(f"n_partitions ({n_partitions}) exceeds the {n_rows} rows")
    if n_features is None:
        indices = np.load(directory / "indices.npy", mmap_mode="r", allow_pickle=False)
        n_features = int(indices.max()) + 1 if indices.size else 0
    cuts = balanced_cuts(indptr, n_partitions)
    return [
        StoredRows(directory, a, b, n_features) for a, b in zip(cuts[:-1], cuts[1:], strict=True)
    ]


def balanced_cuts(indptr, n_partitions: int) -> list[int]:
    """Row boundaries 0 = c_0 < ... < c_K = n splitting the non-zeros about evenly (each part
    keeps at least one row)."""
    n_rows = indptr.shape[0] - 1
    nnz = int(indptr[-1])
    targets = [nnz * k // n_partitions for k in range(1, n_partitions)]
    cuts = [0]
    for k, target in enumerate(targets, start=1):
        row = int(np.searchsorted(indptr, target, side="left"))
        lowest, highest = cuts[-1] + 1, n_rows - (n_partitions - k)
        cuts.append(min(max(row, lowest), highest))
    cuts.append(n_rows)
    return cuts


def split_rows(X, y, n_partitions: int, sample_weight=None) -> list[Partition]:
    """A CSR matrix cut into K row blocks of about equal non-zeros (a helper for callers that
    hold the whole matrix, e.g. tests and benchmarks)."""
    X = sp.csr_matrix(X)
    cuts = balanced_cuts(X.indptr, n_partitions)
    y = np.asarray(y)
    parts = []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        sw = None if sample_weight is None else np.asarray(sample_weight)[a:b]
        parts.append(Partition(X[a:b], y[a:b], sw))
    return parts
