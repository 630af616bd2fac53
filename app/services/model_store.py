"""Model weights as a compressed binary blob (the `models.weights` column).

The blob is an `.npz` archive (zlib-compressed, no pickles) holding `coef`, shape
(n_outputs, n_features), and `intercept`, shape (n_outputs,), both float64.
"""

from __future__ import annotations

import io

import numpy as np


def pack_weights(coef: np.ndarray, intercept: np.ndarray | float) -> bytes:
    """Compress a model's weights.

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
    np.savez_compressed(buffer, coef=coef, intercept=intercept)
    return buffer.getvalue()


def unpack_weights(blob: bytes) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `pack_weights`: (coef (n_outputs, n_features), intercept (n_outputs,))."""
    with np.load(io.BytesIO(blob), allow_pickle=False) as archive:
        return archive["coef"], archive["intercept"]
