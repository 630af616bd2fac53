"""One-vs-rest's finishing method: each class still running after a stall ends by primal Newton.

For the squared hinge, a class whose passes have stalled (its own
`solvers._core.newton.StallDetector` on its M − m of each pass: after ``STALL_CAP`` passes, or when
it stops falling geometrically) leaves the fused passes at once, as its class-by-class solve would
switch, so no class runs passes while it waits for the slowest; once no class is left running, each
is finished by the primal truncated Newton method of `solvers._core.newton` from its w_c, exactly as
the binary solver does (`solvers.binary.newton` states the stopping rule ε′ = 0.01 · tol · max(1,
min(n₊, n₋)) / n, or ``newton_tol`` in place of 0.01 · tol, and the certificate). Classes are
independent, so they are finished on the fit's threads. A class finished this way reports ``gap`` =
‖∇P‖/‖∇P(0)‖ and its own duality gap; its α is α(w_c) or its dual iterate before the switch,
whichever has the better dual objective; the result's ``method`` is ``"newton"`` when any class was
finished so.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace

import numpy as np

from solvers._core.newton import L2Loss, StallDetector, newton_finish
from solvers._core.progress import Status
from solvers.binary.newton import STALL_CAP, STALL_WINDOW, primal_tolerance


@dataclass
class Finished:
    """What the finishing method left for one class."""

    primal: float
    dual: float  # f(α), minimisation form
    ratio: float  # ‖∇P‖ / ‖∇P(0)‖
    converged: bool
    status: Status | None = None  # the monitor's, when it stopped the finish
    n_iter: int = 0  # Newton steps taken


def stall_detectors(
    loss: str, enabled: bool, n_classes: int, cap: int | None = None
) -> list[StallDetector] | None:
    """One detector per class, or None when the loss has no finishing method; ``cap`` replaces
    ``STALL_CAP``."""
    if not enabled or loss != "squared_hinge":
        return None
    cap = STALL_CAP if cap is None else cap
    return [StallDetector(cap=cap, window=STALL_WINDOW) for _ in range(n_classes)]


# Seconds between the asks of the solve's callback while classes are finished: the finish of
# a class may take a long time (ten million Newton steps at a tol of 1e-300), and a job's cancel
# is heard only through the callback.
ASK_EVERY_S = 1.0


class _Silent:
    """The monitor of the per-class finishes, shared by their threads: their records are not
    reported (each class numbers its own steps), but the time limit is checked at every step
    and, every ASK_EVERY_S, the callback is asked whether to go on with the last record of the
    passes, its time brought up to date."""

    def __init__(self, monitor):
        self.monitor = monitor
        self.lock = threading.Lock()
        self.asked_at = monitor.elapsed()
        self.stop: Status | None = None

    def elapsed(self):
        return self.monitor.elapsed()

    def report(self, progress):
        limit = self.monitor.time_limit
        if limit is not None and self.monitor.elapsed() >= limit:
            return Status.TIME_LIMIT
        with self.lock:
            history = self.monitor.history
            if self.stop is None and history and self.elapsed() - self.asked_at >= ASK_EVERY_S:
                self.asked_at = self.elapsed()
                self.stop = self.monitor.report(replace(history[-1], elapsed_s=self.asked_at))
            return self.stop


def finish_class(problem, block, j, C_class, tols, max_iter, monitor, dual_before):
    """Finish class ``block.classes[j]`` in place (its W column, bias weight and α column);
    ``tols`` is (tol, newton_tol)."""
    X, bias = problem.X, problem.bias
    y = np.where(problem.y == block.classes[j], 1.0, -1.0)
    C = np.ascontiguousarray(C_class, dtype=np.float64)
    loss = L2Loss(y, C, regression=False)
    w = np.empty(X.n_features + 1)
    w[:-1] = block.W[:, j]
    w[-1] = block.wb[j]
    tol, newton_tol = tols
    outcome = newton_finish(
        X, bias, loss, w, eps=primal_tolerance(y, C, tol, False, newton_tol), max_iter=max_iter,
        monitor=monitor, first_iteration=0,
    )  # fmt: skip
    block.W[:, j] = outcome.w[:-1]
    block.wb[j] = outcome.w[-1]
    dual = dual_before
    if outcome.dual <= dual_before:
        block.alpha[:, j] = y * outcome.beta
        dual = outcome.dual
    converged = outcome.status is Status.CONVERGED
    stop = outcome.status if outcome.status in (Status.STOPPED, Status.TIME_LIMIT) else None
    return Finished(outcome.primal, dual, outcome.grad_ratio, converged, stop, outcome.n_iter)


def finish_stalled_classes(problem, blocks, Cfull, tols, max_iter, monitor, pool, measures):
    """Finish every stalled class of every block; returns {class: Finished}. ``tols`` is
    (tol, newton_tol).

    ``measures(block)`` gives the block's per-class (primal, f(α), M, m) before the switch.
    """
    jobs = []
    for b in blocks:
        stalled = np.flatnonzero(b.stalled)
        if stalled.shape[0] == 0:
            continue
        dual_before = measures(b)[1]
        for j in stalled:
            c = int(b.classes[j])
            C_class = Cfull if Cfull.ndim == 1 else Cfull[c]
            jobs.append((b, int(j), c, C_class, float(dual_before[j])))

    quiet = _Silent(monitor)

    def run(job):
        b, j, c, C_class, dual_before = job
        return c, finish_class(problem, b, j, C_class, tols, max_iter, quiet, dual_before)

    done = list(pool.map(run, jobs)) if pool is not None else [run(job) for job in jobs]
    for b in blocks:
        b.stalled[:] = 0
    return dict(done)
