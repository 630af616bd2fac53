"""One front end for the sequential dual method's two formulations, Crammer–Singer and
Weston–Watkins (Keerthi, Sundararajan, Chang, Hsieh, Lin, KDD 2008).

Both take the same input (through the door), the same options and return the same result; a
formulation (`solvers.multiclass.crammer_singer.CRAMMER_SINGER`,
`solvers.multiclass.weston_watkins.WESTON_WATKINS`) supplies the rest: its feasible starting α,
the optimum of the rows with x̃_i = 0, its compiled pass and its schedule
(`solvers.multiclass.schedules`). A solve that stops before a full pass meets ``tol`` measures
the largest violation on the α it returns by one more read-only pass (and is converged if that
meets ``tol``), so ``gap`` = ``max_violation`` always describes the returned state.
"""

from __future__ import annotations

import numpy as np

from solvers._core.params import check_max_iter, check_objective_every, check_tol
from solvers._core.problem import check_rows, restrict_C
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    objective_passes,
    relative_duality_gap,
)
from solvers._core.sparse import sq_norm
from solvers._core.warm_start import ray_scale
from solvers.multiclass.problem import check_problem, usable_rows, weights
from solvers.multiclass.schedules import Reporter


def solve_sdm(
    formulation,
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
    """Train a multi-class linear SVM of the given formulation by the sequential dual method.

    Parameters
    ----------
    formulation : `CRAMMER_SINGER` or `WESTON_WATKINS`
    X : matrix of shape (n_samples, n_features)
        Anything the input door takes (`solvers._core.problem`); canonical CSR is not copied.
    y : array of int, shape (n_samples,)
        Class indices 0..n_classes-1.
    n_classes : int
        Number of classes k (>= 2).
    C : float or array of shape (n_samples,)
        Per-sample bound C_i (class and sample weights folded in); rows with C_i = 0 are dropped.
    bias : float
        Value of the implicit constant feature (0: no bias).
    tol : float
        Stop when the largest violation of a full pass is below tol.
    max_iter : int
        Budget of passes (full and shrunk).
    shrinking : bool
        Shrunk passes and cooling (the paper's sections 2.1 and 3).
    random_state : int, Generator or None
        Seed of the per-call generator for the row order.
    time_limit : float or None
        Wall-clock budget in seconds.
    callback : callable or None
        Called with a `Progress` after every pass; returning False stops.
    warm_start : array of shape (n_samples, n_classes) or None
        A feasible α to start from (see the formulation), such as the ``alpha`` of an earlier
        result: a solve at a smaller C (feasible at a larger one: the bounds only widen with C)
        or a checkpoint to resume. W is rebuilt from it. With ``rows``, shape
        (len(rows), n_classes) in the order of ``rows``.
    objective_every : int or None
        Primal and dual objectives are reported every this many passes (0: never). None: as
        the callback's ``objective_every`` attribute says (default 10), never without a
        callback.
    rows : int array or None
        Solve on these rows only (distinct indices into X), without copying X: the problem of
        ``X[rows]``, ``y[rows]``, ``C[rows]`` (y and an array C stay whole). With increasing
        rows the iterates equal those on the copied rows.

    Returns
    -------
    SolveResult
        w (n_classes, n_features), bias (n_classes,), alpha (n_samples, n_classes) (with
        ``rows``: (len(rows), n_classes)), status,
        gap = max_violation (of the returned α), primal, dual (f(α)), duality_gap, history.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    check_objective_every(objective_every, zero_means_never=True)
    objective_every = objective_passes(callback, objective_every)
    tol, max_iter = check_tol(tol), check_max_iter(max_iter)
    problem = check_problem(X, y, n_classes, C, bias)
    subset = check_rows(rows, problem.n_samples)
    if subset is not None:
        problem = problem._replace(C=restrict_C(problem.C, problem.n_samples, subset))
        if warm_start is not None:
            warm_start = _scattered(warm_start, problem.n_samples, problem.n_classes, subset)
    alpha = formulation.initial_alpha(problem, warm_start)
    W, wb = weights(problem, alpha, formulation.weight_sign)
    if warm_start is not None:
        _to_ray_optimum(formulation.ray_terms(problem, alpha), alpha, W, wb)
    rows = usable_rows(problem)
    formulation.place_zero_rows(problem, alpha)
    passes = formulation.passes(problem, alpha, W, wb)
    report = Reporter(passes, monitor, objective_every, tol)
    rng = np.random.default_rng(random_state)
    status, n_iter = formulation.schedule(
        passes, rows, problem, tol=tol, max_iter=max_iter, shrinking=shrinking, rng=rng,
        report=report,
    )  # fmt: skip
    last = monitor.history[-1] if monitor.history else None
    if last is not None and last.iteration == n_iter and last.primal is not None:
        primal, dual = last.primal, last.dual  # the last pass's record measured this state
    else:
        primal, dual = passes.objectives()
    duality_gap = relative_duality_gap(primal, -dual)
    final = monitor.history[-1]
    if status is not Status.CONVERGED:
        violation = float(passes.max_violation(rows))
        if violation < tol:
            status = Status.CONVERGED
        final = Progress(
            iteration=n_iter,
            elapsed_s=monitor.elapsed(),
            gap=violation,
            max_violation=violation,
            active=int(rows.shape[0]),
            primal=primal,
            dual=dual,
            duality_gap=duality_gap,
        )
    final = monitor.conclude(final)
    return SolveResult(
        w=W.T,  # a view: the feature-major weights are not copied
        bias=problem.bias * wb,
        alpha=alpha if subset is None else alpha[subset],
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=float(primal),
        dual=float(dual),
        history=monitor.history,
        duality_gap=duality_gap,
        max_violation=final.gap,
    )


def _to_ray_optimum(terms, alpha, W, wb) -> None:
    """Scale the warm start (α, W, wb) to the best point of its ray (`solvers._core.warm_start`):
    along rα the dual is ½r²‖W̃‖² − r·``linear``, feasible up to ``r_max``."""
    linear, r_max = terms
    r = ray_scale(linear, sq_norm(W.reshape(-1)) + sq_norm(wb), r_max)  # no BLAS: see dcd
    if r != 1.0:
        alpha *= r
        W *= r
        wb *= r


def _scattered(warm_start, n_samples: int, n_classes: int, rows: np.ndarray) -> np.ndarray:
    """A subset's (len(rows), k) warm start placed in its rows of an (n, k) array."""
    given = check_warm_start(warm_start, rows.shape[0], n_classes)
    full = np.zeros((n_samples, n_classes))
    full[rows] = given
    return full


def check_warm_start(warm_start, n_samples: int, n_classes: int) -> np.ndarray:
    """A copy of ``warm_start`` as a finite C-ordered float64 (n, k) array."""
    alpha = np.array(warm_start, dtype=np.float64, order="C")
    if alpha.shape != (n_samples, n_classes):
        raise ValueError(
            f"warm_start must have shape ({n_samples}, {n_classes}), got {alpha.shape}"
        )
    if not np.all(np.isfinite(alpha)):
        raise ValueError("warm_start contains NaN or infinite values")
    return alpha
