"""Where a distributed solve's partitions come from, and how each reaches its Dask worker.

A partition is a block of rows: its CSR matrix, its labels and optionally its sample weights
(`Partition`). Three kinds of source place one on a worker, each with its own way back after
that worker is lost:

- `InMemory`: the caller's own matrices, scattered to the worker by the driver; a lost copy is
  sent again from the driver (which holds them anyway).
- `InCluster`: a future of a `Partition` (or of an ``(X, y)`` pair) already in the cluster;
  a second copy is made on another worker when placed, so a lost worker leaves one elsewhere.
- `StoredRows`: rows [start, stop) of a dataset stored as `.npy` arrays (``data``, ``indices``,
  ``indptr``, ``y``, optionally ``sample_weight``) in a directory every worker can read, or in
  any store an ``arrays`` opener reads byte ranges of; the
  worker reads its row range itself (only that range is read), and a lost
  worker's rows are simply read again elsewhere. The data never passes through the driver.

`stored_partitions` splits a stored dataset into K row ranges of about equal non-zeros;
`dask_partitions` turns a Dask collection (a bag of partitions, or an array chunked by rows)
into futures of partitions computed in the cluster, which then are `InCluster` sources.
"""

from __future__ import annotations

import os
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


class LocalArrays:
    """Opens a stored dataset's arrays as files of a directory (``<name>.npy``)."""

    def __init__(self, directory):
        self.directory = str(directory)

    def open(self, name: str):
        return open(Path(self.directory) / f"{name}.npy", "rb")  # noqa: SIM115 - the caller's

    def exists(self, name: str) -> bool:
        return (Path(self.directory) / f"{name}.npy").is_file()


def as_arrays(arrays):
    """A directory (str or path) as `LocalArrays`; an opener as it is."""
    return LocalArrays(arrays) if isinstance(arrays, str | os.PathLike) else arrays


class StoredRows:
    """Rows [start, stop) of a stored dataset, read by the worker that holds them.

    ``arrays`` opens the dataset's arrays by name (``data``, ``indices``, ``indptr``, ``y``,
    ``sample_weight``): a directory (`LocalArrays`), or any picklable object with ``open(name)``
    returning a seekable binary file and ``exists(name)``, e.g. one reading byte ranges of
    objects in a remote store.
    """

    kind = "stored"

    def __init__(self, arrays, start: int, stop: int, n_features: int):
        self.arrays = as_arrays(arrays)
        self.start, self.stop, self.n_features = int(start), int(stop), int(n_features)
        self.n_rows = self.stop - self.start

    def place(self, client, worker):
        return self  # small: the worker reads the rows itself

    def load(self) -> Partition:
        arrays = self.arrays
        indptr = read_range(arrays, "indptr", self.start, self.stop + 1)
        first, last = int(indptr[0]), int(indptr[-1])
        data = read_range(arrays, "data", first, last)
        indices = read_range(arrays, "indices", first, last)
        X = sp.csr_matrix(
            (data, indices, indptr - first), shape=(self.n_rows, self.n_features), copy=False
        )
        y = read_range(arrays, "y", self.start, self.stop)
        sw = None
        if arrays.exists("sample_weight"):
            sw = read_range(arrays, "sample_weight", self.start, self.stop)
        return Partition(X, y, sw)

    def describe(self) -> dict:
        return {"kind": self.kind, "rows": self.n_rows, "start": self.start, "stop": self.stop}


def read_range(arrays, name: str, start: int, stop: int) -> np.ndarray:
    """Elements [start, stop) of the 1-D `.npy` array ``name``, read straight into a new array
    (no memory map, whose pages would count in the process's memory while the copy is made)."""
    with arrays.open(name) as f:
        major, _ = npy.read_magic(f)
        read_header = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        if len(shape) != 1 or fortran:
            raise ValueError(f"stored array {name!r} is not a 1-D array")
        if not 0 <= start <= stop <= shape[0]:
            raise ValueError(f"rows [{start}, {stop}) are outside {name!r} of length {shape[0]}")
        f.seek(start * dtype.itemsize, 1)
        out = np.empty(stop - start, dtype=dtype)
        view, got = memoryview(out).cast("B"), 0
        while got < view.nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise ValueError(f"stored array {name!r} is shorter than its header says")
            got += n
    return out


