"""Weston–Watkins multi-class linear SVM by the sequential dual method.

Primal (k classes, rows x̃_i with the implicit bias feature appended):

    min_W  ½ Σ_m ‖w_m‖² + Σ_i C_i Σ_{m≠y_i} max(0, 1 − (w_{y_i} − w_m)ᵀx̃_i)

Dual (16), with the sign of the linear term corrected (the printed plus makes α = 0 optimal):

    min_α f(α) = ½ Σ_m ‖w_m(α)‖² − Σ_i Σ_{m≠y_i} α_i^m   s.t. 0 ≤ α_i^m ≤ C_i (m ≠ y_i),
    α_i^{y_i} = −Σ_{m≠y_i} α_i^m,   w_m(α) = −Σ_i α_i^m x̃_i.

Each step picks a row i (random order, seeded) and solves sub-problem (21),
min ½A_i‖δ‖² + ½A_i(1ᵀδ)² + g_iᵀδ over the box 0 ≤ α_i + δ ≤ C_i, with A_i = ‖x̃_i‖² and gradient
(17) g_i^m = (w_{y_i} − w_m)ᵀx̃_i − 1, exactly: a one-dimensional search on the shared sum 1ᵀδ with
per-coordinate clipping (see `solvers.multiclass.ww_kernels.solve_sub_problem`). Optimality
(18): v_i^m = |g| inside the box, max(0, −g) at 0, max(0, g) at C_i; the solve stops when every
v_i^m < tol on a full pass. Shrunk passes update only the free variables (0 < α_i^m < C_i);
shrinking and cooling are shared with Crammer–Singer (`solvers.multiclass.schedules`), as is the
front end (`solvers.multiclass.sdm`).

Rows with x̃_i = 0 do not affect W; their α is set to its optimum (C_i for every m ≠ y_i) and never
visited. Rows with C_i = 0 are dropped (α_i = 0). With k = 2 the problem is the binary hinge-loss
SVM at 2C for w = w_1 − w_0.

Reference: S. S. Keerthi, S. Sundararajan, K.-W. Chang, C.-J. Hsieh, C.-J. Lin, "A Sequential Dual
Method for Large Scale Multi-Class Linear SVMs", KDD 2008, section 3 (Algorithm 3.1).
"""

from __future__ import annotations

import numpy as np

from solvers._core.progress import Callback, SolveResult
from solvers.multiclass.problem import MulticlassProblem, margin_objectives
from solvers.multiclass.schedules import Passes, run_sdm
from solvers.multiclass.sdm import check_warm_start, solve_sdm
from solvers.multiclass.ww_kernels import ww_max_violation, ww_pass

_FEASIBILITY_TOL = 1e-8


class WestonWatkins:
    """The formulation's part of a solve (see `solvers.multiclass.sdm`)."""

    weight_sign = -1.0  # w_m = −Σ_i α_i^m x̃_i

    @staticmethod
    def initial_alpha(problem: MulticlassProblem, warm_start) -> np.ndarray:
        n, k = problem.n_samples, problem.n_classes
        if warm_start is None:
            return np.zeros((n, k))
        alpha = check_warm_start(warm_start, n, k)
        idx = np.arange(n)
        alpha[idx, problem.y] = 0.0
        slack = _FEASIBILITY_TOL * np.maximum(problem.C, 1.0)
        if np.any(alpha < -slack[:, None]) or np.any(alpha > (problem.C + slack)[:, None]):
            raise ValueError(
                "warm_start is infeasible: expected 0 <= alpha_i^m <= C_i for m != y_i"
            )
        np.clip(alpha, 0.0, problem.C[:, None], out=alpha)
        alpha[problem.C == 0] = 0.0
        alpha[idx, problem.y] = -alpha.sum(axis=1)
        return alpha

    @staticmethod
    def ray_terms(problem: MulticlassProblem, alpha) -> tuple[float, float]:
        """Along rα: the linear term Σ_i Σ_{m≠y_i} α_i^m of −f, and the largest feasible r."""
        own = alpha[np.arange(problem.n_samples), problem.y]  # −Σ_{m≠y_i} α_i^m ≤ 0
        largest = alpha.max(axis=1)  # the largest α_i^m, m ≠ y_i (own is ≤ 0)
        held = largest > 0
        return float(-own.sum()), float(np.min(problem.C[held] / largest[held], initial=np.inf))

    @staticmethod
    def place_zero_rows(problem: MulticlassProblem, alpha) -> None:
        """Rows with x̃_i = 0 cost (k − 1)·C_i in the primal whatever W is; their optimum is C_i."""
        zero = np.flatnonzero((problem.C > 0) & (problem.A == 0))
        if zero.size == 0:
            return
        alpha[zero] = problem.C[zero, None]
        alpha[zero, problem.y[zero]] = -(problem.n_classes - 1) * problem.C[zero]

    @staticmethod
    def passes(problem: MulticlassProblem, alpha, W, wb) -> Passes:
        return Passes(
            run_pass=lambda order, shrunk, keep: ww_pass(
                problem, order, alpha, W, wb, shrunk, keep
            ),
            objectives=lambda: margin_objectives(problem, W, wb, alpha, summed=True, sign=1.0),
            max_violation=lambda rows: ww_max_violation(problem, rows, alpha, W, wb),
        )

    @staticmethod
    def schedule(passes, rows, problem, **options):
        return run_sdm(passes, rows, problem.n_samples, **options)


WESTON_WATKINS = WestonWatkins()


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
    rows: np.ndarray | None = None,
) -> SolveResult:
    """Train a Weston–Watkins multi-class linear SVM (parameters: `solvers.multiclass.sdm`).

    ``warm_start``: 0 ≤ α_i^m ≤ C_i for m ≠ y_i (α_i^{y_i} is recomputed). Returns
    w (n_classes, n_features), bias (n_classes,), alpha (n_samples, n_classes), and
    gap = max_violation = max v_i^m of the returned α.
    """
    return solve_sdm(
        WESTON_WATKINS, X, y, n_classes, C=C, bias=bias, tol=tol, max_iter=max_iter,
        shrinking=shrinking, random_state=random_state, time_limit=time_limit,
        callback=callback, warm_start=warm_start, objective_every=objective_every, rows=rows,
    )  # fmt: skip
