"""Model weights as a compressed binary blob (the `models.weights` column).

The blob is an `.npz` archive (zlib-compressed, no pickles). A dense model holds `coef`, shape
(n_outputs, n_features), and `intercept`, shape (n_outputs,), both float64. A model whose weights
are mostly zero (at most half its columns hold a non-zero weight) is stored sparsely: `columns`
(the columns with a weight, increasing), `values` (n_outputs, len(columns)), `intercept` and
`n_features`; loading it then costs its non-zeros, not its feature count.
"""

from __future__ import annotations

import io
from typing import NamedTuple

import numpy as np

SPARSE_BELOW = 0.5  # share of columns with a weight under which a model is stored sparsely


class Weights(NamedTuple):
    """A model's weights: `coef` (n_outputs, n_features), or (n_outputs, len(columns)) when
    `columns` is not None."""

    coef: np.ndarray
    intercept: np.ndarray
    columns: np.ndarray | None
    n_features: int

    def dense(self) -> np.ndarray:
        if self.columns is None:
            return self.coef
        out = np.zeros((self.coef.shape[0], self.n_features))
        out[:, self.columns] = self.coef
        return out


def pack_weights(coef: np.ndarray, intercept: np.ndarray | float) -> bytes:
    """Compress a model's weights (sparsely when most columns are zero).

    Parameters
    ----------
    coef : array, shape (n_outputs, n_features) or (n_features,)
    intercept : array, shape (n_outputs,), or a scalar

    Returns
    -------
    bytes
    """
    coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
    intercept = np.atleast_1d(np.asarray(intercept, dtype=np.float64))
    if intercept.shape != (coef.shape[0],):
        raise ValueError(
            f"intercept must have shape ({coef.shape[0]},) to match coef {coef.shape}, "
            f"got {intercept.shape}"
        )
    buffer = io.BytesIO()
    columns = np.flatnonzero(np.any(coef != 0, axis=0))
    if columns.size < SPARSE_BELOW * coef.shape[1]:
        np.savez_compressed(
            buffer,
            columns=columns,
            values=coef[:, columns],
            intercept=intercept,
            n_features=np.int64(coef.shape[1]),
        )
    else:
        np.savez_compressed(buffer, coef=coef, intercept=intercept)
    return buffer.getvalue()


def load_weights(blob: bytes) -> Weights:
    """Inverse of `pack_weights`, without densifying a sparse model."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        if "columns" in archive:
            return Weights(
                archive["values"],
                archive["intercept"],
                archive["columns"].astype(np.int64),
                int(archive["n_features"]),
            )
        coef = archive["coef"]
        return Weights(coef, archive["intercept"], None, coef.shape[1])


def unpack_weights(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """(coef (n_outputs, n_features), intercept (n_outputs,)), dense."""
    weights = load_weights(blob)
    return weights.dense(), weights.intercept
