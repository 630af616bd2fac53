"""One-vs-rest multi-class linear SVM: k binary dual coordinate descent problems, fused, threaded.

Class c's problem is the binary L1- or L2-loss SVM dual (Hsieh et al., ICML 2008)

    min_α ½ αᵀ(Q + D)α − eᵀα,  0 ≤ α_i ≤ U_i,  Q_ij = y_i y_j x̃_iᵀx̃_j,  w_c = Σ_i y_i α_i x̃_i,

with y_i = +1 when row i has label c and −1 otherwise; hinge: U_i = C_ic, D_ii = 0; squared hinge:
U_i = ∞, D_ii = 1/(2C_ic). The decision is argmax_c w_cᵀx̃.

The classes are split into blocks, one per thread (``n_jobs``); a compiled pass visits each row
once and updates every class of its block still active for that row
(`solvers.multiclass.ovr_kernels`), so the k problems share one copy of X and each row is read
once per block; rows that no live class of
the block keeps active are left out of its pass; each block writes W and α into a region of its
own (`solvers.multiclass.class_blocks`), and its state and per-pass bookkeeping live in
`solvers.multiclass.ovr_blocks`. Per class the rules are the
binary solver's: shrinking (Algorithm 3) with the previous pass's extreme projected gradients;
stopping when M − m ≤ tol, |M| ≤ tol and |m| ≤ tol on a full pass (a shrunk class that meets it is
restored and checked again); a converged class is no longer updated. On a path over C
(``start_on_support``) a warm-started class begins with its support (the rows of α_c > 0) active
and the others shrunk, as if a pass had shrunk them. The row order of each pass is
drawn in the driver from one seeded generator and shared by all blocks, so a class's iterates do not
depend on the blocking: serial and threaded runs give identical coefficients.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from solvers._core.params import (
    check_choice,
    check_max_iter,
    check_objective_every,
    check_tol,
)
from solvers._core.problem import check_rows, per_sample_C, restrict_C, subset_alpha
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    finite_or_none,
    objective_passes,
    relative_duality_gap,
)
from solvers.binary.state import LONG_ROW_ENTRIES
from solvers.multiclass import ovr_newton, ovr_parallel
from solvers.multiclass.class_blocks import ClassBlocks
from solvers.multiclass.ovr_blocks import (
    block_measures,
    end_of_pass,
    make_block,
    rows_to_visit,
    run_block,
    set_aside_stalled,
    summary_of_pass,
)
from solvers.multiclass.problem import check_problem

LOSSES = ("hinge", "squared_hinge")
WORK_PER_THREAD = 10_000_000  # class-entries of one pass (non-zeros × classes), ~10-20 ms
ORDERS = ("permute", "cyclic", "random")


def solve_ovr(
    X,
    y,
    n_classes: int,
    *,
    loss: str = "squared_hinge",
    C=1.0,
    bias: float = 0.0,
    tol: float = 0.1,
    max_iter: int = 1000,
    order: str = "permute",
    shrinking: bool = True,
    random_state=0,
    time_limit: float | None = None,
    callback: Callback | None = None,
    warm_start: np.ndarray | None = None,
    warm_weights: tuple[np.ndarray, np.ndarray] | None = None,
    n_jobs: int | None = None,
    objective_every: int | None = None,
    newton: bool = True,
    rows: np.ndarray | None = None,
    newton_after: int | None = None,
    start_on_support: bool = False,
    newton_tol: float | None = None,
) -> SolveResult:
    """Train k one-vs-rest binary linear SVMs by fused dual coordinate descent.

    Parameters
    ----------
    X : matrix of shape (n_samples, n_features)
        Anything the input door takes (`solvers._core.problem`); canonical CSR is not copied.
    y : array of int, shape (n_samples,)
        Class indices 0..n_classes-1.
    n_classes : int
        Number of classes k (>= 2); one binary problem per class.
    loss : {"hinge", "squared_hinge"}
    C : float, array of shape (n_samples,) or (n_classes, n_samples)
        Per-sample (and per-class) bound; entries equal to 0 drop the row from that class.
    bias : float
        Value of the implicit constant feature (0: no bias).
    tol : float
        Per-class stopping tolerance on the projected gradients (M − m, |M|, |m|).
    max_iter : int
        Budget of passes.
    order : {"permute", "cyclic", "random"}
        A fresh permutation per pass, the natural order, or n draws with replacement (shrinking
        off; a class that meets ``tol`` on such a pass is confirmed by a full cyclic pass).
    shrinking : bool
    random_state : int, Generator or None
        Seed of the per-call generator for the row order.
    time_limit, callback
        Wall-clock budget in seconds; called with a `Progress` after every pass (False stops).
    warm_start : array of shape (n_classes, n_samples) or None
        Per-class α to start from (the ``alpha`` of an earlier result: a solve at a smaller C,
        feasible here as the bounds only widen with C, or a checkpoint to resume); W is rebuilt
        from it (unless ``warm_weights``). With ``rows``, shape (n_classes, len(rows)) in the
        order of ``rows``.
    warm_weights : (array of shape (n_classes, n_features), array of shape (n_classes,)) or None
        With ``warm_start``: its W = Σ_i y_ic α_ic x_i and the bias feature's weights, as a dual
        solve that returned that α holds them (its ``w`` and ``bias / bias``): they spare the
        pass that rebuilds W. Trusted, not checked against α (the certificate of the result
        assumes them); ignored where the bounds clip the warm start (W is then rebuilt).
    n_jobs : int or None
        The fit's thread budget (None: every available core). With at least two threads per
        class, the classes run side by side on the parallel binary solver
        (`solvers.multiclass.ovr_parallel`); otherwise they are split into blocks, one per
        thread, and fewer blocks are used when a pass is too short to gain from threads.
    objective_every : int or None
        The summed primal and dual objectives are reported every this many passes (0: never).
        None: as the callback's ``objective_every`` attribute says (default 10), never
        without a callback.
    newton : bool
        Squared hinge: a class whose passes stall (its own detector) leaves the passes and is
        finished by the primal truncated Newton method (`solvers.multiclass.ovr_newton`).
    rows : int array or None
        Solve on these rows only (distinct indices into X), without copying X: the problem of
        ``X[rows]``, ``y[rows]`` and ``C[..., rows]`` (y and an array C stay whole). With
        increasing rows the iterates equal those on the copied rows.
    newton_after : int or None
        Squared hinge with ``newton``: a class still running after this many passes leaves them
        for the Newton finish (None: when its stall detector says, `ovr_newton.STALL_CAP`).
    start_on_support : bool
        With ``warm_start`` from the previous C of a path: each class begins with only the rows
        of α_c > 0 active, the others shrunk (restored when the class meets tol on them).
    newton_tol : float or None
        The factor of the Newton finish's stopping rule in place of 0.01 · tol
        (`solvers.binary.newton`; a path over C gives 0.1 · tol).

    Returns
    -------
    SolveResult
        w (n_classes, n_features), bias (n_classes,), alpha (n_classes, n_samples) (with
        ``rows``: (n_classes, len(rows))), status
        (converged when every class has), gap = pg_range (the largest per-class M − m: of the
        pass that converged a class, else of the returned α), pg_max, pg_min, primal and dual
        (sums over classes), duality_gap, history; ``extra`` holds per-class ``primal``,
        ``dual``, ``n_iter``, ``gap``.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    check_objective_every(objective_every, zero_means_never=True)
    objective_every = objective_passes(callback, objective_every)
    tol, max_iter = check_tol(tol), check_max_iter(max_iter)
    newton_tol = None if newton_tol is None else check_tol(newton_tol, "newton_tol")
    check_choice(loss, LOSSES, "loss")
    check_choice(order, ORDERS, "order")
    problem = check_problem(X, y, n_classes, 1.0, bias)
    k, n = problem.n_classes, problem.n_samples
    rows = check_rows(rows, n)
    Cfull = restrict_C(_per_class_C(C, k, n), n, rows)
    if warm_start is not None and rows is not None:
        warm_start = _scattered(warm_start, k, n, rows)
    if warm_weights is not None:
        warm_weights = _checked_weights(warm_weights, k, problem.n_features, warm_start)
    n_threads = _n_threads(n_jobs)
    inner = ovr_parallel.inner_threads(problem, n_threads, k) if warm_start is None else 1
    if inner > 1:
        options = dict(
            loss=loss, tol=tol, max_iter=max_iter, order=order, shrinking=shrinking,
            random_state=random_state, newton=newton, newton_after=newton_after,
            newton_tol=newton_tol,
        )  # fmt: skip
        result = ovr_parallel.solve_by_class(problem, Cfull, k, inner, monitor, options)
        return subset_alpha(result, rows)
    storage = ClassBlocks(k, _fused_threads(problem, n_threads), problem.n_features, n)
    blocks = [
        make_block(
            problem, Cfull, classes, warm_start, loss, *storage.regions(b), start_on_support,
            None if warm_weights is None else [storage.of_block(a, b) for a in warm_weights],
        )  # fmt: skip
        for b, classes in enumerate(storage.classes)
    ]
    hinge = loss == "hinge"
    # one detector per class: a class whose passes stall leaves the pass at once, so no class
    # runs passes while it waits for the slowest one
    stalls = ovr_newton.stall_detectors(loss, newton, k, newton_after)
    rules = _PassRules(tol, max_iter, order, shrinking and order != "random", objective_every)
    status, iteration, measured = _run_passes(
        problem, blocks, hinge, rules, np.random.default_rng(random_state), stalls, monitor
    )
    if measured is None:  # the last pass's report did not measure the classes
        measured = [block_measures(problem, b, hinge) for b in blocks]
    finished = {}
    if status in (Status.CONVERGED, Status.MAX_ITER) and any(b.stalled.any() for b in blocks):
        finished = _finish_by_newton(
            problem, blocks, Cfull, (tol, newton_tol), max_iter - iteration, monitor, n_threads,
            measured,
        )  # fmt: skip
        if status is Status.CONVERGED and not all(f.converged for f in finished.values()):
            status = Status.MAX_ITER
        stops = {f.status for f in finished.values()}  # a cancel, or the time, ended the finish
        if stops & {Status.STOPPED, Status.TIME_LIMIT}:
            status = Status.STOPPED if Status.STOPPED in stops else Status.TIME_LIMIT
    # the Newton method moved only the classes it finished, whose measures it replaces
    result = _result(problem, blocks, storage, status, iteration, monitor, tol, finished, measured)
    return subset_alpha(result, rows)


