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
own (`solvers.multiclass.class_blocks`). Per class the rules are the
binary solver's: shrinking (Algorithm 3) with the previous pass's extreme projected gradients;
stopping when M − m ≤ tol, |M| ≤ tol and |m| ≤ tol on a full pass (a shrunk class that meets it is
restored and checked again); a converged class is no longer updated. The row order of each pass is
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
from solvers._core.warm_start import ray_scale
from solvers.binary.dcd import LONG_ROW_ENTRIES
from solvers.multiclass import ovr_newton, ovr_parallel
from solvers.multiclass.class_blocks import ClassBlocks
from solvers.multiclass.kernels import weights_from_alpha
from solvers.multiclass.ovr_kernels import (
    after_pass,
    ovr_measures,
    ovr_pass,
    pass_summary,
    ray_terms,
    rows_in_play,
    shuffled_rows,
)
from solvers.multiclass.problem import check_problem

LOSSES = ("hinge", "squared_hinge")
WORK_PER_THREAD = 10_000_000  # class-entries of one pass (non-zeros × classes), ~10-20 ms
ORDERS = ("permute", "cyclic", "random")


@dataclass
class _Block:
    """The state of one block of classes (`solvers.multiclass.ovr_kernels` says what each holds)."""

    classes: np.ndarray
    Cmat: np.ndarray
    c_stride: int
    alpha: np.ndarray
    W: np.ndarray
    wb: np.ndarray
    usable: np.ndarray
    active: np.ndarray
    live: np.ndarray
    Mbar: np.ndarray
    mbar: np.ndarray
    M: np.ndarray
    m: np.ndarray
    n_kept: np.ndarray
    n_usable: np.ndarray
    gap: np.ndarray
    n_iter: np.ndarray
    in_play: np.ndarray
    stalled: np.ndarray  # (kb,) uint8: left the passes to be finished by primal Newton
    n_live: int  # classes of the block still running


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
    n_jobs: int | None = None,
    objective_every: int | None = None,
    newton: bool = True,
    rows: np.ndarray | None = None,
    newton_after: int | None = None,
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
        from it. With ``rows``, shape (n_classes, len(rows)) in the order of ``rows``.
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
    check_choice(loss, LOSSES, "loss")
    check_choice(order, ORDERS, "order")
    problem = check_problem(X, y, n_classes, 1.0, bias)
    k, n = problem.n_classes, problem.n_samples
    rows = check_rows(rows, n)
    Cfull = restrict_C(_per_class_C(C, k, n), n, rows)
    if warm_start is not None and rows is not None:
        warm_start = _scattered(warm_start, k, n, rows)
    n_threads = _n_threads(n_jobs)
    inner = ovr_parallel.inner_threads(problem, n_threads, k) if warm_start is None else 1
    if inner > 1:
        options = dict(
            loss=loss, tol=tol, max_iter=max_iter, order=order, shrinking=shrinking,
            random_state=random_state, newton=newton, newton_after=newton_after,
        )  # fmt: skip
        result = ovr_parallel.solve_by_class(problem, Cfull, k, inner, monitor, options)
        return subset_alpha(result, rows)
    storage = ClassBlocks(k, _fused_threads(problem, n_threads), problem.n_features, n)
    blocks = [
        _make_block(problem, Cfull, classes, warm_start, loss, *storage.regions(b))
        for b, classes in enumerate(storage.classes)
    ]
    hinge = loss == "hinge"
    shrink = shrinking and order != "random"
    rng = np.random.default_rng(random_state)

    def run_block(block: _Block, rows: np.ndarray) -> None:
        ovr_pass(
            problem.X,
            problem.bias,
            problem.y,
            block.classes,
            block.Cmat,
            block.c_stride,
            hinge,
            problem.A,
            rows,
            block.alpha,
            block.W,
            block.wb,
            block.active,
            block.live,
            block.Mbar,
            block.mbar,
            block.M,
            block.m,
            block.n_kept,
            block.in_play,
            long_rows,
        )

    def objectives():
        measures = [_block_measures(problem, b, hinge) for b in blocks]
        return sum(float(m[0].sum()) for m in measures), sum(float(m[1].sum()) for m in measures)

    # one detector per class: a class whose passes stall leaves the pass at once, so no class
    # runs passes while it waits for the slowest one
    stalls = ovr_newton.stall_detectors(loss, newton, k, newton_after)
    order_buffer = np.empty(n, dtype=np.int64)
    long_rows = problem.X.data.shape[0] >= LONG_ROW_ENTRIES * max(n, 1)
    finished = {}
    status = Status.MAX_ITER
    verify = False
    iteration = 0
    # the calling thread runs the first block of each pass itself: n_blocks − 1 workers
    n_blocks = len(blocks)
    pool = ThreadPoolExecutor(max_workers=n_blocks - 1) if n_blocks > 1 else None
    try:
        while iteration < max_iter:
            iteration += 1
            full = order != "random" or verify
            running = [b for b in blocks if b.n_live]
            block_rows = _rows_to_visit(running, order, rng, order_buffer, verify)
            if pool is None:
                for b, r in zip(running, block_rows, strict=True):
                    run_block(b, r)
            else:
                others = [
                    pool.submit(run_block, b, r)
                    for b, r in zip(running[1:], block_rows[1:], strict=True)
                ]
                run_block(running[0], block_rows[0])
                for f in others:
                    f.result()
            met_any = False
            for b in running:
                met_any |= _after_pass(b, tol, shrink, full, iteration)
            verify = order == "random" and met_any and not verify
            gap, M, m, kept = _pass_summary(running)
            primal = dual = None
            if objective_every and iteration % objective_every == 0:
                primal, dual = objectives()
            progress = Progress(
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
            )
            stop = monitor.report(progress)
            if stalls is not None and iteration < max_iter and stop is None:
                for b in running:
                    _set_aside_stalled(b, stalls)
            if not any(b.n_live for b in blocks):
                status = Status.CONVERGED
                break
            if stop is not None:
                status = stop
                break
    finally:
        if pool is not None:
            pool.shutdown()
    if status in (Status.CONVERGED, Status.MAX_ITER) and any(b.stalled.any() for b in blocks):
        finished = _finish_by_newton(
            problem, blocks, Cfull, tol, max_iter - iteration, monitor, n_threads, hinge
        )
        if status is Status.CONVERGED and not all(f.converged for f in finished.values()):
            status = Status.MAX_ITER
    result = _result(problem, blocks, storage, hinge, status, iteration, monitor, tol, finished)
    return subset_alpha(result, rows)


