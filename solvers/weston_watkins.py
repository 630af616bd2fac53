"""Weston–Watkins multi-class linear SVM by the sequential dual method.

Primal (k classes, rows x̃_i with the implicit bias feature appended):

    min_W  ½ Σ_m ‖w_m‖² + Σ_i C_i Σ_{m≠y_i} max(0, 1 − (w_{y_i} − w_m)ᵀx̃_i)

Dual (16), with the sign of the linear term corrected (the printed plus makes α = 0 optimal):

    min_α f(α) = ½ Σ_m ‖w_m(α)‖² − Σ_i Σ_{m≠y_i} α_i^m   s.t. 0 ≤ α_i^m ≤ C_i (m ≠ y_i),
    α_i^{y_i} = −Σ_{m≠y_i} α_i^m,   w_m(α) = −Σ_i α_i^m x̃_i.

Each step picks a row i (random order, seeded) and solves sub-problem (21),
min ½A_i‖δ‖² + ½A_i(1ᵀδ)² + g_iᵀδ over the box 0 ≤ α_i + δ ≤ C_i, with A_i = ‖x̃_i‖² and gradient
(17) g_i^m = (w_{y_i} − w_m)ᵀx̃_i − 1, exactly: a one-dimensional search on the shared sum 1ᵀδ with
per-coordinate clipping (see `solvers._ww_kernels.solve_sub_problem`). Optimality (18): v_i^m = |g|
inside the box, max(0, −g) at 0, max(0, g) at C_i; the solve stops when every v_i^m < tol on a
full pass. Shrunk passes update only the free variables (0 < α_i^m < C_i); shrinking and cooling
are shared with Crammer–Singer (`solvers._multiclass_driver`).

Rows with x̃_i = 0 do not affect W; their α is set to its optimum (C_i for every m ≠ y_i) and never
visited. Rows with C_i = 0 are dropped (α_i = 0). With k = 2 the problem is the binary hinge-loss
SVM at 2C for w = w_1 − w_0.

Reference: S. S. Keerthi, S. Sundararajan, K.-W. Chang, C.-J. Hsieh, C.-J. Lin, "A Sequential Dual
Method for Large Scale Multi-Class Linear SVMs", KDD 2008, section 3 (Algorithm 3.1).
"""

from __future__ import annotations

import numpy as np

from solvers._multiclass_driver import (
    SDMFormulation,
    check_common,
    check_problem,
    finish,
    margin_objectives,
    run_sdm,
    weights,
)
from solvers._ww_kernels import ww_pass
from solvers.progress import Callback, Monitor, SolveResult, objective_passes

_FEASIBILITY_TOL = 1e-8


def solve_weston_watkins(
    X,
    y,
    n_classes: int,
    *,
    C=1.0,
    bias: float = 0.0,
    tol: float = 0.1,
    max_iter: int = 1000,
    shrinking: bool = True,
    random_state=0,
    time_limit: float | None = None,
    callback: Callback | None = None,
    warm_start: np.ndarray | None = None,
    objective_every: int | None = None,
) -> SolveResult:
    """Train a Weston–Watkins multi-class linear SVM.

    Parameters
    ----------
    X : scipy CSR matrix, shape (n_samples, n_features)
        float32 or float64 values, int32 or int64 indices (already validated; never copied).
    y : array of int, shape (n_samples,)
        Class indices 0..n_classes-1.
    n_classes : int
        Number of classes k (>= 2).
    C : float or array of shape (n_samples,)
        Per-sample bound C_i (class and sample weights folded in); rows with C_i = 0 are dropped.
    bias : float
        Value of the implicit constant feature (0: no bias).
    tol : float
        Stop when every v_i^m < tol on a full pass.
    max_iter : int
        Budget of passes (full and shrunk).
    shrinking : bool
        Shrunk passes over the free variables, and cooling (the paper's section 3).
    random_state : int, Generator or None
        Seed of the per-call generator for the row order.
    time_limit : float or None
        Wall-clock budget in seconds.
    callback : callable or None
        Called with a `Progress` after every pass; returning False stops.
    warm_start : array of shape (n_samples, n_classes) or None
        α to start from (0 ≤ α_i^m ≤ C_i for m ≠ y_i; α_i^{y_i} is recomputed); W is rebuilt.
    objective_every : int or None
        Primal and dual objectives are reported every this many passes (0: never). None: as
        the callback's ``objective_every`` attribute says (default 10), never without a
        callback.

    Returns
    -------
    SolveResult
        w (n_classes, n_features), bias (n_classes,), alpha (n_samples, n_classes), status, gap
        (max v_i^m of the last full pass), primal, dual (f(α)), history.
    """
    objective_every = objective_passes(callback, objective_every)
    check_common(tol, max_iter)
    problem = check_problem(X, y, n_classes, C, bias)
    alpha = _initial_alpha(problem, warm_start)
    W, wb = weights(problem, alpha, -1.0)
    rows = np.flatnonzero((problem.C > 0) & (problem.A > 0))
    _place_zero_rows(problem, alpha)

    def run_pass(order, shrunk, keep):
        return ww_pass(
            problem.data,
            problem.indices,
            problem.indptr,
            problem.bias,
            problem.y,
            problem.C,
            problem.A,
            order,
            alpha,
            W,
            wb,
            shrunk,
            keep,
        )

    form = SDMFormulation(
        run_pass, lambda: margin_objectives(problem, W, wb, alpha, summed=True, sign=1.0)
    )
    monitor = Monitor(callback, time_limit)
    status, n_iter, gap = run_sdm(
        form,
        rows,
        problem.n_samples,
        tol=tol,
        max_iter=max_iter,
        shrinking=shrinking,
        rng=np.random.default_rng(random_state),
        monitor=monitor,
        objective_every=objective_every,
    )
    return finish(form, monitor, W, wb, alpha, status, n_iter, gap, problem.bias)


def _initial_alpha(problem, warm_start) -> np.ndarray:
    n, k = problem.n_samples, problem.n_classes
    if warm_start is None:
        return np.zeros((n, k))
    alpha = np.array(warm_start, dtype=np.float64, order="C")
    if alpha.shape != (n, k):
        raise ValueError(f"warm_start must have shape ({n}, {k}), got {alpha.shape}")
    if not np.all(np.isfinite(alpha)):
        raise ValueError("warm_start contains NaN or infinite values")
    idx = np.arange(n)
    alpha[idx, problem.y] = 0.0
    slack = _FEASIBILITY_TOL * np.maximum(problem.C, 1.0)
    if np.any(alpha < -slack[:, None]) or np.any(alpha > (problem.C + slack)[:, None]):
        raise ValueError("warm_start is infeasible: expected 0 <= alpha_i^m <= C_i for m != y_i")
    np.clip(alpha, 0.0, problem.C[:, None], out=alpha)
    alpha[problem.C == 0] = 0.0
    alpha[idx, problem.y] = -alpha.sum(axis=1)
    return alpha


def _place_zero_rows(problem, alpha) -> None:
    """Rows with x̃_i = 0 cost (k − 1)·C_i in the primal whatever W is; their dual optimum is C_i."""
    zero = np.flatnonzero((problem.C > 0) & (problem.A == 0))
    if zero.size == 0:
        return
    alpha[zero] = problem.C[zero, None]
    alpha[zero, problem.y[zero]] = -(problem.n_classes - 1) * problem.C[zero]
