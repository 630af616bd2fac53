"""The input door: every solver and estimator validates its training data here, once.

`csr_arrays` turns X (scipy CSR, CSC or COO, sparse array or matrix, or a dense 2-D array) into
`CSRArrays`, the view the compiled kernels take. A CSR matrix in canonical form (sorted indices,
no duplicates) with float32 or float64 values and int32 or int64 index arrays is not copied:
float32 stays float32 and the kernels read an unsigned view of ``indices`` (with signed indices
Numba checks every access for a negative index). Anything else is converted once, here:

- other formats and dense arrays become CSR; integer and boolean values become float64; complex,
  object and other non-real values are refused with a `ValueError`;
- unsorted indices and duplicate entries are summed into canonical form (a copy); explicit zeros
  are kept (they change nothing);
- ``indices`` and ``indptr`` reach the kernels as one of two pairs, (uint32, int32) or
  (uint64, int64): of a mixed pair only the small ``indptr`` is converted (narrowed when the
  entry count fits an int32, widened otherwise), unless ``indices`` must widen because the
  entries outnumber what int32 can address (``INT32_ENTRIES``).

Every entry is checked to be finite and at most ``MAX_ABS_VALUE`` (1e100) in magnitude, and
every index to lie in [0, n_features): a malformed matrix must fail here, not write outside the
weight vector, and values whose squares overflow must not train an all-zero model. A
`CSRArrays` passed back in is trusted as is, so a caller that solves many problems on the same
data validates it once.

Labels and per-sample C are checked by the helpers below, with messages that say what was
expected and what was got.

A solve may run on a subset of the rows (``rows=``, an index array): X, y and any per-sample C
stay whole and shared, and `check_rows` and `restrict_C` give the drivers the subset as C_i = 0
outside it (the drivers already drop such rows), so that cross-validation folds share one copy
of X.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from solvers._core.sparse import MAX_ABS_VALUE, entries_in_range, unsigned_indices

# Entries that int32 index arrays can address; the door widens beyond it. A module constant so
# that tests can simulate a matrix of 2³¹ entries on a small one.
INT32_ENTRIES = 2**31 - 1


class CSRArrays(NamedTuple):
    """A validated CSR matrix as the kernels take it (a NamedTuple: it crosses into Numba).

    data: (nnz,) float32 or float64; indices: (nnz,) uint32 or uint64, an unsigned view of the
    column indices; indptr: (n_samples + 1,) int32 or int64, of the same width as indices;
    n_features: the number of columns.
    """

    data: np.ndarray
    indices: np.ndarray
    indptr: np.ndarray
    n_features: int

    @property
    def n_samples(self) -> int:
        return self.indptr.shape[0] - 1

    @property
    def shape(self) -> tuple[int, int]:
        return self.n_samples, self.n_features

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    @property
    def nbytes(self) -> int:
        return self.data.nbytes + self.indices.nbytes + self.indptr.nbytes

    def to_scipy(self) -> sp.csr_matrix:
        """The same matrix as scipy CSR over the same arrays (signed views, no copy)."""
        signed = np.int32 if self.indices.dtype == np.uint32 else np.int64
        return sp.csr_matrix(
            (self.data, self.indices.view(signed), self.indptr),
            shape=self.shape,
            copy=False,
        )


def csr_arrays(X, name: str = "X") -> CSRArrays:
    """The kernel view of X after the door's checks (see the module docstring)."""
    if isinstance(X, CSRArrays):
        return X
    X = check_csr(X, name)
    return CSRArrays(X.data, unsigned_indices(X.indices), X.indptr, int(X.shape[1]))


