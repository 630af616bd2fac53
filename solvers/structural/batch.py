"""Generalized shared-slack SVM by dual coordinate ascent (structural SVMs and their reductions).

Problem (Ramanan, "Dual coordinate solvers for large-scale structural SVMs", eq. 1 with the
flexible regularization of section 7 and the bounds of section 6):

    min_w  ½‖(w − w₀) ∘ r‖² + Σ_i C_i max(0, max_{j ∈ N_i} (l_ij − wᵀx_ij))     [s.t. w ≥ 0]

Each example i owns the constraint vectors x_ij (rows of X, grouped by `groups`) with margins l_ij;
they share one slack. The change of variables ŵ = (w − w₀) ∘ r, x̂ = x / r, l̂ = l − w₀ᵀx turns the
prior into the plain problem; w ≥ 0 becomes ŵ ≥ lo = −w₀ ∘ r. Dual (in the C-scaled form):

    max_α  −½‖ŵ‖² + (ŵ − u)ᵀlo + Σ l̂_ij α_ij,  α_ij ≥ 0, Σ_j α_ij ≤ C_i,
    u = Σ α_ij x̂_ij, ŵ = u (or max(u, lo) under the bound).

Algorithm 1 of the paper: random passes over the dual variables with the exact single update
(clip(g/‖x̂‖², −α_ij, C_i − α_i)) and, when the sum constraint is active and g_ij > 0, the pairwise
update with the partner of smallest gradient among the example's non-zero α (corrected forms of
eqs. 25 and 28). LB = F(α) is tracked; the approximate bound UB' (eq. 36, from the gradients of the
last pass) decides when to compute the exact UB = primal(ŵ) (eq. 35) by a pass; the solve stops when
UB − LB ≤ tol · max(1, |UB|). Shrinking (as LIBLINEAR's, not in the paper) skips rows with α = 0
whose constraint held when last visited; only full passes lead to the exact UB.

The result's ``gap`` is UB − LB and its ``duality_gap`` (UB − LB) / max(1, |UB|), both with the
exact UB of the returned ŵ; the change of variables is `solvers.structural.reparam`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from solvers._core.params import check_max_iter, check_tol
from solvers._core.problem import check_vector, csr_arrays, per_sample_C
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    relative_duality_gap,
)
from solvers._core.sparse import dot, sq_norm
from solvers.structural import kernels
from solvers.structural.reparam import Reparam, within_tol

# A full pass at least this often: rows shrunk early may be violated again as w moves on.
_FULL_PASS_EVERY = 10
# A pass runs in slices of about this many row entries read (a row's own, and with pairwise
# updates its example's rows, which the partner search reads); a pass that has lasted
# _PASS_REPORT_S reports between slices. One example of 2 million rows made a single pass cost
# hours (every visit's partner search reads the example), and time_limit or a stop from the
# callback (a job's cancel) was heard only at the pass's end.
_SLICE_WORK = 1 << 22
_PASS_REPORT_S = 1.0


def solve_structural(
    X,
    margins,
    groups,
    *,
    C=1.0,
    tol=1e-3,
    max_iter=1000,
    nonneg=False,
    w0=None,
    reg_scale=None,
    random_state=0,
    callback: Callback | None = None,
    warm_start=None,
    time_limit=None,
    pairwise=True,
    shrinking=True,
) -> SolveResult:
    """Solve the shared-slack SVM (module docstring) by dual coordinate ascent.

    Parameters
    ----------
    X : matrix of shape (n_rows, n_features)
        Row r is the constraint vector x_ij of example ``groups[r]``; anything the input door
        takes (`solvers._core.problem`).
    margins : array, shape (n_rows,)
        The margin l_ij of each row.
    groups : array, shape (n_rows,)
        Example label of each row (any hashable sortable values, rows in any order).
    C : float or array of shape (n_groups,)
        Loss weight per example (in the order of ``np.unique(groups)``); 0 drops the example.
    tol : float
        Stop when UB − LB ≤ tol · max(1, |UB|).
    max_iter : int
        Maximum number of passes.
    nonneg : bool
        Constrain the returned w to be ≥ 0.
    w0, reg_scale : arrays of shape (n_features,), optional
        Prior mean and positive per-feature scale r of the regularizer ½‖(w − w0) ∘ r‖².
    random_state : int
        Seed of the pass order.
    callback : callable, optional
        Receives a `Progress` per pass; returning False stops the solve.
    warm_start : array of shape (n_rows,) or SolveResult, optional
        Previous alpha (w is rebuilt from it).
    time_limit : float, optional
        Wall-clock budget in seconds.
    pairwise : bool
        Use the pairwise update on active examples (turning it off shows why it is needed).
    shrinking : bool
        Skip rows with alpha = 0 whose constraint held on their last visit, until the gap on the
        remaining rows meets tol; a full pass (and the exact UB) then decides.

    Returns
    -------
    SolveResult
        w (n_features,), alpha (n_rows,) with Σ_j alpha_ij ≤ C_i, lower_bound (F(α)),
        upper_bound (primal of w, exact), gap = UB − LB, duality_gap, history of `Progress`.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    X = csr_arrays(X)
    margins = check_vector(margins, X.n_samples, "margins")
    tol, max_iter = check_tol(tol), check_max_iter(max_iter)
    problem = _Problem.build(X, margins, groups, C, Reparam(
        X.n_features, nonneg=nonneg, w0=w0, reg_scale=reg_scale
    ))  # fmt: skip
    duals, weights = problem.start(warm_start)
    rng = np.random.default_rng(random_state)
    bounds, status, n_iter = _run(
        problem, duals, weights, rng, monitor, tol, max_iter, bool(pairwise), shrinking
    )
    if bounds.upper is None:
        bounds.upper = problem.exact_upper_bound(weights.w)
    if status is not Status.CONVERGED and within_tol(bounds.upper, bounds.lower, tol):
        status = Status.CONVERGED
    final = monitor.conclude(bounds.progress(n_iter, monitor, len(problem.usable), True))
    return SolveResult(
        w=problem.reparam.to_original(weights.w),
        bias=0.0,
        alpha=duals.alpha,
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=bounds.upper,
        dual=bounds.lower,
        history=monitor.history,
        lower_bound=bounds.lower,
        upper_bound=bounds.upper,
        duality_gap=final.duality_gap,
        extra={
            "approx_upper_bound": bounds.approx_upper,
            "n_groups": problem.groups.C.shape[0],
            "u": weights.u,
        },
    )


