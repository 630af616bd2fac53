"""Validated training data: X as CSR arrays ready for the kernels, labels and per-sample C.

Validation happens once, here, with messages that say what was expected and what was got. The
data are never copied without need: float32 values stay float32, int32 or int64 index arrays are
kept (the kernels get an unsigned view of ``indices``), and no bias column is appended.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers._sparse import unsigned_indices


@dataclass(frozen=True)
class CSRArrays:
    """The three CSR arrays as the kernels take them, plus the shape.

    data: (nnz,) float32 or float64; indices: (nnz,) uint32 or uint64 view; indptr: (n_samples + 1,)
    int32 or int64.
    """

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    n_samples: int
    n_features: int

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.indices.nbytes + self.indptr.nbytes


def check_csr(X) -> sp.csr_matrix | sp.csr_array:
    """Return X as CSR with float32/float64 values, canonical (sorted, no duplicate) indices.

    A CSR input in canonical form with float32/float64 values is returned as is (no copy); other
    sparse formats and dense arrays are converted; other value types become float64.
    """
    if sp.issparse(X):
        if X.format != "csr":
            X = X.tocsr()
    else:
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValueError(f"X must be a 2-D matrix, got an array of shape {arr.shape}")
        X = sp.csr_matrix(arr)
    if X.dtype not in (np.float32, np.float64):
        real = np.issubdtype(X.dtype, np.integer) or np.issubdtype(X.dtype, np.floating)
        if not (real or X.dtype == np.bool_):
            raise ValueError(f"X must hold real numbers, got dtype {X.dtype}")
        X = X.astype(np.float64)
    if X.indices.dtype not in (np.int32, np.int64) or X.indptr.dtype not in (np.int32, np.int64):
        X = X.copy()
        X.indices = X.indices.astype(np.int64)
        X.indptr = X.indptr.astype(np.int64)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    if not np.isfinite(X.data).all():
        raise ValueError("X contains NaN or infinite values; expected finite numbers")
    return X


def csr_arrays(X) -> CSRArrays:
    """The kernel view of an already validated CSR matrix (no copies)."""
    if not sp.issparse(X) or X.format != "csr":
        raise TypeError(f"expected a scipy CSR matrix, got {type(X).__name__}")
    if X.dtype not in (np.float32, np.float64):
        raise TypeError(f"expected float32 or float64 values, got {X.dtype}")
    if X.indptr.dtype not in (np.int32, np.int64):
        raise TypeError(f"expected int32 or int64 indptr, got {X.indptr.dtype}")
    n_samples, n_features = X.shape
    return CSRArrays(X.data, unsigned_indices(X.indices), X.indptr, n_samples, n_features)


def check_labels(y, n_samples: int, *, binary: bool) -> np.ndarray:
    """y as a float64 vector of length n_samples; in {-1, +1} when ``binary``."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise ValueError(f"y must have shape ({n_samples},) to match X, got {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("y contains NaN or infinite values")
    if binary:
        _check_binary(y)
    return y


def _check_binary(y: np.ndarray) -> None:
    # two comparisons rather than np.isin: fewer temporaries and no sort
    valid = y == 1.0
    valid |= y == -1.0
    if not valid.all():
        bad = np.unique(y[~valid])[:5]
        raise ValueError(f"binary labels must be -1 or +1, got values such as {bad.tolist()}")


def per_sample_C(C, n_samples: int) -> np.ndarray:
    """C as a float64 vector of length n_samples: a scalar C > 0 or one C_i ≥ 0 per sample."""
    C_arr = np.asarray(C, dtype=np.float64)
    if C_arr.ndim == 0:
        if not (np.isfinite(C_arr) and C_arr > 0):
            raise ValueError(f"C must be a finite number > 0, got {C!r}")
        return np.full(n_samples, float(C_arr))
    if C_arr.shape != (n_samples,):
        raise ValueError(f"C must be a scalar or have shape ({n_samples},), got {C_arr.shape}")
    if not np.isfinite(C_arr).all() or (C_arr < 0).any():
        raise ValueError("per-sample C must be finite and >= 0")
    return C_arr


def compact_C(C, n_samples: int) -> np.ndarray:
    """C as float64 without expanding a scalar: shape (1,) for a scalar C > 0 shared by all
    samples, else the validated (n_samples,) vector of C_i ≥ 0 (a float64 array is not copied).

    Kernels read C_i as ``C[i]`` when ``C.shape[0] > 1`` and ``C[0]`` otherwise.
    """
    C_arr = np.asarray(C, dtype=np.float64)
    if C_arr.ndim == 0:
        if not (np.isfinite(C_arr) and C_arr > 0):
            raise ValueError(f"C must be a finite number > 0, got {C!r}")
        return C_arr.reshape(1)
    return per_sample_C(C_arr, n_samples)


def sample_C(
    C: float,
    n_samples: int,
    sample_weight=None,
    class_weight_per_sample: np.ndarray | None = None,
) -> float | np.ndarray:
    """Fold sample and class weights into C: C_i = C · sample_weight_i · class_weight_{y_i}.

    Returns the scalar C when both weights are absent (the solvers then keep one value).
    """
    if not (np.isfinite(C) and C > 0):
        raise ValueError(f"C must be a finite number > 0, got {C!r}")
    if sample_weight is None and class_weight_per_sample is None:
        return float(C)
    out = np.full(n_samples, float(C))
    if sample_weight is not None:
        sw = np.asarray(sample_weight, dtype=np.float64)
        if sw.shape != (n_samples,):
            raise ValueError(f"sample_weight must have shape ({n_samples},), got {sw.shape}")
        if not np.isfinite(sw).all() or (sw < 0).any():
            raise ValueError("sample_weight must be finite and >= 0")
        out *= sw
    if class_weight_per_sample is not None:
        out *= class_weight_per_sample
    return out
