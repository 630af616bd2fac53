"""One-vs-rest with fewer classes than threads: the spare threads go inside each class.

`n_jobs` is the whole thread budget of one fit. With k classes and T ≥ 2k threads, the fused pass
(`solvers.multiclass.ovr`) could use only k of them; here the k binary problems run side by side,
each on T // k threads of the parallel binary solver (`solvers.binary.parallel`), so no more than
T threads ever run. Every class is the binary problem of `solvers.binary.dcd` with y_i = +1 for its
rows and −1 for the others, with the same options; the result has the fused solver's shape.
Progress: one record per class pass, its ``gap`` the largest of the classes' latest gaps.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from solvers._core.progress import Progress, SolveResult, Status, relative_duality_gap
from solvers.binary import parallel
from solvers.binary.dcd import solve_binary


def inner_threads(problem, n_threads: int, k: int) -> int:
    """Threads per class worth using, or 1 when the fused pass should run instead."""
    per_class = n_threads // k
    if per_class < 2:
        return 1
    return parallel.threads_for(problem.X, problem.n_samples, per_class)


def solve_by_class(problem, Cfull, k, inner, monitor, options) -> SolveResult:
    """The k binary solves, k at a time, ``inner`` threads each (module docstring)."""
    lock = threading.Lock()
    latest = np.full(k, np.inf)
    count = [0]
    # why the monitor stopped the classes: they see its clock and the caller's callback as their
    # own callback's False, and would all say "stopped"
    reasons = set()

    def forward(c):
        def callback(p: Progress):
            with lock:
                latest[c] = p.gap
                count[0] += 1
                record = Progress(
                    iteration=count[0], elapsed_s=monitor.elapsed(), gap=float(latest.max()),
                    method=p.method,
                )  # fmt: skip
                reason = monitor.report(record)
                if reason is not None:
                    reasons.add(reason)
                return reason is None

        return callback

    def one(c):
        y = np.where(problem.y == c, 1.0, -1.0)
        C = Cfull if Cfull.ndim == 1 else Cfull[c]
        return solve_binary(
            problem.X, y, C=C, bias=problem.bias, n_jobs=inner, callback=forward(c), **options
        )

    with ThreadPoolExecutor(max_workers=k) as pool:
        results = list(pool.map(one, range(k)))
    return _combine(results, monitor, reasons)


def _combine(results, monitor, reasons) -> SolveResult:
    w = np.stack([r.w for r in results])
    primal = np.array([r.primal for r in results])
    dual = np.array([r.dual for r in results])
    gap = np.array([r.gap for r in results])
    # a class stopped by the monitor stopped for the monitor's reason (the caller's callback
    # first: the clock may have run out after it)
    stop = Status.STOPPED if Status.STOPPED in reasons or not reasons else Status.TIME_LIMIT
    status = _overall_status({stop if r.status is Status.STOPPED else r.status for r in results})
    total_primal, total_dual = float(primal.sum()), float(dual.sum())
    methods = {r.method for r in results}
    method = "newton" if "newton" in methods else "dcd"
    n_iter = max(r.n_iter for r in results)
    final = monitor.conclude(
        Progress(
            iteration=n_iter, elapsed_s=monitor.elapsed(), gap=float(gap.max()),
            primal=total_primal, dual=total_dual,
            duality_gap=relative_duality_gap(total_primal, -total_dual), method=method,
        )
    )  # fmt: skip
    return SolveResult(
        w=w,
        bias=np.array([r.bias for r in results]),
        alpha=np.stack([r.alpha for r in results]),
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=total_primal,
        dual=total_dual,
        history=monitor.history,
        extra={
            "primal": primal,
            "dual": dual,
            "n_iter": np.array([r.n_iter for r in results]),
            "gap": gap,
        },
        duality_gap=relative_duality_gap(total_primal, -total_dual),
        pg_max=max((r.pg_max for r in results if r.pg_max is not None), default=None),
        pg_min=min((r.pg_min for r in results if r.pg_min is not None), default=None),
        pg_range=final.gap,
        method=method,
    )


def _overall_status(statuses) -> Status:
    """Converged only when every class is; else why the unfinished classes ended, a stop (the
    callback's or the clock's) before the pass budget, since it ended the others early too."""
    for reason in (Status.STOPPED, Status.TIME_LIMIT, Status.MAX_ITER):
        if reason in statuses:
            return reason
    return Status.CONVERGED