fit_structural = solve_structural  # the name this solver had first; same function


@dataclass
class _Problem:
    """The constraint rows in the scaled space, their margins l̂ and groups, the change of
    variables, the rows' norms and the rows that take part (C_i > 0)."""

    rows: kernels.ScaledRows
    shifted_margins: np.ndarray
    groups: kernels.Groups
    reparam: Reparam
    sq_norms: np.ndarray
    usable: np.ndarray

    @classmethod
    def build(cls, X, margins, groups, C, reparam):
        groups = _group_index(groups, X.n_samples, C)
        rows = kernels.ScaledRows(X, reparam.s)
        shifted = np.ascontiguousarray(reparam.margins(X, margins), dtype=np.float64)
        usable = np.flatnonzero(groups.C[groups.group_of] > 0).astype(np.int64)
        return cls(rows, shifted, groups, reparam, kernels.row_sq_norms(rows), usable)

    def start(self, warm_start):
        n_rows, n_features = self.rows.X.shape
        if warm_start is None:
            alpha = np.zeros(n_rows)
            u = np.zeros(n_features)
        else:
            alpha = _check_warm_start(warm_start, n_rows, self.groups)
            u = kernels.scatter_alpha(self.rows, alpha)
        sums = np.bincount(self.groups.group_of, weights=alpha, minlength=self.groups.C.shape[0])
        reparam = self.reparam
        weights = kernels.Weights(u, reparam.weights(u), reparam.lo, reparam.bounded)
        return kernels.Duals(alpha, sums.astype(np.float64)), weights

    def lower_bound(self, duals, weights):
        return self.reparam.quad(weights.u, weights.w) + dot(self.shifted_margins, duals.alpha)

    def visit_work(self, pairwise):
        """Row entries a visit of each row may read: its own, and with pairwise updates its
        example's rows (the partner search reads each one's alpha, and the non-zero ones)."""
        nnz = np.diff(self.rows.X.indptr).astype(np.int64)
        if not pairwise:
            return nnz + 1
        g = self.groups
        size = np.diff(g.group_ptr)
        per_group = size + np.bincount(g.group_of, weights=nnz, minlength=size.shape[0])
        return nnz + 1 + per_group.astype(np.int64)[g.group_of]

    def exact_upper_bound(self, w):
        g = self.groups
        loss = kernels.group_loss(self.rows, self.shifted_margins, w, g.group_of, g.C, g.C.shape[0])
        return 0.5 * sq_norm(w) + loss


