"""The constraint cache of the online shared-slack solver (`solvers.structural.stream`).

Cached constraint rows (CSR arrays, margin l̂, alpha, example slot, ‖x̂‖²) and the table of the
examples they belong to (id, C, Σ alpha), preallocated to a memory budget so that the compiled
kernels (`solvers.structural.stream_kernels`) append and evict in place; snapshots restore a
previous state. The example table is sorted by id up to ``n_sorted``; newer examples are
appended after it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from solvers._core.problem import CSRArrays

# Bytes per cached non-zero (float64 value, uint32 index) and per cached row (pointer, margin,
# alpha, example slot, norm, plus one example-table entry of id, C, Σ alpha).
_NNZ_BYTES = 12
_ROW_BYTES = 64
_NNZ_SHARE = 0.75

# Fields of `CacheArrays.counts` and `CacheArrays.sums`.
ROWS, NNZ, EXAMPLES, N_SORTED, CURSOR = range(5)
CACHED_UB, MARGIN_SUM, PHI_SUM, EXPLORED_LOSS = range(4)


class CacheArrays(NamedTuple):
    """The cache's arrays at full capacity, as `stream_kernels.explore` takes them.

    counts: int64 [rows, nnz, examples, n_sorted, cursor (the example table's search position)];
    sums: float64 [UB of the cached problem, Σ l̂ alpha, Σ φ, Σ C · max(0, max_j g) seen while
    exploring].
    """

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    margins: np.ndarray
    alpha: np.ndarray
    slot: np.ndarray
    sq_norms: np.ndarray
    example_id: np.ndarray
    example_C: np.ndarray
    example_alpha: np.ndarray
    counts: np.ndarray
    sums: np.ndarray


_ROW_ARRAYS = ("margins", "alpha", "slot", "sq_norms")
_EXAMPLE_ARRAYS = ("example_id", "example_C", "example_alpha")


class ConstraintCache:
    """The cached rows and the example table, preallocated to the memory budget."""

    def __init__(self, cache_size_mb, n_features):
        budget = float(cache_size_mb) * 2**20
        nnz_cap = max(16, int(budget * _NNZ_SHARE / _NNZ_BYTES))
        rows_cap = max(4, int(budget * (1 - _NNZ_SHARE) / _ROW_BYTES))
        self.n_features = n_features
        self.arrays = CacheArrays(
            data=np.zeros(nnz_cap),
            indices=np.zeros(nnz_cap, dtype=np.uint32),
            indptr=np.zeros(rows_cap + 1, dtype=np.int64),
            margins=np.zeros(rows_cap),
            alpha=np.zeros(rows_cap),
            slot=np.zeros(rows_cap, dtype=np.int64),
            sq_norms=np.zeros(rows_cap),
            example_id=np.zeros(rows_cap, dtype=np.int64),
            example_C=np.zeros(rows_cap),
            example_alpha=np.zeros(rows_cap),
            counts=np.zeros(5, dtype=np.int64),
            sums=np.zeros(4),
        )
        self.evicted_svs = 0
        self.peak_rows = 0

    @property
    def rows(self) -> int:
        return int(self.arrays.counts[ROWS])

    @property
    def nnz(self) -> int:
        return int(self.arrays.counts[NNZ])

    @property
    def n_examples(self) -> int:
        return int(self.arrays.counts[EXAMPLES])

    @property
    def row_capacity(self) -> int:
        return self.arrays.margins.shape[0]

    @property
    def nnz_capacity(self) -> int:
        return self.arrays.data.shape[0]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays)

    def csr(self, full_capacity=False) -> CSRArrays:
        """The cached rows (or the whole preallocated arrays) as the door's CSR view."""
        a = self.arrays
        if full_capacity:
            return CSRArrays(a.data, a.indices, a.indptr, self.n_features)
        n, z = self.rows, self.nnz
        return CSRArrays(a.data[:z], a.indices[:z], a.indptr[: n + 1], self.n_features)

    def row_view(self, name):
        """One per-row array, cut to the cached rows."""
        return getattr(self.arrays, name)[: self.rows]

    def example_view(self, name):
        """One per-example array, cut to the examples in the table."""
        return getattr(self.arrays, name)[: self.n_examples]

    def snapshot(self):
        """The cache's content as plain arrays (for a warm start)."""
        csr = self.csr()
        out = {"data": csr.data.copy(), "indices": csr.indices.copy(), "indptr": csr.indptr.copy()}
        out.update({name: self.row_view(name).copy() for name in _ROW_ARRAYS})
        out.update({name: self.example_view(name).copy() for name in _EXAMPLE_ARRAYS})
        return out

    def load(self, snap):
        n, z, m = len(snap["margins"]), len(snap["data"]), len(snap["example_id"])
        if n > self.row_capacity or z > self.nnz_capacity or m > self.row_capacity:
            raise ValueError(
                "warm_start cache does not fit in cache_size; give a larger cache_size"
            )
        a = self.arrays
        a.data[:z], a.indices[:z], a.indptr[: n + 1] = snap["data"], snap["indices"], snap["indptr"]
        for name in _ROW_ARRAYS:
            getattr(a, name)[:n] = snap[name]
        for name in _EXAMPLE_ARRAYS:
            getattr(a, name)[:m] = snap[name]
        a.counts[:] = (n, z, m, m, 0)

    def keep_rows(self, keep):
        """Compact the cache to the rows where `keep` holds; drop examples left without rows."""
        a = self.arrays
        n = self.rows
        csr = self.csr()
        lengths = np.diff(csr.indptr)[keep]
        mask = np.repeat(keep, np.diff(csr.indptr))
        z = int(lengths.sum())
        a.data[:z] = csr.data[mask]
        a.indices[:z] = csr.indices[mask]
        a.indptr[1 : len(lengths) + 1] = np.cumsum(lengths)
        for name in _ROW_ARRAYS:
            arr = getattr(a, name)
            arr[: len(lengths)] = arr[:n][keep]
        a.counts[ROWS], a.counts[NNZ] = len(lengths), z
        self._sort_examples()

    def _sort_examples(self):
        a = self.arrays
        m, n = self.n_examples, self.rows
        used = np.zeros(m, dtype=bool)
        used[a.slot[:n]] = True
        order = np.flatnonzero(used)
        order = order[np.argsort(a.example_id[order], kind="stable")]
        new_slot = np.full(m, -1, dtype=np.int64)
        new_slot[order] = np.arange(len(order))
        for name in _EXAMPLE_ARRAYS:
            arr = getattr(a, name)
            arr[: len(order)] = arr[order]
        a.slot[:n] = new_slot[a.slot[:n]]
        a.counts[EXAMPLES] = a.counts[N_SORTED] = len(order)