def check_csr(X, name: str = "X") -> sp.csr_matrix | sp.csr_array:
    """X as canonical CSR with float32/float64 values and a kernel index pair (module docstring).

    A matrix that already is all of that is returned as is, without a copy.
    """
    if isinstance(X, CSRArrays):
        return X.to_scipy()
    if sp.issparse(X):
        _check_value_dtype(X.dtype, name)
        if X.format != "csr":
            X = X.tocsr()
    else:
        arr = np.asarray(X)
        if arr.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got an array of shape {arr.shape}")
        _check_value_dtype(arr.dtype, name)
        X = sp.csr_matrix(arr)
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    X = _with_kernel_index_pair(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()
    n_features = X.shape[1]
    problem = entries_in_range(X.data, unsigned_indices(X.indices), n_features)
    if problem == 1:
        raise ValueError(f"{name} contains NaN or infinite values; expected finite numbers")
    if problem == 2:
        raise ValueError(f"{name} has a column index outside [0, {n_features}); malformed matrix")
    if problem == 3:
        raise ValueError(
            f"{name} has values beyond ±{MAX_ABS_VALUE:g}, where the squares of a row's values "
            "overflow a float64 or come close; scale the features"
        )
    return X


def _check_value_dtype(dtype, name):
    real = np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)
    if not (real or dtype == np.bool_):
        raise ValueError(
            f"{name} must hold real numbers (float32 or float64, used as they are; integers and "
            f"booleans are converted to float64), got dtype {dtype}"
        )


def _with_kernel_index_pair(X):
    """X whose (indices, indptr) is (int32, int32) or (int64, int64), converting the least."""
    indices, indptr = X.indices, X.indptr
    if indices.dtype not in (np.int32, np.int64):
        indices = indices.astype(np.int64)
    if indptr.dtype not in (np.int32, np.int64):
        indptr = indptr.astype(np.int64)
    if indices.dtype != indptr.dtype:
        if indptr[-1] > INT32_ENTRIES:
            indices, indptr = indices.astype(np.int64), indptr.astype(np.int64)
        else:
            indptr = indptr.astype(indices.dtype)  # n_samples + 1 entries: the cheap side
    elif indices.dtype == np.int32 and indptr[-1] > INT32_ENTRIES:
        indices, indptr = indices.astype(np.int64), indptr.astype(np.int64)
    if indices is X.indices and indptr is X.indptr:
        return X
    # assigned, not passed to the constructor, which may pick (and copy to) its own index type
    out = type(X)(X.shape, dtype=X.dtype)
    out.data, out.indices, out.indptr = X.data, indices, indptr
    return out


def check_labels(y, n_samples: int, *, binary: bool) -> np.ndarray:
    """y as a float64 vector of length n_samples; in {-1, +1} when ``binary``."""
    y = np.asarray(y, dtype=np.float64)
    if y.ndim != 1 or y.shape[0] != n_samples:
        raise ValueError(f"y must have shape ({n_samples},) to match X, got {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError("y contains NaN or infinite values")
    if binary:
        _check_binary(y)
    else:
        _check_target_range(y)
    return y


def check_targets(y, n_samples: int) -> np.ndarray:
    """Regression targets: a finite float64 vector of length n_samples within ±MAX_ABS_VALUE."""
    y = check_vector(y, n_samples, "y")
    _check_target_range(y)
    return y


def _check_target_range(y: np.ndarray) -> None:
    # the losses square y − w̃ᵀx̃: beyond the bound the objectives overflow to inf or nan
    if y.size and np.abs(y).max() > MAX_ABS_VALUE:
        raise ValueError(
            f"y has values beyond ±{MAX_ABS_VALUE:g}, where the squared losses overflow a "
            "float64; scale the targets"
        )


def _check_binary(y: np.ndarray) -> None:
    # two comparisons rather than np.isin: fewer temporaries and no sort
    valid = y == 1.0
    valid |= y == -1.0
    if not valid.all():
        bad = np.unique(y[~valid])[:5]
        raise ValueError(f"binary labels must be -1 or +1, got values such as {bad.tolist()}")


def check_class_labels(y, n_samples: int, n_classes: int) -> np.ndarray:
    """y as int64 class indices 0..n_classes-1 of length n_samples."""
    if int(n_classes) != n_classes or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
    y = np.asarray(y)
    if y.shape != (n_samples,):
        raise ValueError(f"y must have shape ({n_samples},) to match X, got {y.shape}")
    if y.size and not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.mod(y, 1) == 0):
            raise ValueError("y must hold integer class indices 0..n_classes-1, got non-integers")
    y = y.astype(np.int64)
    if y.size and (y.min() < 0 or y.max() >= n_classes):
        raise ValueError(
            f"y must hold class indices in [0, {int(n_classes) - 1}], got values in "
            f"[{y.min()}, {y.max()}]"
        )
    return y


