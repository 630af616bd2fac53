"""The outer loops of the sequential dual methods: which rows each pass visits, and when to stop.

Every pass is one iteration for ``max_iter``, the monitor and the history; a solve stops only
when a pass over the full problem meets ``tol``; cooling starts the working tolerance at
max(10·tol, 1) and lowers it in graded steps down to ``tol`` (Keerthi et al., KDD 2008, 2.1).

`run_sdm` (Weston–Watkins) is the paper's schedule: a full pass over every usable row in a fresh
random order, then "shrunk" passes over the rows the full pass kept (those with a free variable),
until the shrunk problem meets the working tolerance or their effort (g evaluations over those of
a full pass) exceeds five full passes; the working tolerance is divided by 10 each time a full
pass meets it.

`run_active_sets` (Crammer–Singer) keeps per-row active class sets across passes: a class at its
bound that cannot move is dropped from its row, a row left with one class is dropped from the
passes, and every set is restored when the shrunk problem meets the working tolerance (which is
then halved).

Both return (status, passes run); the front end (`solvers.multiclass.sdm`) measures the state it
returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from solvers._core.progress import Monitor, Progress, Status, relative_duality_gap

SHRUNK_EFFORT_BUDGET = 5.0


@dataclass
class Passes:
    """What a schedule needs from a formulation bound to one problem's arrays.

    run_pass(order, shrunk, keep) -> (max violation, g evaluations) for `run_sdm`, or
    run_pass(order) -> the same for `run_active_sets`, which also needs restore() (every class
    of every row active again) and still_active(rows) (the rows that keep more than one active
    class); objectives() -> (primal, dual in minimisation form); max_violation(rows) -> the
    measure over ``rows`` at the current α, read only.
    """

    run_pass: Callable[..., tuple[float, int]]
    objectives: Callable[[], tuple[float, float]]
    max_violation: Callable[[np.ndarray], float]
    restore: Callable[[], None] | None = None
    still_active: Callable[[np.ndarray], np.ndarray] | None = None


@dataclass
class Reporter:
    """Progress records of a schedule, with the objectives every ``objective_every`` full passes
    and on the full pass that meets ``tol`` (the returned state, whose record ends the history)."""

    passes: Passes
    monitor: Monitor
    objective_every: int
    tol: float
    last_objective: int = 0

    def __call__(self, iteration: int, violation: float, active: int, full: bool):
        primal = dual = None
        every = self.objective_every
        due = every and iteration - self.last_objective >= every
        if full and (due or violation < self.tol):
            primal, dual = self.passes.objectives()
            self.last_objective = iteration
        return self.monitor.report(
            Progress(
                iteration=iteration,
                elapsed_s=self.monitor.elapsed(),
                gap=float(violation),
                max_violation=float(violation),
                active=int(active),
                primal=primal,
                dual=dual,
                duality_gap=None if dual is None else relative_duality_gap(primal, -dual),
            )
        )


def run_sdm(passes: Passes, rows, n_samples, *, tol, max_iter, shrinking, rng, report: Reporter):
    """Pass until a full pass meets ``tol`` or a budget ends; returns (status, n_iter)."""
    keep = np.zeros(n_samples, dtype=np.bool_)
    tol_now = max(10.0 * tol, 1.0) if shrinking else tol
    iteration = 0
    while True:
        full_gap, full_work = passes.run_pass(rng.permutation(rows), False, keep)
        iteration += 1
        status = report(iteration, full_gap, rows.shape[0], True)
        if full_gap < tol:
            return Status.CONVERGED, iteration
        if status is not None:
            return status, iteration
        if iteration >= max_iter:
            return Status.MAX_ITER, iteration
        if not shrinking:
            continue
        if full_gap < tol_now:
            tol_now = max(tol_now / 10.0, tol)
        kept = rows[keep[rows]]
        effort = 0.0
        while kept.shape[0]:
            gap, work = passes.run_pass(rng.permutation(kept), True, keep)
            iteration += 1
            status = report(iteration, gap, kept.shape[0], False)
            if status is not None:
                return status, iteration
            if iteration >= max_iter:
                return Status.MAX_ITER, iteration
            effort += work / max(full_work, 1)
            if gap < tol_now or effort > SHRUNK_EFFORT_BUDGET:
                break


def run_active_sets(passes: Passes, rows, *, tol, max_iter, shrinking, rng, report: Reporter):
    """Passes over the rows that keep active classes, restoring all of them whenever the shrunk
    problem meets the current tolerance; the tolerance cools from max(10·tol, 1), halving at each
    restore. Stops when a pass over the full sets meets ``tol``. Returns (status, n_iter).
    """
    tol_now = max(10.0 * tol, 1.0) if shrinking else tol
    from_all = True
    active = rows
    iteration = 0
    while True:
        gap, _ = passes.run_pass(rng.permutation(active))
        iteration += 1
        status = report(iteration, gap, active.shape[0], from_all)
        if from_all and gap < tol:
            return Status.CONVERGED, iteration
        if status is not None:
            return status, iteration
        if iteration >= max_iter:
            return Status.MAX_ITER, iteration
        if not shrinking:
            passes.restore()
            continue
        if iteration == 1:
            # a warm start begins close to the optimum: cool from where it stands
            tol_now = min(tol_now, max(gap / 2.0, tol))
        active = passes.still_active(active)
        if gap < tol_now or active.shape[0] == 0:
            passes.restore()
            active = rows
            tol_now = max(tol_now / 2.0, tol)
            from_all = True
        else:
            from_all = False
