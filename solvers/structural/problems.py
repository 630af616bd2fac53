"""Standard SVM problems written as shared-slack problems for `solvers.solve_structural`.

Each builder returns ``(X, margins, groups)``: row r of X is a constraint vector x_ij,
``margins[r]`` its l_ij and ``groups[r]`` its example i (Ramanan, section 1). The loss weight is
folded into the rows as the paper does (x_ij ← C_i x_ij, l_ij ← C_i l_ij), so they are solved
with C = 1; the dual variables then relate to the usual ones by alpha_usual = C_i · alpha. A bias
is a constant feature of value ``bias`` appended to every row (regularized, as in LIBLINEAR).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solvers._core.problem import check_csr


def _per_example(value, n, name):
    v = np.asarray(value, dtype=np.float64)
    if v.ndim == 0:
        v = np.full(n, float(v))
    if v.shape != (n,) or not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be a finite scalar or have shape ({n},), got {v.shape}")
    return v


def with_bias(X, bias):
    """X with a constant column of value ``bias`` appended (X itself when bias is 0)."""
    X = check_csr(X)
    if bias == 0:
        return X
    column = sp.csr_matrix(np.full((X.shape[0], 1), float(bias), dtype=X.dtype))
    return sp.hstack([X, column], format="csr")


def binary_problem(X, y, *, C=1.0, margin=1.0, bias=0.0):
    """Binary SVM with per-example cost (slack rescaling) and margin (margin rescaling).

    min ½‖w‖² + Σ_i C_i max(0, margin_i − y_i wᵀx_i), one constraint per example:
    x_i1 = C_i y_i x_i, l_i1 = C_i margin_i.

    Parameters
    ----------
    X : sparse matrix (n, d); y : array (n,) in {−1, +1}; C, margin : scalar or (n,);
    bias : value of the appended constant feature (0: none).

    Returns
    -------
    X_s (n, d [+1]), margins (n,), groups (n,)
    """
    X = with_bias(X, bias)
    n = X.shape[0]
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n,) or not np.all(np.isin(y, (-1.0, 1.0))):
        raise ValueError(f"y must hold one label in {{-1, +1}} per row ({n},)")
    cost = _per_example(C, n, "C")
    margins = cost * _per_example(margin, n, "margin")
    return sp.diags(cost * y) @ X, margins, np.arange(n)


def multiclass_problem(X, y, n_classes, *, loss=None, C=1.0, bias=0.0):
    """Crammer–Singer multi-class SVM with a loss matrix (cost-sensitive when not 0-1).

    min ½ Σ_m ‖w_m‖² + Σ_i C_i max(0, max_{j ≠ y_i} (loss[y_i, j] − (w_{y_i} − w_j)ᵀx_i)).
    Constraint (i, j) for every j ≠ y_i: x_ij = C_i (φ(x_i, y_i) − φ(x_i, j)) in the stacked space
    w = (w_0, ..., w_{k−1}), l_ij = C_i loss[y_i, j]. Use `split_classes` to read W back.

    Parameters
    ----------
    X : sparse (n, d); y : int array (n,) of classes 0..k−1; n_classes : k;
    loss : array (k, k), default the 0-1 loss; C : scalar or (n,); bias : appended feature value.

    Returns
    -------
    X_s (n (k − 1), k · d'), margins, groups (the example index of each row), d' = d [+ 1].
    """
    X = with_bias(X, bias)
    n, dim = X.shape
    k = int(n_classes)
    y = np.asarray(y)
    if y.shape != (n,) or not np.issubdtype(y.dtype, np.integer) or y.min() < 0 or y.max() >= k:
        raise ValueError(f"y must hold class indices 0..{k - 1}, one per row ({n},)")
    loss = 1.0 - np.eye(k) if loss is None else np.asarray(loss, dtype=np.float64)
    if loss.shape != (k, k):
        raise ValueError(f"loss must have shape ({k}, {k}), got {loss.shape}")
    cost = _per_example(C, n, "C")
    ex = np.repeat(np.arange(n), k - 1)
    others = np.tile(np.arange(k - 1), n)
    wrong = others + (others >= y[ex])  # the k − 1 classes j ≠ y_i of each example
    rows = (sp.diags(cost) @ X).tocsr()[ex]  # example i's scaled row, once per constraint
    nnz = np.diff(rows.indptr)
    row_of = np.repeat(np.arange(len(ex)), nnz)
    plus = rows.indices + (y[ex] * dim)[row_of]
    minus = rows.indices + (wrong * dim)[row_of]
    coo = sp.coo_matrix(
        (
            np.concatenate([rows.data, -rows.data]),
            (np.concatenate([row_of, row_of]), np.concatenate([plus, minus])),
        ),
        shape=(len(ex), k * dim),
    )
    return coo.tocsr(), cost[ex] * loss[y[ex], wrong], ex


def split_classes(w, n_classes, bias=0.0):
    """(W (k, d), intercepts (k,)) from the stacked weights of `multiclass_problem`."""
    W = np.asarray(w).reshape(int(n_classes), -1)
    if bias == 0:
        return W, np.zeros(int(n_classes))
    return W[:, :-1], bias * W[:, -1]


def svr_problem(X, y, *, epsilon=0.0, C=1.0, bias=0.0):
    """L1-loss ε-insensitive regression as two one-constraint examples per sample.

    (x, l) = (C_i x_i, C_i (y_i − ε)) and (−C_i x_i, C_i (−y_i − ε)) (Ramanan, section 1.6).

    Returns
    -------
    X_s (2n, d [+1]), margins (2n,), groups (2n,)
    """
    X = with_bias(X, bias)
    n = X.shape[0]
    y = _per_example(y, n, "y")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    cost = _per_example(C, n, "C")
    Xs = sp.vstack([sp.diags(cost) @ X, sp.diags(-cost) @ X], format="csr")
    margins = np.concatenate([cost * (y - epsilon), cost * (-y - epsilon)])
    return Xs, margins, np.arange(2 * n)