@dataclass(frozen=True)
class _PassRules:
    """The driver's policy for the passes: stopping tolerance, budget, row order, shrinking and
    how often the objectives are reported (0: never)."""

    tol: float
    max_iter: int
    order: str
    shrink: bool
    objective_every: int


def _run_passes(problem, blocks, hinge, rules: _PassRules, rng, stalls, monitor):
    """Fused passes until every class has converged or left for Newton, the budget is spent or
    the monitor stops; returns (status, passes run, the blocks' measures of the returned state
    where the last pass's report took them, else None)."""
    n = problem.n_samples
    order_buffer = np.empty(n, dtype=np.int64)
    long_rows = problem.X.data.shape[0] >= LONG_ROW_ENTRIES * max(n, 1)
    status, iteration, verify, measured = Status.MAX_ITER, 0, False, None
    # the calling thread runs the first block of each pass itself: n_blocks − 1 workers
    pool = ThreadPoolExecutor(max_workers=len(blocks) - 1) if len(blocks) > 1 else None
    try:
        while iteration < rules.max_iter:
            iteration += 1
            full = rules.order != "random" or verify
            running = [b for b in blocks if b.n_live]
            block_rows = rows_to_visit(running, rules.order, rng, order_buffer, verify)
            tasks = [
                (problem, b, r, hinge, long_rows) for b, r in zip(running, block_rows, strict=True)
            ]
            others = [pool.submit(run_block, *task) for task in tasks[1:]] if pool else []
            for task in tasks if pool is None else tasks[:1]:
                run_block(*task)
            for f in others:
                f.result()
            met_any = False
            for b in running:
                met_any |= end_of_pass(b, rules.tol, rules.shrink, full, iteration)
            verify = rules.order == "random" and met_any and not verify
            done = not any(b.n_live for b in blocks)
            report, measured = _pass_progress(
                problem, blocks, running, hinge, rules, iteration, monitor, done
            )
            stop = monitor.report(report)
            if stalls is not None and iteration < rules.max_iter and stop is None:
                for b in running:
                    set_aside_stalled(b, stalls)
            if not any(b.n_live for b in blocks):
                return Status.CONVERGED, iteration, measured
            if stop is not None:
                return stop, iteration, measured
    finally:
        if pool is not None:
            pool.shutdown()
    return status, iteration, measured


