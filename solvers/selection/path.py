"""Run a warm-started path over C for every fold, folds in parallel threads over one shared X.

Each fold is a chain of solves, C ascending, each starting from the previous C's dual solution
(see `solvers.selection.cv` for why that is feasible). A pool of threads runs the chains' next
steps, lowest C index first, so that the folds of one C finish together and the early-stopping
rule can look at complete rows of the table; the kernels release the GIL, so the threads run in
parallel. Bookkeeping (scores, the early stop) happens on the calling thread as each C's steps
finish. Memory per fold is one α and the held-out decision values of the best C so far: X is
never copied (the solvers take the fold's rows as an index array).
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

import numpy as np


@dataclass
class Step:
    """One finished solve of the path: C index, fold, its result and its held-out scores."""

    c_index: int
    fold: int
    result: object  # SolveResult
    decisions: np.ndarray  # held-out decision values, rows in the order of the fold's test
    seconds: float


@dataclass
class PathState:
    """What the path has produced so far; ``steps[c_index][fold]`` once run."""

    n_folds: int
    steps: dict[int, dict[int, Step]] = field(default_factory=dict)
    n_done: int = 0
    stopped: bool = False
    out_of_time: bool = False  # a solve of the path was left unstarted at the deadline


def run_path(
    n_Cs: int,
    n_folds: int,
    solve: Callable[[int, int, object], tuple[object, np.ndarray]],
    n_threads: int,
    on_complete_C: Callable[[int, dict[int, Step]], bool],
    deadline: float | None = None,
) -> PathState:
    """Run ``solve(c_index, fold, previous) -> (result, held-out decisions)`` along each fold's
    chain, ``previous`` the fold's result at the previous C (None at the first).
    ``on_complete_C(c_index, steps of that C)`` runs when every fold has finished that C and
    returns False to end the path there (larger C are not run). No solve starts once
    `time.monotonic()` has passed ``deadline`` (the running ones end by their own time limit);
    the path then ends with ``out_of_time``. A solve that raises stops the path and the
    exception propagates once the running solves have returned."""
    state = PathState(n_folds)
    last: list[object] = [None] * n_folds
    ready = [(0, f) for f in range(n_folds)]
    limit = n_Cs
    running = {}

    def timed(i, f, previous):
        start = time.perf_counter()
        result, decisions = solve(i, f, previous)
        return Step(i, f, result, decisions, time.perf_counter() - start)

    with ThreadPoolExecutor(max_workers=max(1, n_threads)) as pool:
        while ready or running:
            while ready and len(running) < n_threads:
                if deadline is not None and time.monotonic() >= deadline:
                    state.out_of_time = any(i < limit for i, _ in ready)  # left undone
                    state.stopped = state.stopped or state.out_of_time
                    ready.clear()
                    break
                i, f = heapq.heappop(ready)
                if i < limit:
                    running[pool.submit(timed, i, f, last[f])] = (i, f)
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                running.pop(future)
                step = future.result()  # a failed solve raises here (the pool drains first)
                last[step.fold] = step.result
                state.n_done += 1
                row = state.steps.setdefault(step.c_index, {})
                row[step.fold] = step
                if len(row) == n_folds and not on_complete_C(step.c_index, row):
                    limit = min(limit, step.c_index + 1)
                    state.stopped = step.c_index + 1 < n_Cs
                if step.c_index + 1 < limit:
                    heapq.heappush(ready, (step.c_index + 1, step.fold))
    return state


def out_of_fold(rows: dict[int, Step], folds, shape) -> np.ndarray:
    """The held-out decision values of one C placed at their rows (NaN where no fold tests a
    row)."""
    out = np.full(shape, np.nan)
    for f, step in rows.items():
        out[folds[f][1]] = step.decisions
    return out


def averaged_alpha(rows: dict[int, Step], folds, n_samples: int, row_axis: int) -> np.ndarray:
    """Per row, the mean of its dual variables over the folds that trained on it (0 where none
    did): a convex combination of feasible points row by row, so feasible for the full problem
    at the same C (the constraints of every formulation here are separable by row)."""
    first = np.asarray(next(iter(rows.values())).result.alpha)
    shape = list(first.shape)
    shape[row_axis] = n_samples
    total = np.zeros(shape)
    count = np.zeros(n_samples)
    for f, step in rows.items():
        train = folds[f][0]
        alpha = np.asarray(step.result.alpha, dtype=np.float64)
        if row_axis == 0:
            total[train] += alpha
        else:
            total[:, train] += alpha
        count[train] += 1.0
    np.maximum(count, 1.0, out=count)
    if row_axis == 0:
        total /= count.reshape((-1,) + (1,) * (total.ndim - 1))
    else:
        total /= count[None, :]
    return total