@dataclass
class _Bounds:
    """LB, the approximate UB' of the last pass and the exact UB when it was computed."""

    lower: float = 0.0
    approx_upper: float | None = None
    upper: float | None = None

    def progress(self, n_iter, monitor, active, full_pass):
        ub = self.upper if self.upper is not None else self.approx_upper
        return Progress(
            n_iter,
            monitor.elapsed(),
            ub - self.lower,
            active=active,
            primal=self.upper,
            dual=self.lower,
            duality_gap=relative_duality_gap(self.upper, self.lower),
            lower_bound=self.lower,
            upper_bound=self.upper,
            approx_upper_bound=self.approx_upper if full_pass else None,
        )

    def within_pass(self, n_iter, monitor, visited):
        """A record from inside pass ``n_iter`` (``visited`` rows so far): the lower bound, no
        gap (the pass's gradients bound nothing until it ends)."""
        return Progress(
            n_iter, monitor.elapsed(), None, active=visited, dual=self.lower,
            lower_bound=self.lower,
        )  # fmt: skip


def _run(problem, duals, weights, rng, monitor, tol, max_iter, pairwise, shrinking):
    """Passes until the exact bounds meet tol or a budget ends: (bounds, status, passes)."""
    last_gradient = np.zeros(problem.rows.X.n_samples)
    active, full, since_full = problem.usable, True, 0
    bounds = _Bounds()
    status, n_iter = Status.MAX_ITER, 0
    work = problem.visit_work(pairwise)
    if work.sum() <= _SLICE_WORK:  # every pass is one slice: no need to cut them
        work = None
    for n_iter in range(1, max_iter + 1):
        max_gradient = np.zeros(problem.groups.C.shape[0])
        stop = _pass(
            problem, rng.permutation(active), work, duals, weights, pairwise, max_gradient,
            last_gradient, monitor, bounds, n_iter,
        )  # fmt: skip
        w = weights.w
        bounds.lower = problem.lower_bound(duals, weights)
        if stop is not None:  # within the pass: its gradients do not bound anything yet
            bounds.approx_upper = None
            return bounds, stop, n_iter
        bounds.approx_upper = 0.5 * sq_norm(w) + dot(problem.groups.C, max_gradient)
        met = within_tol(bounds.approx_upper, bounds.lower, tol)
        bounds.upper = problem.exact_upper_bound(w) if met and full else None
        stop = monitor.report(bounds.progress(n_iter, monitor, len(active), full))
        if bounds.upper is not None and within_tol(bounds.upper, bounds.lower, tol):
            return bounds, Status.CONVERGED, n_iter
        if stop is not None:
            return bounds, stop, n_iter
        since_full = 0 if full else since_full + 1
        if shrinking:
            active, full = _next_active(
                problem.usable, active, duals.alpha, last_gradient, full, met, since_full
            )
    return bounds, status, n_iter