def _pass_progress(problem, blocks, running, hinge, rules, iteration, monitor, done):
    """The pass's report: the largest M − m of the running classes, and the summed objectives
    when they are due or every class has converged (``done``: the record of the returned
    state, which ends the history). Returns the report and the blocks' measures it took (None
    if none): the result of a solve that ends here reuses them rather than measure again."""
    gap, M, m, kept = summary_of_pass(running)
    primal = dual = measures = None
    due = rules.objective_every and iteration % rules.objective_every == 0
    if due or done:
        measures = [block_measures(problem, b, hinge) for b in blocks]
        primal = sum(float(mb[0].sum()) for mb in measures)
        dual = sum(float(mb[1].sum()) for mb in measures)
    return Progress(
        iteration=iteration,
        elapsed_s=monitor.elapsed(),
        gap=gap,
        pg_max=finite_or_none(M),
        pg_min=finite_or_none(m),
        pg_range=gap,
        active=kept,
        primal=primal,
        dual=dual,
        duality_gap=None if dual is None else relative_duality_gap(primal, -dual),
    ), measures


def _finish_by_newton(problem, blocks, Cfull, tols, max_iter, monitor, n_threads, measured):
    """Finish the stalled classes; ``tols`` is (tol, newton_tol), ``measured`` the blocks'
    measures before the switch."""
    of_block = {id(b): measures for b, measures in zip(blocks, measured, strict=True)}
    workers = min(n_threads, sum(int(b.stalled.sum()) for b in blocks))
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        return ovr_newton.finish_stalled_classes(
            problem, blocks, Cfull, tols, max_iter, monitor, pool, lambda b: of_block[id(b)]
        )
    finally:
        if pool is not None:
            pool.shutdown()