def check_vector(values, n: int, name: str) -> np.ndarray:
    """A finite float64 vector of length n (margins, targets, ...)."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,) or not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite with shape ({n},), got shape {arr.shape}")
    return arr


def per_sample_C(C, n: int, unit: str = "sample") -> np.ndarray:
    """C as a float64 vector of length n: a scalar C > 0 or one C_i >= 0 per ``unit``."""
    C_arr = np.asarray(C, dtype=np.float64)
    if C_arr.ndim == 0:
        if not (np.isfinite(C_arr) and C_arr > 0):
            raise ValueError(f"C must be a finite number > 0, got {C!r}")
        return np.full(n, float(C_arr))
    if C_arr.shape != (n,):
        raise ValueError(
            f"C must be a scalar or have one value per {unit}, shape ({n},); got {C_arr.shape}"
        )
    if not np.isfinite(C_arr).all() or (C_arr < 0).any():
        raise ValueError(f"per-{unit} C must be finite and >= 0")
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


def check_rows(rows, n_samples: int) -> np.ndarray | None:
    """The rows of a subset solve as int64, distinct and in [0, n_samples); None means all.

    A solve on ``rows`` is the solve on ``X[rows]``, ``y[rows]``, ``C[rows]``: its dual variables
    come back in the order of ``rows``, and with increasing ``rows`` its iterates are those of the
    solve on the copied rows.
    """
    if rows is None:
        return None
    arr = np.asarray(rows)
    if arr.ndim != 1 or (arr.size and not np.issubdtype(arr.dtype, np.integer)):
        raise ValueError(
            f"rows must be a 1-D array of row indices (integers), got dtype {arr.dtype} and "
            f"shape {arr.shape}"
        )
    arr = arr.astype(np.int64, copy=False)  # the caller's int64 array is only read
    if arr.size and (arr.min() < 0 or arr.max() >= n_samples):
        raise ValueError(
            f"rows must lie in [0, {n_samples}), got values in [{arr.min()}, {arr.max()}]"
        )
    seen = np.zeros(n_samples, dtype=np.bool_)
    seen[arr] = True
    if np.count_nonzero(seen) != arr.size:
        raise ValueError("rows must be distinct; a row index appears more than once")
    return arr


def restrict_C(C: np.ndarray, n_samples: int, rows: np.ndarray | None) -> np.ndarray:
    """C (validated: shape (1,) for one shared value, (n,) or (k, n)) over all n_samples rows and
    zero outside ``rows``: the drivers drop the rows with C_i = 0, so the solve is that of the
    subset. C itself when ``rows`` is None."""
    if rows is None:
        return C
    out = np.zeros(C.shape[:-1] + (n_samples,))
    out[..., rows] = C if C.shape[-1] == 1 else C[..., rows]
    return out


def subset_alpha(result, rows: np.ndarray | None):
    """The result of a solve restricted by `restrict_C`, with the α of its own rows only (last
    axis; the others had C_i = 0, so α_i = 0). The result itself when ``rows`` is None."""
    if rows is None:
        return result
    return replace(result, alpha=result.alpha[..., rows])


def fold_weights_into_C(
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
        if n_samples and not sw.any():
            raise ValueError("sample_weight must hold at least one non-zero weight; all are zero")
        out *= sw
    if class_weight_per_sample is not None:
        out *= class_weight_per_sample
    return out
