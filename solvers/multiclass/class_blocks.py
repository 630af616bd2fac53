"""Storage of one-vs-rest's W and α when the classes are split into blocks, one per thread.

Class c belongs to block c mod n_blocks. Each block owns one contiguous region of one buffer per
array, shaped (rows, kb) with its kb classes feature- (or row-) major, so threads write to
separate memory: sharing one interleaved array, even with blocks on separate cache lines, made
two threads slower than one (the hardware prefetchers stream through the neighbours' lines).
`ClassBlocks.take` turns each buffer, in place, into the (k, rows) array in class order that the
result returns, so the model is never copied.
"""

from __future__ import annotations

import numpy as np

from solvers.multiclass.ovr_kernels import interleave_regions


class ClassBlocks:
    """W (n_features rows) and α (n_samples rows) of k classes split into ``n_blocks`` blocks."""

    def __init__(self, k: int, n_blocks: int, n_features: int, n_samples: int):
        self.k = k
        self.classes = [np.arange(b, k, n_blocks) for b in range(n_blocks)]
        sizes = np.array([c.shape[0] for c in self.classes], dtype=np.int64)
        self._sizes = sizes
        self._firsts = np.concatenate(([0], np.cumsum(sizes)[:-1]))  # in classes
        self._W = np.zeros(n_features * k)
        self._alpha = np.zeros(n_samples * k)

    def of_block(self, per_class: np.ndarray, b: int) -> np.ndarray:
        """Block b's entries of an array whose first axis is the k classes, as a view (its
        classes are every n_blocks-th from b)."""
        return per_class[b :: len(self.classes)]

    def regions(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Block b's (n_features, kb) W and (n_samples, kb) α, views of the shared buffers."""
        return self._region(self._W, b), self._region(self._alpha, b)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        """(W (k, n_features), α (k, n_samples)) in class order; the regions are spent."""
        return self._interleave(self._W).T, self._interleave(self._alpha).T

    def _region(self, buf, b):
        rows = buf.shape[0] // self.k
        first, size = self._firsts[b], self._sizes[b]
        return buf[rows * first : rows * (first + size)].reshape(rows, size)

    def _interleave(self, buf):
        """The (rows, k) array of ``buf``'s regions, by a permutation in place
        (`interleave_regions`: cycles, with a bitmap of rows · k bits)."""
        rows = buf.shape[0] // self.k
        if len(self.classes) > 1:
            block_of = np.empty(self.k, dtype=np.int64)
            slot = np.empty(self.k, dtype=np.int64)
            for b, classes in enumerate(self.classes):
                block_of[classes] = b
                slot[classes] = np.arange(classes.shape[0])
            starts = self._firsts * rows
            interleave_regions(buf, rows, self.k, block_of, slot, starts, self._sizes)
        return buf.reshape(rows, self.k)