def _finish_by_newton(problem, blocks, Cfull, tol, max_iter, monitor, n_threads, hinge):
    workers = min(n_threads, sum(int(b.stalled.sum()) for b in blocks))
    pool = ThreadPoolExecutor(max_workers=workers) if workers > 1 else None
    try:
        return ovr_newton.finish_stalled_classes(
            problem, blocks, Cfull, tol, max_iter, monitor, pool,
            lambda b: _block_measures(problem, b, hinge),
        )  # fmt: skip
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


def _make_block(problem, Cfull, classes, warm_start, loss, W, alpha) -> _Block:
    kb = classes.shape[0]
    if Cfull.ndim == 1:
        Cmat, c_stride = np.ascontiguousarray(Cfull[:, None]), 0
        # the same rows for every class: a read-only (n, kb) view of one (n,) array
        usable = np.broadcast_to((Cfull > 0).view(np.uint8)[:, None], (problem.n_samples, kb))
    else:
        Cmat, c_stride = np.ascontiguousarray(Cfull[classes].T), 1
        usable = (Cmat > 0).view(np.uint8)
    wb = np.zeros(kb)
    if warm_start is not None:
        alpha[...] = _initial_alpha(warm_start, classes, problem, Cmat, c_stride, usable, loss)
        # w_c = Σ_i y_i α_i x̃_i: flip the signs in place rather than build an (n, kb) y_i α_i
        rest = problem.y[:, None] != classes[None, :]
        np.negative(alpha, out=alpha, where=rest)
        # into the block's region (zeros on entry) itself: no (n_features, kb) temporary
        weights_from_alpha(problem.X, alpha, problem.bias, 1.0, W, wb)
        np.negative(alpha, out=alpha, where=rest)
        _to_ray_optimum(alpha, Cmat, c_stride, loss == "hinge", W, wb)
    active = usable.copy()
    live = np.ones(kb, dtype=np.uint8)
    in_play = np.empty(problem.n_samples, dtype=np.uint8)
    rows_in_play(active, live, in_play)
    return _Block(
        classes=classes.astype(np.int64),
        Cmat=Cmat,
        c_stride=c_stride,
        alpha=alpha,
        W=W,
        wb=wb,
        usable=usable,
        active=active,
        live=live,
        Mbar=np.full(kb, np.inf),
        mbar=np.full(kb, -np.inf),
        M=np.zeros(kb),
        m=np.zeros(kb),
        n_kept=np.zeros(kb, dtype=np.int64),
        n_usable=usable.sum(axis=0, dtype=np.int64),
        gap=np.full(kb, np.inf),
        n_iter=np.zeros(kb, dtype=np.int64),
        in_play=in_play,
        stalled=np.zeros(kb, dtype=np.uint8),
        n_live=kb,
    )


def _to_ray_optimum(alpha, Cmat, c_stride, hinge, W, wb):
    """Scale each class's warm start (α_c, w̃_c) to the best point of its ray, in place."""
    terms = zip(*ray_terms(alpha, Cmat, c_stride, hinge, W, wb), strict=True)
    r = np.array([ray_scale(*class_terms) for class_terms in terms])
    if np.any(r != 1.0):
        alpha *= r  # row by row, as the arrays are laid out (a column at a time strides)
        W *= r
        wb *= r


