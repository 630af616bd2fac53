"""Linear support vector regression by dual coordinate descent (LIBLINEAR's -s 13 and -s 12).

Primal, with f(x) = wᵀx (+ b · w_b when a bias feature of value b is appended):

    min_w ½‖w‖² + Σ_i C_i ℓ(|y_i − f(x_i)| − ε),   ℓ(t) = max(0, t) (L1) or max(0, t)² (L2).

Dual (Ho and Lin, "Large-scale linear support vector regression", JMLR 2012; the per-variable
form of Hsieh et al. 2008 applied to β = α⁺ − α⁻):

    min_β ½ βᵀ(XXᵀ + Λ)β − yᵀβ + ε‖β‖₁,   −U_i ≤ β_i ≤ U_i,   w = Σ β_i x_i,

with U_i = C_i, Λ = 0 for the L1 loss and U_i = ∞, Λ_ii = 1 / (2 C_i) for the L2 loss. Each step
minimizes the one-variable problem exactly (the ε‖·‖₁ term makes it piecewise quadratic). Variables
at a bound whose gradient points outward by more than the last pass's largest violation are
shrunk; the solve stops when the sum of violations of a pass falls below tol times that of the
first pass, confirmed on the full set (LIBLINEAR's rule, so its tol means the same; after a warm
start the reference is the violation sum at beta = 0). That ratio is the result's ``gap``; its
``max_violation`` is the largest violation, and a solve that stops early measures both on the β
it returns by one more read-only pass.
"""

from __future__ import annotations

import numpy as np

from solvers._core.params import check_bias, check_choice, check_max_iter, check_tol
from solvers._core.problem import (
    check_rows,
    check_targets,
    csr_arrays,
    per_sample_C,
    restrict_C,
    subset_alpha,
)
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    relative_duality_gap,
)
from solvers._core.sparse import row_sq_norms, rows_dot, sq_norm
from solvers._core.warm_start import ray_scale
from solvers.regression import kernels as K
from solvers.regression import svr_newton

LOSSES = ("epsilon_insensitive", "squared_epsilon_insensitive")


def svr_objectives(X, y, w_full, beta, *, loss, epsilon, C, bias):
    """(primal, dual) of the module docstring's problems; the dual in minimization form."""
    X = csr_arrays(X)
    c = per_sample_C(C, X.n_samples)
    f = rows_dot(X.data, X.indices, X.indptr, w_full, X.n_features, float(bias))
    t = np.maximum(np.abs(y - f) - epsilon, 0.0)
    # sums and compiled loops, not BLAS dot products (see `_to_ray_optimum`)
    reg = 0.5 * sq_norm(w_full)
    keep = c > 0
    if loss == "epsilon_insensitive":
        primal = reg + float(np.sum(c * t))
        lam = np.zeros_like(c)
    else:
        primal = reg + float(np.sum(c * t * t))
        lam = np.where(keep, 0.5 / np.where(keep, c, 1.0), 0.0)
    linear = epsilon * np.abs(beta).sum() - np.sum(y * beta) + 0.5 * np.sum(lam * beta * beta)
    dual = reg + float(linear)
    return primal, dual


