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
`solvers.multiclass.schedules.run_active_sets`; the shared front end: `solvers.multiclass.sdm`.

Rows with x̃_i = 0 do not affect W; their α is set to its optimum (C_i at y_i, −C_i at one other
class) and never visited. Rows with C_i = 0 are dropped (α_i = 0).

Reference: S. S. Keerthi, S. Sundararajan, K.-W. Chang, C.-J. Hsieh, C.-J. Lin, "A Sequential Dual
Method for Large Scale Multi-Class Linear SVMs", KDD 2008, section 2 (Algorithm 2.1).
"""

from __future__ import annotations

import numpy as np

from solvers._core.progress import Callback, SolveResult
from solvers.multiclass.cs_kernels import cs_max_violation, cs_pass
from solvers.multiclass.problem import MulticlassProblem, class_index_dtype, margin_objectives
from solvers.multiclass.schedules import Passes, run_active_sets
from solvers.multiclass.sdm import check_warm_start, solve_sdm

_FEASIBILITY_TOL = 1e-8


class CrammerSinger:
    """The formulation's part of a solve (see `solvers.multiclass.sdm`)."""

    weight_sign = 1.0  # w_m = Σ_i α_i^m x̃_i

    @staticmethod
    def initial_alpha(problem: MulticlassProblem, warm_start) -> np.ndarray:
        n, k = problem.n_samples, problem.n_classes
        if warm_start is None:
            return np.zeros((n, k))
        alpha = check_warm_start(warm_start, n, k)
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

    @staticmethod
    def ray_terms(problem: MulticlassProblem, alpha) -> tuple[float, float]:
        """Along rα: the linear term Σ_i α_i^{y_i} of −f, and the largest feasible r."""
        own = alpha[np.arange(problem.n_samples), problem.y]
        held = own > 0
        return float(own.sum()), float(np.min(problem.C[held] / own[held], initial=np.inf))

    @staticmethod
    def place_zero_rows(problem: MulticlassProblem, alpha) -> None:
        """Rows with x̃_i = 0 cost C_i in the primal whatever W is; their optimum is at bounds."""
        zero = np.flatnonzero((problem.C > 0) & (problem.A == 0))
        if zero.size == 0:
            return
        y = problem.y[zero]
        alpha[zero] = 0.0
        alpha[zero, y] = problem.C[zero]
        alpha[zero, np.where(y == 0, 1, 0)] = -problem.C[zero]

    @staticmethod
    def passes(problem: MulticlassProblem, alpha, W, wb) -> Passes:
        k = problem.n_classes
        # unsigned (no wraparound checks) and as narrow as k allows: n_samples × k of them
        act_cls = np.empty((problem.n_samples, k), dtype=class_index_dtype(k))
        act_n = np.empty(problem.n_samples, dtype=np.int64)

        def restore():
            act_cls[:] = np.arange(k)
            act_n[:] = k

        restore()
        return Passes(
            run_pass=lambda order: cs_pass(problem, order, alpha, W, wb, act_cls, act_n),
            objectives=lambda: margin_objectives(problem, W, wb, alpha, summed=False, sign=-1.0),
            max_violation=lambda rows: cs_max_violation(problem, rows, alpha, W, wb),
            restore=restore,
            still_active=lambda r: r[act_n[r] > 1],
        )

    @staticmethod
    def schedule(passes, rows, problem, **options):
        return run_active_sets(passes, rows, **options)


CRAMMER_SINGER = CrammerSinger()


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
    rows: np.ndarray | None = None,
) -> SolveResult:
    """Train a Crammer–Singer multi-class linear SVM (parameters: `solvers.multiclass.sdm`).

    ``warm_start`` is a feasible α: α_i^m ≤ C_i at m = y_i, ≤ 0 elsewhere, each row summing to 0.
    Returns w (n_classes, n_features), bias (n_classes,), alpha (n_samples, n_classes), and
    gap = max_violation = max_i v_i of the returned α.
    """
    return solve_sdm(
        CRAMMER_SINGER, X, y, n_classes, C=C, bias=bias, tol=tol, max_iter=max_iter,
        shrinking=shrinking, random_state=random_state, time_limit=time_limit,
        callback=callback, warm_start=warm_start, objective_every=objective_every, rows=rows,
    )  # fmt: skip