def stored_partitions(arrays, n_partitions: int, n_features: int):
    """K `StoredRows` over a stored dataset (a directory, or an ``arrays`` opener as in
    `StoredRows`), cut where the non-zeros split evenly. Only ``indptr`` is read here."""
    if isinstance(n_partitions, bool) or not isinstance(n_partitions, int) or n_partitions < 1:
        raise ValueError(f"n_partitions must be an integer >= 1, got {n_partitions!r}")
    arrays = as_arrays(arrays)
    with arrays.open("indptr") as f:
        major, _ = npy.read_magic(f)
        read_header = npy.read_array_header_1_0 if major == 1 else npy.read_array_header_2_0
        n_rows = read_header(f)[0][0] - 1
    if n_partitions > max(n_rows, 1):
        raise ValueError(f"n_partitions ({n_partitions}) exceeds the {n_rows} rows")
    indptr = read_range(arrays, "indptr", 0, n_rows + 1)  # 8 bytes a row, never the data
    cuts = balanced_cuts(indptr, n_partitions)
    return [
        StoredRows(arrays, a, b, n_features) for a, b in zip(cuts[:-1], cuts[1:], strict=True)
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


def is_dask_collection(value) -> bool:
    """A Dask bag or array (without importing Dask for anything else); other Dask collections
    (data frames) are refused by name."""
    module = type(value).__module__
    if module.startswith(("dask.bag", "dask.array")) and hasattr(value, "to_delayed"):
        return True
    if module.startswith(("dask.", "dask_expr")):
        raise TypeError(f"partitions may be a Dask bag or array, not a {type(value).__name__}")
    return False


def dask_partitions(client, X, y=None, sample_weight=None) -> list:
    """Futures of `Partition`, computed where the collection lives (never on the driver).

    ``X`` is a Dask bag whose elements are partitions (`Partition` or ``(X, y[, weights])``),
    one partition an element, with ``y`` None; or a 2-D Dask array chunked by rows only (its
    chunks CSR matrices or dense arrays), one partition a row chunk, with ``y`` (and
    ``sample_weight``) 1-D Dask arrays of the same row chunks.
    """
    import dask.array as da
    import dask.bag as db

    if isinstance(X, db.Bag):
        if y is not None or sample_weight is not None:
            raise ValueError("a bag's elements carry their own labels: y_parts must be None")
        lists = client.compute(X.map(as_partition).to_delayed())
        sizes = client.gather(client.map(len, lists))
        return [client.submit(_item, part, i, pure=False)
                for part, n in zip(lists, sizes, strict=True) for i in range(n)]  # fmt: skip
    if not isinstance(X, da.Array) or X.ndim != 2 or len(X.chunks[1]) != 1:
        raise ValueError("a Dask array X must be 2-D and chunked by rows only")
    if y is None:
        raise ValueError("a Dask array X needs its labels: y_parts as a 1-D array")
    from dask import delayed

    rows = X.chunks[0]
    labels = _row_chunks(y, rows, "y_parts")
    weights = [None] * len(rows) if sample_weight is None else _row_chunks(
        sample_weight, rows, "sample_weight")  # fmt: skip
    parts = zip(X.to_delayed()[:, 0], labels, weights, strict=True)
    return client.compute([delayed(_array_partition)(x, yk, swk) for x, yk, swk in parts])


def _row_chunks(v, chunks, name):
    """A 1-D array's pieces along X's row chunks (a NumPy array is cut the same way)."""
    import dask.array as da

    if isinstance(v, np.ndarray) and v.ndim == 1 and v.shape[0] == sum(chunks):
        v = da.from_array(v, chunks=(chunks,))
    if not isinstance(v, da.Array) or v.ndim != 1 or v.chunks[0] != chunks:
        raise ValueError(f"{name} must be a 1-D array with the row chunks of X")
    return list(v.to_delayed())


def _array_partition(X, y, sample_weight=None) -> Partition:
    """One row chunk as a partition, checked as the input door checks matrices in memory."""
    from solvers._core.problem import check_csr

    X = check_csr(sp.csr_matrix(X), "a row chunk of X")
    sw = None
    if sample_weight is not None:
        sw = np.asarray(sample_weight, dtype=np.float64)
        if sw.shape != (X.shape[0],) or not np.isfinite(sw).all() or (sw < 0).any():
            raise ValueError("sample_weight must be finite and >= 0 in every row chunk")
    return Partition(X, np.asarray(y), sw)


def _item(values, i):
    return values[i]