def solve_svr(
    X,
    y,
    *,
    loss="epsilon_insensitive",
    epsilon=0.0,
    C=1.0,
    bias=0.0,
    tol=0.1,
    max_iter=1000,
    shrinking=True,
    random_state=0,
    time_limit=None,
    callback: Callback | None = None,
    warm_start=None,
    newton=True,
    rows=None,
) -> SolveResult:
    """Fit a linear SVR by dual coordinate descent.

    Parameters
    ----------
    X : matrix of shape (n_samples, n_features)
        Anything the input door takes (`solvers._core.problem`); canonical CSR is not copied.
    y : array, shape (n_samples,)
        Real targets.
    loss : {"epsilon_insensitive", "squared_epsilon_insensitive"}
        L1 (LIBLINEAR -s 13) or L2 (-s 12) ε-insensitive loss.
    epsilon : float
        Width ε of the insensitive tube (LIBLINEAR's -p).
    C : float or array of shape (n_samples,)
        Per-sample loss weight; rows with C_i = 0 are dropped (beta 0).
    bias : float
        Value of an implicit constant feature (LIBLINEAR's -B); 0 means none.
    tol : float
        Relative stopping tolerance on the sum of violations (LIBLINEAR's -e).
    max_iter, shrinking, random_state, time_limit, callback
        As for the other solvers; the callback receives a `Progress` per pass with
        gap = (sum of violations) / (that of the first pass) and max_violation = the largest.
    warm_start : array of shape (n_samples,) or SolveResult, optional
        Previous beta (clipped to the bounds), e.g. of a solve at a smaller C or another ε
        (feasible: the bounds only widen with C and do not depend on ε), or a checkpoint to
        resume. With ``rows``, shape (len(rows),) in the order of ``rows``.
    newton : bool
        L2 loss: when the passes stall, finish by the primal truncated Newton method
        (`solvers.regression.svr_newton` states when, its stopping rule and the result).
    rows : int array or None
        Solve on these rows only (distinct indices into X), without copying X: the problem of
        ``X[rows]``, ``y[rows]``, ``C[rows]`` (y and an array C stay whole). With increasing
        rows the iterates equal those on the copied rows.

    Returns
    -------
    SolveResult
        w (n_features,), bias (the intercept, bias · w_bias), alpha = beta (n_samples,) (with
        ``rows``: (len(rows),)),
        primal and dual (minimization) objectives, duality_gap, gap and max_violation.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    check_choice(loss, LOSSES, "loss")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    tol, max_iter, bias = check_tol(tol), check_max_iter(max_iter), check_bias(bias)
    X = csr_arrays(X)
    y = check_targets(y, X.n_samples)
    rows = check_rows(rows, X.n_samples)
    c = restrict_C(per_sample_C(C, X.n_samples), X.n_samples, rows)
    terms = _terms(X, y, c, loss, float(epsilon), bias)
    beta, w = _initial_beta(X, warm_start, terms.upper, bias, rows)
    if warm_start is not None:
        _to_ray_optimum(beta, w, terms)
    index = np.flatnonzero(c > 0).astype(np.int64) if rows is None else rows[c[rows] > 0]
    # LIBLINEAR's reference scale is the first pass's sum of violations; a warm start would make
    # it tiny, so it then uses the violations of beta = 0 (what a cold start's first pass sees).
    scale = None
    if warm_start is not None:
        scale = float(np.maximum(np.abs(y[index]) - epsilon, 0.0).sum())

    def objectives():
        return svr_objectives(X, y, w, beta, loss=loss, epsilon=epsilon, C=c, bias=bias)

    run = _Run(X, bias, terms, beta, w, index, monitor, scale, objectives)
    stall = svr_newton.stall_detector(loss, newton)
    status = run.passes(tol, max_iter, shrinking, np.random.default_rng(random_state), stall)
    if status is None:  # stalled: the primal Newton method finishes
        _, dual = svr_objectives(X, y, w, beta, loss=loss, epsilon=epsilon, C=c, bias=bias)
        result = svr_newton.finish(
            X, y, c, epsilon, bias, beta, w, tol, run.n_iter, max_iter, monitor, dual
        )
        return subset_alpha(result, rows)
    if status is not Status.CONVERGED:
        status = run.measure_returned_state(tol, status)
    final = monitor.history[-1]  # the returned state's, with its objectives
    primal, dual = final.primal, final.dual
    d = X.n_features
    return SolveResult(
        w=w[:d].copy(),
        bias=float(bias * w[d]),
        alpha=beta if rows is None else beta[rows],
        n_iter=run.n_iter,
        status=status,
        gap=final.gap,
        primal=primal,
        dual=dual,
        history=monitor.history,
        duality_gap=final.duality_gap,
        max_violation=final.max_violation,
        method="dcd",
    )


def _terms(X, y, c, loss, epsilon, bias) -> K.Terms:
    keep = c > 0
    if loss == "epsilon_insensitive":
        upper, lam = c.copy(), np.zeros(c.shape[0])
    else:
        upper = np.where(keep, np.inf, 0.0)
        lam = np.where(keep, 0.5 / np.where(keep, c, 1.0), 0.0)
    return K.Terms(y, lam, upper, row_sq_norms(X.data, X.indptr, bias), epsilon)


def _initial_beta(X, warm_start, upper, bias, rows=None):
    n, d = X.shape
    beta = np.zeros(n)
    w = np.zeros(d + 1)
    if warm_start is not None:
        given = np.array(getattr(warm_start, "alpha", warm_start), dtype=np.float64)
        expected = n if rows is None else rows.shape[0]
        if given.shape != (expected,) or not np.all(np.isfinite(given)):
            raise ValueError(
                f"warm_start must be finite with shape ({expected},), got {given.shape}"
            )
        if rows is None:
            beta = given
        else:
            beta[rows] = given
        beta = np.clip(beta, -upper, upper)
        w[:d] = X.to_scipy().T @ beta
        w[d] = bias * beta.sum()
    return beta, w


def _to_ray_optimum(beta, w, terms):
    """Scale the warm start (β and w̃) to the best point of its ray (`solvers._core.warm_start`):
    along rβ the dual is ½r²(‖w̃‖² + Σ λ_i β_i²) − r(Σ y_i β_i − ε Σ |β_i|)."""
    size = np.abs(beta)
    # sums, not BLAS dot products: beside other busy threads one waited milliseconds for a core
    linear = float(np.sum(terms.y * beta) - terms.epsilon * size.sum())
    quadratic = sq_norm(w) + float(np.sum(terms.lam * beta * beta))
    bounded = size > 0
    r_max = float(np.min(terms.upper[bounded] / size[bounded], initial=np.inf))
    r = ray_scale(linear, quadratic, r_max)
    if r != 1.0:
        beta *= r
        w *= r


class _Run:
    """The passes of one solve: shrinking, LIBLINEAR's relative stopping rule, the progress.

    ``objectives()`` gives (primal, dual) at the current β; the record of the returned state
    (the pass that converged, or the measure after an early stop) carries them."""

    def __init__(self, X, bias, terms, beta, w, index, monitor, scale, objectives):
        self.X, self.bias, self.terms, self.beta, self.w = X, bias, terms, beta, w
        self.index, self.monitor, self.scale = index, monitor, scale
        self.objectives = objectives
        self.n_iter = 0

    def passes(self, tol, max_iter, shrinking, rng, stall=None) -> Status | None:
        """The passes; None when ``stall`` (a `StallDetector`) says they have stalled."""
        total = active = len(self.index)
        gmax_old = np.inf
        while self.n_iter < max_iter:
            self.n_iter += 1
            self.index[:active] = rng.permutation(self.index[:active])
            active, gmax_new, violation_sum = K.epoch(
                self.X, self.bias, self.terms, self.beta, self.w, self.index, active, gmax_old,
                bool(shrinking),
            )  # fmt: skip
            if self.scale is None:
                self.scale = violation_sum
            met = self._relative(violation_sum) <= tol
            converged = met and active == total
            stop = self.monitor.report(
                self._progress(gmax_new, violation_sum, active, with_objectives=converged)
            )
            if met:
                if converged:
                    return Status.CONVERGED
                active = total
                gmax_old = np.inf
            else:
                gmax_old = gmax_new
            if stop is not None:
                return stop
            if stall is not None and self.n_iter < max_iter:
                if stall.stalled(self._relative(violation_sum)):
                    return None
        return Status.MAX_ITER

    def measure_returned_state(self, tol, status) -> Status:
        """The relative violation of the β returned, over every sample (a read-only pass)."""
        largest, total = K.violations(self.X, self.bias, self.terms, self.beta, self.w, self.index)
        if self.scale is None:  # no pass ran
            self.scale = total
        self.monitor.conclude(self._progress(largest, total, len(self.index), with_objectives=True))
        return Status.CONVERGED if self._relative(total) <= tol else status

    def _relative(self, violation_sum):
        return violation_sum / self.scale if self.scale > 0 else 0.0

    def _progress(self, largest, violation_sum, active, with_objectives=False):
        relative = self._relative(violation_sum)
        primal = dual = None
        if with_objectives:
            primal, dual = self.objectives()
        return Progress(
            self.n_iter,
            self.monitor.elapsed(),
            relative,
            max_violation=float(largest),
            active=int(active),
            primal=primal,
            dual=dual,
            duality_gap=relative_duality_gap(primal, None if dual is None else -dual),
        )
