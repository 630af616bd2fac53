"""Dual coordinate descent for binary linear SVMs and regularized least squares.

Problem (Hsieh, Chang, Lin, Keerthi, Sundararajan, ICML 2008, eq. (4) and section 6): with
x̃_i = [x_i, bias] (the bias feature is implicit, never appended to X),

    min_α  f(α) = ½ αᵀ(Q + D)α − Σ_i |y_i| α_i,   lower ≤ α_i ≤ U_i,   Q_ij = s_i s_j x̃_iᵀx̃_j,

and w̃ = Σ_i s_i α_i x̃_i solves the primal  min_w̃ ½‖w̃‖² + Σ_i C_i ξ_i(w̃), where s_i is the sign
of y_i (y_i = ±1 for classification, so |y_i| = 1):

    loss            ξ_i                      U_i   D_ii       lower
    hinge (L1)      max(0, 1 − y_i w̃ᵀx̃_i)    C_i   0          0
    squared_hinge   max(0, 1 − y_i w̃ᵀx̃_i)²   +inf  1/(2C_i)   0
    squared_error   (y_i − w̃ᵀx̃_i)²           +inf  1/(2C_i)   −inf  (α free)

One coordinate step (Algorithm 1): G = s_i w̃ᵀx̃_i − |y_i| + D_ii α_i, α_i ← clip(α_i − G/Q̄_ii),
w̃ ← w̃ + Δα_i s_i x̃_i. Shrinking is Algorithm 3; the stopping rule is LIBLINEAR's (≥ 2.42):
M − m ≤ tol and |M| ≤ tol and |m| ≤ tol on a full pass, where M and m are the largest and smallest
projected gradients seen in the pass. Rows with C_i = 0 are dropped (their α_i is 0).

This module is the driver: it owns the order of the coordinates (seeded RNG), the shrinking
policy, the stopping rule, the callback and the time budget; `solvers.binary.kernels` runs the
compiled passes. The measures are named in `solvers._core.progress`: ``gap`` is ``pg_range``.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from solvers._core.params import (
    check_bias,
    check_choice,
    check_max_iter,
    check_objective_every,
    check_tol,
)
from solvers._core.problem import (
    check_labels,
    check_rows,
    compact_C,
    csr_arrays,
    restrict_C,
    subset_alpha,
)
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    finite_or_none,
    objective_interval,
    relative_duality_gap,
)
from solvers.binary import kernels, parallel
from solvers.binary import newton as newton_finisher
from solvers.binary.state import LOSSES, SolveState, checked_weights

ORDERS = ("permute", "cyclic", "random")
DEFAULT_OBJECTIVE_EVERY = 10


def solve_binary(
    X,
    y,
    *,
    loss: str = "squared_hinge",
    C=1.0,
    bias: float = 0.0,
    tol: float = 0.1,
    max_iter: int = 1000,
    order: str = "permute",
    shrinking: bool = True,
    random_state: int | None = 0,
    time_limit: float | None = None,
    callback: Callback | None = None,
    objective_every: int | None = None,
    warm_start: np.ndarray | None = None,
    warm_weights: np.ndarray | None = None,
    newton: bool = True,
    n_jobs: int | None = 1,
    deterministic: bool = False,
    rows: np.ndarray | None = None,
    primal_start: np.ndarray | None = None,
    newton_after: int | None = None,
    newton_tol: float | None = None,
    start_on_support: bool = False,
) -> SolveResult:
    """Train a binary linear SVM (or regularized least squares) by dual coordinate descent.

    Parameters
    ----------
    X : matrix of shape (n_samples, n_features)
        Anything the input door takes (`solvers._core.problem`); canonical CSR with float32 or
        float64 values and int32 or int64 index arrays is used in place.
    y : array, shape (n_samples,)
        Labels in {-1, +1}; any real values for ``loss="squared_error"``.
    loss : {"squared_hinge", "hinge", "squared_error"}
    C : float or array of shape (n_samples,)
        Penalty, one per sample when an array (weights folded in); rows with C_i = 0 are dropped.
    bias : float
        Value of the implicit constant feature (LIBLINEAR's -B); 0 means no bias.
    tol : float
        Absolute tolerance of the stopping rule on the projected gradient.
    max_iter : int
        Maximum number of outer iterations (passes).
    order : {"permute", "cyclic", "random"}
        A fresh permutation per pass, the natural order, or n_samples picks with replacement per
        iteration (no shrinking; convergence checked by a full pass at the current α).
    shrinking : bool
    random_state : int or None
        Seed of the generator built for this call.
    time_limit : float or None
        Wall-clock budget in seconds.
    callback : callable or None
        Called with a `Progress` after each outer iteration; returning False stops the solve.
    objective_every : int or None
        Compute the primal and dual objectives (one extra pass over the data) after every this
        many passes' worth of work: a full pass counts 1, a shrunk pass the fraction of the
        samples it visited, so the objectives cost at most about 1/objective_every of the solve;
        1 computes them after every pass. None (the default) means 10 when a callback is given
        and never otherwise. The result's ``primal``, ``dual`` and ``duality_gap`` are always
        computed.
    warm_start : array of shape (n_samples,) or None
        Initial α (clipped to the bounds), e.g. the ``alpha`` of an earlier result: a solve at
        a smaller C (feasible here: the bounds only widen as C grows), or a checkpoint of an
        interrupted solve to resume. w is rebuilt from it (unless ``warm_weights``), and both
        are then scaled to the best dual point rα, r ≥ 0 (`solvers._core.warm_start`). With
        ``rows``, shape (len(rows),) in the order of ``rows``.
    warm_weights : array of shape (n_features + 1,) or None
        With ``warm_start``: its w̃ = Σ_i y_i α_i x̃_i (bias weight last) over the solved rows,
        as a dual solve that returned that α holds it (its ``w`` and ``bias / bias``): it spares
        the pass that builds w̃ from α. Trusted, not checked against α (the certificate of the
        result assumes it); ignored where the bounds clip the warm start (w̃ is then rebuilt).
    newton : bool
        For the L2 losses, finish by the primal truncated Newton method when the passes stall
        (`solvers.binary.newton` states when, its stopping rule ε′ and what the result then
        holds: ``method == "newton"``, ``status == "converged"`` when ‖∇P‖ ≤ ε′‖∇P(0)‖, and
        the duality gap of (w, α(w)) beside it).
    n_jobs : int or None
        Threads for this one problem (None: every available core); fewer are used where the
        problem is too small to gain from them, and the random order runs on one.
        `solvers.binary.parallel` states the methods and their guarantees.
    deterministic : bool
        With several threads: the block method with verified merges (same seed and thread
        count give identical results) instead of the faster shared-vector method.
    rows : int array or None
        Solve on these rows only (distinct indices into X), without copying X: the problem is
        that of ``X[rows]``, ``y[rows]``, ``C[rows]`` (y and an array C stay whole, of length
        n_samples). With increasing rows the iterates equal those on the copied rows.
    primal_start : array of shape (n_features + 1,) or None
        For the L2 losses: no dual passes, the primal Newton method from this w̃ (bias weight
        last), certified by the duality gap of (w̃, α(w̃)) (`solvers.binary.newton`).
    newton_after : int or None
        For the L2 losses with ``newton``: hand over to the Newton finish after this many
        passes if the stopping rule has not held by then (None: when the stall detector says,
        at ``STALL_CAP`` passes at the latest). A path over C sets it where the previous C's
        solve already needed Newton: the passes at a larger C would stall again.
    newton_tol : float or None
        The factor of the Newton method's stopping rule ε′ in place of 0.01 · tol
        (`solvers.binary.newton`; a path over C gives 0.1 · tol, LIBLINEAR's own rule).
    start_on_support : bool
        With ``warm_start`` from the previous C of a path and shrinking: the first passes visit
        only the rows of α ≠ 0, the others start shrunk (restored, as any shrunk rows are, once
        the rule holds on the rest; the solve converges only on a pass over every row). One
        thread only.

    Returns
    -------
    SolveResult
        ``w`` shape (n_features,), ``bias`` = bias · w_bias, ``alpha`` shape (n_samples,)
        (with ``rows``: (len(rows),), in their order);
        ``gap`` = ``pg_range`` = ``pg_max`` − ``pg_min``. A solve that stops before the rule
        holds measures them on the returned α by one more (read-only) pass.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    check_choice(loss, sorted(LOSSES), "loss")
    check_choice(order, ORDERS, "order")
    tol, max_iter, bias = check_tol(tol), check_max_iter(max_iter), check_bias(bias)
    check_objective_every(objective_every, zero_means_never=False)
    objective_every = objective_interval(callback, objective_every, DEFAULT_OBJECTIVE_EVERY)
    csr = csr_arrays(X)
    y = check_labels(y, csr.n_samples, binary=loss != "squared_error")
    rows = check_rows(rows, csr.n_samples)
    newton_tol = None if newton_tol is None else check_tol(newton_tol, "newton_tol")
    C_arr = restrict_C(compact_C(C, csr.n_samples), csr.n_samples, rows)
    if primal_start is not None:
        if loss not in newton_finisher.FINISHING_LOSSES:
            raise ValueError(f"primal_start needs an L2 loss, got loss={loss!r}")
        start = np.asarray(primal_start, dtype=np.float64)
        if start.shape != (csr.n_features + 1,):
            raise ValueError(
                f"primal_start must have shape ({csr.n_features + 1},), got {start.shape}"
            )
        result = newton_finisher.solve_from_primal(
            csr, bias, y, C_arr, start, tol, max_iter, monitor, loss, newton_tol
        )
        return subset_alpha(result, rows)
    if warm_weights is not None:
        warm_weights = checked_weights(warm_weights, csr.n_features, warm_start)
    state = SolveState.build(csr, y, C_arr, loss, bias, warm_start, rows, warm_weights)
    rng = np.random.default_rng(random_state)
    stall = newton_finisher.stall_detector(loss, newton, newton_after)
    n_threads = 1
    if order != "random":
        n_jobs = parallel.check_n_jobs(n_jobs)
        n_threads = parallel.threads_for(csr, state.index.shape[0], n_jobs, deterministic)
    if n_threads > 1:
        rules = (_progress, _with_objectives, _meets, _gap)
        status, n_iter, M, m = parallel.run_parallel(
            state, monitor, rng, tol, max_iter, shrinking, objective_every, stall, n_threads,
            rules, deterministic,
        )  # fmt: skip
    else:
        first = None
        if start_on_support and warm_start is not None and shrinking and order != "random":
            first = state.support_first()
        status, n_iter, M, m = _run(
            state, monitor, rng, tol, max_iter, order, shrinking, objective_every, stall, first
        )
    if status is None:  # stalled: the primal Newton method finishes
        result = newton_finisher.finish(state, y, tol, n_iter, max_iter, monitor, loss, newton_tol)
        return subset_alpha(result, rows)
    if status is not Status.CONVERGED and n_iter > 0:
        # the last pass measured the state it started from, or a shrunk set: measure the
        # state returned, over every sample
        M, m = state.full_range()
        if _meets(M, m, tol):
            status = Status.CONVERGED
    last = monitor.history[-1] if monitor.history else None
    if last is not None and last.primal is not None:
        primal, dual = last.primal, last.dual  # computed after the final pass already
    else:
        primal, dual = state.objectives()
    measured = _progress(monitor, n_iter, M, m, state.index.shape[0])
    final = monitor.conclude(_with_objectives(measured, primal, dual), same_range=True)
    n_features = csr.n_features
    state.index = None  # no longer needed: free it before α is taken out
    return SolveResult(
        w=state.w[:n_features],  # a view: w̃ is owned by nothing else
        bias=float(bias * state.w[n_features]),
        alpha=state.take_alpha() if rows is None else state.take_alpha()[rows],
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=primal,
        dual=dual,
        history=monitor.history,
        duality_gap=relative_duality_gap(primal, -dual),
        pg_max=final.pg_max,
        pg_min=final.pg_min,
        pg_range=final.pg_range,
        method="dcd",
    )


def _run(
    state, monitor, rng, tol, max_iter, order, shrinking, objective_every, stall=None, first=None
):  # fmt: skip
    """The outer loop: passes, shrinking policy, stopping rule, progress. Returns the outcome;
    status None when ``stall`` (a `StallDetector`) says the passes have stalled. ``first``: the
    passes begin on the index's first ``first`` rows, the others shrunk."""
    n_kept = state.index.shape[0]
    if n_kept == 0:
        monitor.report(_progress(monitor, 0, 0.0, 0.0, 0))
        return Status.CONVERGED, 0, 0.0, 0.0
    shrinking = shrinking and order != "random"
    active_size = n_kept if not first else min(first, n_kept)
    M_bar, m_bar = np.inf, -np.inf
    status, M, m = Status.MAX_ITER, np.inf, -np.inf
    n_iter = 0
    work = 0.0  # passes' worth of coordinate steps since the objectives were last computed
    for n_iter in range(1, max_iter + 1):
        was_full = active_size == n_kept
        work += active_size / n_kept
        order_index = _order(state.index, active_size, order, rng)
        if order == "random":
            _, M, m = state.epoch(order_index, n_kept, np.inf, -np.inf)
        else:
            bars = (M_bar, m_bar) if shrinking else (np.inf, -np.inf)
            active_size, M, m = state.epoch(order_index, active_size, *bars)
        met = _meets(M, m, tol)
        if order == "random" and met:
            M, m = state.full_range()
            met = _meets(M, m, tol)
            converged = met
        else:
            converged = met and was_full and active_size == n_kept
        # the converged pass's record carries them: the driver then needs no pass of its own
        with_objectives = converged or objective_every == 1 or work >= objective_every - 1e-9
        if with_objectives:
            work = 0.0
        progress = _progress(monitor, n_iter, M, m, active_size)
        if with_objectives:
            progress = _with_objectives(progress, *state.objectives())
        stop = monitor.report(progress)
        if converged:
            status = Status.CONVERGED
            break
        if stop is not None:
            status = stop
            break
        if stall is not None and n_iter < max_iter and stall.stalled(_gap(M, m)):
            status = None
            break
        if met or active_size == 0:
            # The shrunk problem is solved (or everything was shrunk): check the full set.
            active_size = n_kept
            M_bar, m_bar = np.inf, -np.inf
        else:
            M_bar = M if M > 0 else np.inf
            m_bar = m if m < 0 else -np.inf
    return status, n_iter, M, m


def _order(index, active_size, order, rng):
    if order == "permute":
        kernels.shuffle_prefix(index, active_size, int(rng.integers(0, 2**63)))
        return index
    if order == "random":
        return index[rng.integers(0, index.shape[0], size=index.shape[0])]
    return index


def _meets(M, m, tol):
    return M - m <= tol and abs(M) <= tol and abs(m) <= tol


def _gap(M, m):
    gap = M - m
    return float(gap) if np.isfinite(gap) else 0.0


def _progress(monitor, n_iter, M, m, active_size):
    gap = _gap(M, m)
    return Progress(
        iteration=n_iter,
        elapsed_s=monitor.elapsed(),
        gap=gap,
        pg_max=finite_or_none(M),
        pg_min=finite_or_none(m),
        pg_range=gap,
        active=int(active_size),
        method="dcd",
    )


def _with_objectives(progress, primal, dual):
    return replace(
        progress,
        primal=primal,
        dual=dual,
        duality_gap=relative_duality_gap(primal, -dual),
    )
