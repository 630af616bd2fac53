"""The constraint cache of the online shared-slack solver (`solvers.structural_stream`).

Cached constraint rows (CSR arrays, margin l̂, alpha, example slot, ‖x̂‖²) and the table of the
examples they belong to (id, C, Σ alpha), preallocated to a memory budget so that the compiled
kernels (`solvers._stream_kernels`) append and evict in place; snapshots restore a previous state.
"""

from __future__ import annotations

import numpy as np

# Bytes per cached non-zero (float64 value, uint32 index) and per cached row (pointer, margin,
# alpha, example slot, norm, plus one example-table entry of id, C, Σ alpha).
_NNZ_BYTES = 12
_ROW_BYTES = 64
_NNZ_SHARE = 0.75


class ConstraintCache:
    """The cached rows and the example table, preallocated to the memory budget."""

    def __init__(self, cache_size_mb):
        budget = float(cache_size_mb) * 2**20
        nnz_cap = max(16, int(budget * _NNZ_SHARE / _NNZ_BYTES))
        rows_cap = max(4, int(budget * (1 - _NNZ_SHARE) / _ROW_BYTES))
        self.cd = np.zeros(nnz_cap)
        self.ci = np.zeros(nnz_cap, dtype=np.uint32)
        self.cp = np.zeros(rows_cap + 1, dtype=np.int64)
        self.cl = np.zeros(rows_cap)
        self.ca = np.zeros(rows_cap)
        self.cg = np.zeros(rows_cap, dtype=np.int64)
        self.csq = np.zeros(rows_cap)
        self.gid = np.zeros(rows_cap, dtype=np.int64)
        self.gcap = np.zeros(rows_cap)
        self.gsum = np.zeros(rows_cap)
        self.istate = np.zeros(5, dtype=np.int64)  # rows, nnz, examples, n_sorted, cursor
        self.fstate = np.zeros(4)  # UB, Σ l̂ α, Σ φ, explored loss
        self.evicted_svs = 0
        self.peak_rows = 0

    @property
    def rows(self):
        return int(self.istate[0])

    @property
    def nnz(self):
        return int(self.istate[1])

    @property
    def n_examples(self):
        return int(self.istate[2])

    @property
    def n_sorted(self):
        return int(self.istate[3])

    def csr(self):
        n, z = self.rows, self.nnz
        return self.cd[:z], self.ci[:z], self.cp[: n + 1]

    _ROW_ARRAYS = ("cl", "ca", "cg", "csq")
    _EXAMPLE_ARRAYS = ("gid", "gcap", "gsum")

    def kernel_arrays(self):
        """The arrays `_stream_kernels.explore` fills, in its argument order."""
        return (self.cd, self.ci, self.cp, self.cl, self.ca, self.cg, self.csq, self.gid,
                self.gcap, self.gsum, self.istate, self.fstate)  # fmt: skip

    def snapshot(self):
        """The cache's content as plain arrays (for a warm start)."""
        n, z, m = self.rows, self.nnz, self.n_examples
        out = {
            "data": self.cd[:z].copy(),
            "indices": self.ci[:z].copy(),
            "indptr": self.cp[: n + 1].copy(),
        }
        out.update({name: getattr(self, name)[:n].copy() for name in self._ROW_ARRAYS})
        out.update({name: getattr(self, name)[:m].copy() for name in self._EXAMPLE_ARRAYS})
        return out

    def load(self, snap):
        n, z, m = len(snap["cl"]), len(snap["data"]), len(snap["gid"])
        if n > len(self.cl) or z > len(self.cd) or m > len(self.gid):
            raise ValueError(
                "warm_start cache does not fit in cache_size; give a larger cache_size"
            )
        self.cd[:z], self.ci[:z], self.cp[: n + 1] = snap["data"], snap["indices"], snap["indptr"]
        for name in self._ROW_ARRAYS:
            getattr(self, name)[:n] = snap[name]
        for name in self._EXAMPLE_ARRAYS:
            getattr(self, name)[:m] = snap[name]
        self.istate[:] = (n, z, m, m, 0)

    def keep_rows(self, keep):
        """Compact the cache to the rows where `keep` holds; drop examples left without rows."""
        n = self.rows
        data, ind, ptr = self.csr()
        lengths = np.diff(ptr)[keep]
        mask = np.repeat(keep, np.diff(ptr))
        z = int(lengths.sum())
        self.cd[:z] = data[mask]
        self.ci[:z] = ind[mask]
        self.cp[1 : len(lengths) + 1] = np.cumsum(lengths)
        for name in self._ROW_ARRAYS:
            arr = getattr(self, name)
            arr[: len(lengths)] = arr[:n][keep]
        self.istate[0], self.istate[1] = len(lengths), z
        self._sort_examples()

    def _sort_examples(self):
        m, n = self.n_examples, self.rows
        used = np.zeros(m, dtype=bool)
        used[self.cg[:n]] = True
        order = np.flatnonzero(used)
        order = order[np.argsort(self.gid[order], kind="stable")]
        new_slot = np.full(m, -1, dtype=np.int64)
        new_slot[order] = np.arange(len(order))
        for name in self._EXAMPLE_ARRAYS:
            arr = getattr(self, name)
            arr[: len(order)] = arr[order]
        self.cg[:n] = new_slot[self.cg[:n]]
        self.istate[2] = self.istate[3] = len(order)