def _pass(problem, order, work, duals, weights, pairwise, max_gradient, seen, monitor, bounds, n):
    """One pass over the rows in ``order``, in slices of about _SLICE_WORK entries read; a pass
    that lasts reports its progress (the lower bound so far) every _PASS_REPORT_S between
    slices (``work`` None: the pass is one slice). Returns the status to stop with when a report
    asked to, else None."""
    if work is None:
        kernels.epoch(
            problem.rows, problem.shifted_margins, problem.groups, problem.sq_norms,
            order, duals, weights, pairwise, max_gradient, seen,
        )  # fmt: skip
        _resync_sums(problem, duals)
        return None
    ends = np.cumsum(work[order])
    cuts = np.searchsorted(ends, np.arange(_SLICE_WORK, ends[-1] if len(ends) else 0, _SLICE_WORK))
    last_report = monitor.elapsed()
    start = 0
    for end in (*np.unique(cuts[cuts > 0]).tolist(), order.shape[0]):
        kernels.epoch(
            problem.rows, problem.shifted_margins, problem.groups, problem.sq_norms,
            order[start:end], duals, weights, pairwise, max_gradient, seen,
        )  # fmt: skip
        start = end
        if start < order.shape[0] and monitor.elapsed() - last_report >= _PASS_REPORT_S:
            last_report = monitor.elapsed()
            _resync_sums(problem, duals)
            bounds.lower = problem.lower_bound(duals, weights)
            stop = monitor.report(bounds.within_pass(n, monitor, start))
            if stop is not None:
                return stop
    _resync_sums(problem, duals)
    return None


def _resync_sums(problem, duals):
    """Σ_j alpha_ij of each example anew (the pass keeps them by increments)."""
    duals.alpha_sums[:] = np.bincount(
        problem.groups.group_of, weights=duals.alpha, minlength=problem.groups.C.shape[0]
    )


def _next_active(rows, active, alpha, last_gradient, full, met, since_full):
    """Shrinking: skip rows with alpha = 0 whose constraint held (g < 0) when last visited.

    When the gap measured on the shrunk set meets the tolerance (or every `_FULL_PASS_EVERY`
    passes) the next pass is a full one: only a full pass gives UB' over all the data, and the
    exact UB is computed only after one.
    """
    if not full and (met or since_full >= _FULL_PASS_EVERY):
        return rows, True
    keep = (alpha[active] > 0) | (last_gradient[active] >= 0)
    return active[keep], False


def _group_index(groups, n_rows, C) -> kernels.Groups:
    """Rows grouped by example: row → group, each group's rows, and the per-example C."""
    groups = np.asarray(groups)
    if groups.shape != (n_rows,):
        raise ValueError(f"groups must have shape ({n_rows},), got {groups.shape}")
    labels, inverse = np.unique(groups, return_inverse=True)
    group_of = inverse.astype(np.int64).ravel()
    n = len(labels)
    members = np.argsort(group_of, kind="stable").astype(np.int64)
    group_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(group_of, minlength=n), out=group_ptr[1:])
    return kernels.Groups(group_of, group_ptr, members, per_sample_C(C, n, unit="example"))


def _check_warm_start(warm_start, n_rows, groups: kernels.Groups):
    alpha = getattr(warm_start, "alpha", warm_start)
    alpha = np.array(alpha, dtype=np.float64)
    if alpha.shape != (n_rows,):
        raise ValueError(f"warm_start must have one alpha per row ({n_rows},), got {alpha.shape}")
    if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
        raise ValueError("warm_start alpha must be finite and >= 0")
    cap = groups.C
    alpha[cap[groups.group_of] == 0] = 0.0
    sums = np.bincount(groups.group_of, weights=alpha, minlength=cap.shape[0])
    if np.any(sums > cap * (1 + 1e-6) + 1e-12):
        raise ValueError("warm_start alpha exceeds C for some example (Σ_j alpha_ij <= C_i)")
    over = sums > cap
    if np.any(over):  # rounding only: scale those groups back onto the constraint
        alpha *= np.where(over, cap / np.where(over, sums, 1.0), 1.0)[groups.group_of]
    return alpha
