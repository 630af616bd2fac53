"""The multi-class problem as the kernels see it, built by the input door, and what the
formulations compute from it: W from α, and the primal and dual objectives.

Weights are stored feature-major: W has shape (n_features, n_classes), so the class loop for one
non-zero x_ij reads the contiguous row ``W[j]``; the implicit bias feature of value ``bias`` has
its own weights ``wb`` of shape (n_classes,).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from solvers._core.params import check_bias
from solvers._core.problem import CSRArrays, check_class_labels, csr_arrays, per_sample_C
from solvers._core.sparse import row_sq_norms, sq_norm
from solvers.multiclass.kernels import margin_loss, weights_from_alpha


class MulticlassProblem(NamedTuple):
    """(X, y, C) after the door, with the row norms (a NamedTuple: the kernels take it whole).

    X: the CSR view; y: (n,) int64 class indices; C: (n,) float64 per-sample bounds (weights
    folded in); A: (n,) ‖x̃_i‖² with the bias feature; bias: its value; n_classes: k.
    """

    X: CSRArrays
    y: np.ndarray
    C: np.ndarray
    A: np.ndarray
    bias: float
    n_classes: int

    @property
    def n_samples(self) -> int:
        return self.y.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.n_features


def check_problem(X, y, n_classes, C, bias) -> MulticlassProblem:
    """Check the shared arguments through the door; build the kernel view (no copy of X)."""
    X = csr_arrays(X)
    y = check_class_labels(y, X.n_samples, n_classes)
    C = per_sample_C(C, X.n_samples)
    bias = check_bias(bias)
    A = row_sq_norms(X.data, X.indptr, bias)
    return MulticlassProblem(X, y, C, A, bias, int(n_classes))


def usable_rows(problem: MulticlassProblem) -> np.ndarray:
    """The rows the passes visit: C_i > 0 and x̃_i ≠ 0 (the others are placed at their optimum)."""
    return np.flatnonzero((problem.C > 0) & (problem.A > 0))


def class_index_dtype(n_classes: int):
    """The narrowest unsigned integer type that holds a class index 0..n_classes-1 (a count of
    n_classes included): per-row class lists take n_samples × n_classes of them."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if n_classes <= np.iinfo(dtype).max:
            return dtype
    return np.uint64


def weights(problem: MulticlassProblem, alpha, sign: float):
    """(W, wb) = sign · (Xᵀα, bias · 1ᵀα)."""
    W = np.zeros((problem.n_features, alpha.shape[1]))
    wb = np.zeros(alpha.shape[1])
    if np.any(alpha):
        weights_from_alpha(problem.X, alpha, problem.bias, sign, W, wb)
    return W, wb


def margin_objectives(problem: MulticlassProblem, W, wb, alpha, *, summed: bool, sign: float):
    """(primal, f(α)) for the current W, wb and α: primal ½‖W̃‖² + `margin_loss`, dual
    ½‖W̃‖² + sign · Σ_i α_i^{y_i} (−1 for Crammer–Singer, +1 for Weston–Watkins)."""
    loss = margin_loss(problem, W, wb, summed)
    # compiled loops, not BLAS: beside other busy threads a BLAS dot waited milliseconds for a
    # core it wanted for itself
    reg = 0.5 * (sq_norm(W.reshape(-1)) + sq_norm(wb))
    at_label = float(alpha[np.arange(problem.n_samples), problem.y].sum())
    return reg + loss, reg + sign * at_label