def _initial_alpha(warm_start, classes, problem, Cmat, c_stride, usable, loss) -> np.ndarray:
    n, k = problem.n_samples, problem.n_classes
    ws = np.asarray(warm_start, dtype=np.float64)
    if ws.shape != (k, n):
        raise ValueError(f"warm_start must have shape ({k}, {n}), got {ws.shape}")
    if not np.all(np.isfinite(ws)) or np.any(ws < 0):
        raise ValueError("warm_start must hold finite values >= 0")
    alpha = np.ascontiguousarray(ws[classes].T)
    if loss == "hinge":
        upper = Cmat if c_stride else np.broadcast_to(Cmat, alpha.shape)
        np.minimum(alpha, upper, out=alpha)
    alpha[usable == 0] = 0.0
    return alpha


def _rows_to_visit(running, order, rng, buffer, verify):
    """The rows each running block visits in this pass, in one order shared by all blocks.

    A row in which every live class of a block has shrunk its variable is a no-op for that block;
    leaving it out saves reading its flags and prefetching its entries. The order is drawn over
    the rows in play for some live class, a set that does not depend on how the classes are
    blocked, and each block keeps the rows it needs in that order: serial and threaded runs still
    give identical iterates.
    """
    if order == "permute" and len(running) == 1:
        count = shuffled_rows(running[0].in_play, int(rng.integers(0, 2**63)), buffer)
        return [buffer[:count]]
    n = buffer.shape[0]
    masks = [b.in_play.view(np.bool_) for b in running]
    union = masks[0] if len(masks) == 1 else np.logical_or.reduce(masks)
    if order == "permute":
        count = shuffled_rows(union.view(np.uint8), int(rng.integers(0, 2**63)), buffer)
        rows = buffer[:count]
    elif order == "cyclic" or verify:
        rows = np.flatnonzero(union)
    else:
        rows = rng.integers(0, n, size=n)
        return [rows[mask[rows]] for mask in masks]
    if len(masks) == 1:
        return [rows]
    return [rows[mask[rows]] for mask in masks]


def _after_pass(b: _Block, tol: float, shrink: bool, full_pass: bool, iteration: int) -> bool:
    """Per-class stopping and shrinking bookkeeping after a pass; True if some class met tol."""
    met_any, b.n_live = after_pass(
        tol, shrink, full_pass, iteration, b.M, b.m, b.n_kept, b.n_usable, b.usable, b.active,
        b.live, b.gap, b.n_iter, b.Mbar, b.mbar, b.in_play,
    )  # fmt: skip
    return met_any


def _set_aside_stalled(b: _Block, stalls) -> None:
    """Take the block's live classes whose passes have stalled out of the passes (to be finished
    by primal Newton once no class is left running)."""
    live, classes, gaps = b.live.tolist(), b.classes.tolist(), b.gap.tolist()
    out = [j for j, c in enumerate(classes) if live[j] and stalls[c].stalled(gaps[j])]
    if out:
        b.live[out] = 0
        b.stalled[out] = 1
        b.n_live -= len(out)
        rows_in_play(b.active, b.live, b.in_play)


def _pass_summary(running):
    gap, M, m, kept = 0.0, -np.inf, np.inf, 0
    for b in running:
        g, top, bottom, k = pass_summary(b.M, b.m, b.n_kept)
        gap, M, m, kept = max(gap, g), max(M, top), min(m, bottom), kept + k
    return gap, M, m, kept


def _block_measures(problem, b: _Block, hinge: bool):
    """Per-class (primal, f(α), M, m) of a block at its current α."""
    return ovr_measures(
        problem.X,
        problem.bias,
        problem.y,
        b.classes,
        b.Cmat,
        b.c_stride,
        hinge,
        b.alpha,
        b.W,
        b.wb,
    )


def _result(problem, blocks, storage, hinge, status, n_iter, monitor, tol, finished) -> SolveResult:
    """The result, measured on the returned state: a class that converged keeps the M − m of the
    pass that converged it (it has not moved since); any other class is measured anew. A class
    the Newton method finished (``finished``) reports its own objectives and, as gap,
    ‖∇P‖/‖∇P(0)‖ (its M and m count as 0 in pg_max and pg_min)."""
    k = problem.n_classes
    intercept, primal, dual = np.empty(k), np.empty(k), np.empty(k)
    M, m, gap = np.empty(k), np.empty(k), np.empty(k)
    class_iter = np.empty(k, dtype=np.int64)
    for b in blocks:
        p, d, M_now, m_now = _block_measures(problem, b, hinge)
        primal[b.classes], dual[b.classes] = p, d
        running = b.live.astype(bool)
        M[b.classes] = np.where(running, M_now, b.M)
        m[b.classes] = np.where(running, m_now, b.m)
        gap[b.classes] = np.where(running, M_now - m_now, b.gap)
        intercept[b.classes] = problem.bias * b.wb
        class_iter[b.classes] = b.n_iter
    for c, f in finished.items():
        primal[c], dual[c], gap[c], M[c], m[c] = f.primal, f.dual, f.ratio, 0.0, 0.0
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
