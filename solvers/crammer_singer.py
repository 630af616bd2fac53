"""Crammer–Singer multi-class linear SVM by the sequential dual method.

Primal (k classes, rows x̃_i with the implicit bias feature appended, e_i^m = 1 − δ(y_i, m)):

    min_W  ½ Σ_m ‖w_m‖² + Σ_i C_i max_m (e_i^m + w_mᵀx̃_i − w_{y_i}ᵀx̃_i)

Dual (4):  min_α f(α) = ½ Σ_m ‖w_m(α)‖² + Σ_i Σ_m e_i^m α_i^m
           s.t. α_i^m ≤ C_i^m, Σ_m α_i^m = 0,   w_m(α) = Σ_i α_i^m x̃_i,
with C_i^m = C_i if m = y_i else 0. Each step picks a row i (random order, seeded) and solves its
sub-problem (10), min ½A_i‖δ‖² + g_iᵀδ s.t. δ ≤ C_i − α_i, 1ᵀδ = 0, where A_i = ‖x̃_i‖² and
g_i^m = w_mᵀx̃_i + e_i^m, exactly in O(k log k) over the row's active classes (a class at its
bound whose g_i^m is below min_{m: α_i^m < C_i^m} g_i^m cannot move and leaves the set until the
next restore). Optimality of row i: v_i = max_m g_i^m − min_{m: α_i^m < C_i^m} g_i^m; the solve
stops when max_i v_i < tol on a pass over the full sets. Shrinking and cooling:
`solvers._multiclass_driver.run_active_sets`.

Rows with x̃_i = 0 do not affect W; their α is set to its optimum (C_i at y_i, −C_i at one other
class) and never visited. Rows with C_i = 0 are dropped (α_i = 0).

Reference: S. S. Keerthi, S. Sundararajan, K.-W. Chang, C.-J. Hsieh, C.-J. Lin, "A Sequential Dual
Method for Large Scale Multi-Class Linear SVMs", KDD 2008, section 2 (Algorithm 2.1).
"""

from __future__ import annotations

import numpy as np

from solvers._cs_kernels import cs_pass
from solvers._multiclass_driver import (
    ActiveSetFormulation,
    check_common,
    check_problem,
    class_index_dtype,
    finish,
    margin_objectives,
    run_active_sets,
    weights,
)
from solvers.progress import Callback, Monitor, SolveResult, objective_passes

_FEASIBILITY_TOL = 1e-8


def solve_crammer_singer(
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
    """Train a Crammer–Singer multi-class linear SVM.

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
        Stop when max_i v_i < tol on a full pass.
    max_iter : int
        Budget of passes (full and shrunk).
    shrinking : bool
        Shrunk passes and cooling as in the paper's section 2.1.
    random_state : int, Generator or None
        Seed of the per-call generator for the row order.
    time_limit : float or None
        Wall-clock budget in seconds.
    callback : callable or None
        Called with a `Progress` after every pass; returning False stops.
    warm_start : array of shape (n_samples, n_classes) or None
        A feasible α to start from; W is rebuilt from it.
    objective_every : int or None
        Primal and dual objectives are reported every this many passes (0: never). None: as
        the callback's ``objective_every`` attribute says (default 10), never without a
        callback.

    Returns
    -------
    SolveResult
        w (n_classes, n_features), bias (n_classes,), alpha (n_samples, n_classes), status, gap
        (max_i v_i of the last full pass), primal, dual (f(α)), history.
    """
    objective_every = objective_passes(callback, objective_every)
    check_common(tol, max_iter)
    problem = check_problem(X, y, n_classes, C, bias)
    alpha = _initial_alpha(problem, warm_start)
    W, wb = weights(problem, alpha, 1.0)
    rows = np.flatnonzero((problem.C > 0) & (problem.A > 0))
    _place_zero_rows(problem, alpha)
    k = problem.n_classes
    # unsigned (no wraparound checks) and as narrow as k allows: n_samples × k of them
    act_cls = np.empty((problem.n_samples, k), dtype=class_index_dtype(k))
    act_n = np.empty(problem.n_samples, dtype=np.int64)

    def restore():
        act_cls[:] = np.arange(k)
        act_n[:] = k

    def run_pass(order):
        return cs_pass(
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
            act_cls,
            act_n,
        )

    restore()
    form = ActiveSetFormulation(
        run_pass=run_pass,
        restore=restore,
        still_active=lambda r: r[act_n[r] > 1],
        objectives=lambda: margin_objectives(problem, W, wb, alpha, summed=False, sign=-1.0),
    )
    monitor = Monitor(callback, time_limit)
    status, n_iter, gap = run_active_sets(
        form,
        rows,
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
    cap = np.zeros((n, k))
    cap[np.arange(n), problem.y] = problem.C
    slack = _FEASIBILITY_TOL * np.maximum(problem.C, 1.0)
    if np.any(alpha > cap + slack[:, None]):
        raise ValueError(
            "warm_start is infeasible: expected alpha_i^m <= C_i at y_i and <= 0 elsewhere"
        )
    if np.any(np.abs(alpha.sum(axis=1)) > slack * k):
        raise ValueError("warm_start is infeasible: expected every row of alpha to sum to 0")
    np.minimum(alpha, cap, out=alpha)
    alpha[problem.C == 0] = 0.0
    return alpha


def _place_zero_rows(problem, alpha) -> None:
    """Rows with x̃_i = 0 cost C_i in the primal whatever W is; their dual optimum is at bounds."""
    zero = np.flatnonzero((problem.C > 0) & (problem.A == 0))
    if zero.size == 0:
        return
    y = problem.y[zero]
    alpha[zero] = 0.0
    alpha[zero, y] = problem.C[zero]
    alpha[zero, np.where(y == 0, 1, 0)] = -problem.C[zero]