def _fused_threads(problem, n_threads: int) -> int:
    """Blocks of classes (threads) for the fused pass: at most one per class, and one per
    ``WORK_PER_THREAD`` class-entries of a pass, so that small problems (whose passes take a
    few milliseconds) are not slowed by the per-pass barrier, the straggler thread of a busy
    machine and the threads' start-up."""
    k = problem.n_classes
    work = int(problem.X.data.shape[0]) * k
    return max(1, min(n_threads, k, work // WORK_PER_THREAD))


def _scattered(warm_start, k, n, rows):
    """A subset's (k, len(rows)) warm start placed in its rows of a (k, n) array."""
    given = np.asarray(warm_start, dtype=np.float64)
    if given.shape != (k, rows.shape[0]):
        raise ValueError(f"warm_start must have shape ({k}, {rows.shape[0]}), got {given.shape}")
    full = np.zeros((k, n))
    full[:, rows] = given
    return full


def _checked_weights(warm_weights, k, n_features, warm_start):
    """``warm_weights`` as a pair of float64 arrays of shapes (k, n_features) and (k,), finite;
    only with a warm start."""
    if warm_start is None:
        raise ValueError("warm_weights needs the warm_start it was built from")
    if len(warm_weights) != 2:
        raise ValueError("warm_weights must be a pair (W, bias weights)")
    W, w_bias = (np.asarray(a, dtype=np.float64) for a in warm_weights)
    if W.shape != (k, n_features) or w_bias.shape != (k,):
        raise ValueError(
            f"warm_weights must be arrays of shapes ({k}, {n_features}) and ({k},), got "
            f"{W.shape} and {w_bias.shape}"
        )
    if not (np.isfinite(W).all() and np.isfinite(w_bias).all()):
        raise ValueError("warm_weights contains NaN or infinite values")
    return W, w_bias


def _n_threads(n_jobs) -> int:
    if n_jobs is None:
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on every platform
            return max(1, os.cpu_count() or 1)
    if int(n_jobs) != n_jobs or n_jobs < 1:
        raise ValueError(f"n_jobs must be a positive integer or None, got {n_jobs!r}")
    return int(n_jobs)


def _per_class_C(C, k: int, n: int):
    """C as a float64 array of shape (n,) (the door's `per_sample_C`) or (k, n), finite, >= 0."""
    arr = np.asarray(C, dtype=np.float64)
    if arr.ndim < 2:
        return per_sample_C(arr, n)
    if arr.shape != (k, n):
        raise ValueError(f"C must be a scalar or have shape ({n},) or ({k}, {n}), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError("C must be finite and >= 0 for every sample")
    return arr


def _result(problem, blocks, storage, status, n_iter, monitor, tol, finished, measured):
    """The result, measured on the returned state (``measured``: per block, the (primal, f(α),
    M, m) of each class after the last pass): a class that converged keeps the M − m of the pass
    that converged it (it has not moved since); any other class takes the measured one. A class
    the Newton method finished (``finished``) reports its own objectives and, as gap,
    ‖∇P‖/‖∇P(0)‖ (its M and m count as 0 in pg_max and pg_min), and counts its Newton steps
    after its passes, as the binary solver does; ``n_iter`` is then the most of any class."""
    k = problem.n_classes
    intercept, primal, dual = np.empty(k), np.empty(k), np.empty(k)
    M, m, gap = np.empty(k), np.empty(k), np.empty(k)
    class_iter = np.empty(k, dtype=np.int64)
    for b, (p, d, M_now, m_now) in zip(blocks, measured, strict=True):
        primal[b.classes], dual[b.classes] = p, d
        running = b.live.astype(bool)
        M[b.classes] = np.where(running, M_now, b.M)
        m[b.classes] = np.where(running, m_now, b.m)
        gap[b.classes] = np.where(running, M_now - m_now, b.gap)
        intercept[b.classes] = problem.bias * b.wb
        class_iter[b.classes] = b.n_iter
    for c, f in finished.items():
        primal[c], dual[c], gap[c], M[c], m[c] = f.primal, f.dual, f.ratio, 0.0, 0.0
        class_iter[c] += f.n_iter
    if finished:
        n_iter = max(n_iter, int(class_iter.max()))
    M[~np.isfinite(M)], m[~np.isfinite(m)], gap[~np.isfinite(gap)] = 0.0, 0.0, 0.0
    if (
        status is not Status.CONVERGED
        and not finished
        and np.all((gap <= tol) & (np.abs(M) <= tol) & (np.abs(m) <= tol))
    ):
        status = Status.CONVERGED
    for b in blocks:
        b.W = b.alpha = None  # the regions are about to be rearranged
    w, alpha = storage.take()
    total_primal, total_dual = float(primal.sum()), float(dual.sum())
    duality_gap = relative_duality_gap(total_primal, -total_dual)
    final = monitor.conclude(
        Progress(
            iteration=n_iter,
            elapsed_s=monitor.elapsed(),
            gap=float(gap.max()),
            pg_max=float(M.max()),
            pg_min=float(m.min()),
            pg_range=float(gap.max()),
            active=monitor.history[-1].active if monitor.history else 0,
            primal=total_primal,
            dual=total_dual,
            duality_gap=duality_gap,
            method="newton" if finished else "dcd",
        )
    )
    return SolveResult(
        w=w,
        bias=intercept,
        alpha=alpha,
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=total_primal,
        dual=total_dual,
        history=monitor.history,
        extra={"primal": primal, "dual": dual, "n_iter": class_iter, "gap": gap},
        duality_gap=duality_gap,
        pg_max=final.pg_max,
        pg_min=final.pg_min,
        pg_range=final.gap,
        method="newton" if finished else "dcd",
    )
