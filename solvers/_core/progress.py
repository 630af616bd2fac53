"""Progress records, the callback protocol and the result record shared by every solver.

A solver's Python driver owns the loop policy: it runs one compiled epoch at a time and, between
epochs, hands a `Progress` record to a `Monitor`. The monitor keeps the history, enforces the
wall-clock budget and calls the user's callback (returning ``False`` stops the solve cleanly).
Outcomes are data: every solve ends with a `SolveResult` whose `status` says why it stopped and
whose gap is measured on the state it returns; the last record of the history says the same.

Names of the measures (a field a solver does not have is None):

- ``pg_max``, ``pg_min``, ``pg_range`` — dual coordinate descent (binary, one-vs-rest): the
  largest and smallest projected gradient of a pass and their difference M − m (LIBLINEAR's rule
  stops when M − m, |M| and |m| are all ≤ tol);
- ``max_violation`` — sequential dual method (Crammer–Singer: max_i v_i; Weston–Watkins:
  max v_i^m); for SVR the largest violation of a pass;
- ``duality_gap`` — every solver: (P(w) − D(α)) / max(1, |P(w)|), with D the dual objective in
  maximisation form, whenever the primal and dual objectives are known (always in a result);
- ``gap`` — the documented alias of the solver's own stopping measure: ``pg_range`` for dual
  coordinate descent, ``max_violation`` for the sequential dual method, the sum of violations
  over that of the first pass for SVR (LIBLINEAR's -s 12/13 rule), and UB − LB for the
  structural solvers (which stop when it is ≤ tol · max(1, |UB|), i.e. duality_gap ≤ tol).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np


class Status(StrEnum):
    """Why a solve ended."""

    CONVERGED = "converged"  # the stopping rule holds on the returned state
    MAX_ITER = "max_iter"  # the outer-iteration budget ran out first
    STOPPED = "stopped"  # the callback returned False
    TIME_LIMIT = "time_limit"  # the wall-clock budget ran out first


@dataclass(frozen=True, slots=True)
class Progress:
    """One outer iteration as seen by the callback (see the module docstring for the names).

    iteration: passes run so far; elapsed_s: seconds since the solver was called (its input
    checks and set-up included); active: variables or rows the pass visited; primal, dual:
    objectives (dual in minimisation form, −D, except for the structural solvers, whose ``dual``
    is the lower bound D itself); lower_bound, upper_bound, approx_upper_bound: the structural
    solvers' bounds (the approximate one from the gradients of the last pass); method: the method
    that produced the record when a solver has more than one (``"dcd"``, ``"newton"``);
    bytes_sent: the distributed solvers' bytes communicated in the round (w broadcast, Δw,
    checkpoints).
    """

    iteration: int
    elapsed_s: float
    gap: float
    pg_max: float | None = None
    pg_min: float | None = None
    pg_range: float | None = None
    max_violation: float | None = None
    active: int | None = None
    primal: float | None = None
    dual: float | None = None
    duality_gap: float | None = None
    lower_bound: float | None = None
    upper_bound: float | None = None
    approx_upper_bound: float | None = None
    method: str | None = None
    bytes_sent: int | None = None  # distributed solvers: bytes communicated in the round

    @property
    def M(self) -> float | None:
        """Alias of ``pg_max`` (LIBLINEAR's name)."""
        return self.pg_max

    @property
    def m(self) -> float | None:
        """Alias of ``pg_min`` (LIBLINEAR's name)."""
        return self.pg_min

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (non-finite floats become None). Read field by field: the
        fields are scalars, and `dataclasses.asdict` deep-copied each (about 45 µs a record, a
        cost every pass of a job paid)."""
        out = {}
        for key in self.__dataclass_fields__:
            value = getattr(self, key)
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            out[key] = value
        return out


Callback = Callable[[Progress], "bool | None"]


def relative_duality_gap(primal: float | None, dual_max: float | None) -> float | None:
    """(P − D) / max(1, |P|), D in maximisation form; None when either is unknown."""
    if primal is None or dual_max is None:
        return None
    return float((primal - dual_max) / max(1.0, abs(primal)))


def finite_or_none(value) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def objective_interval(callback: Callback | None, explicit: int | None, default: int) -> float:
    """How many passes apart the drivers compute the primal and dual objectives mid-solve.

    An explicit value wins. Without a callback nobody sees them mid-solve, so never (the final
    objectives are always computed once). A callback may carry an ``objective_every`` attribute
    (an int, or None for never) to say how often it wants them, since each costs a pass.
    """
    if explicit is not None:
        return explicit
    if callback is None:
        return math.inf
    wanted = getattr(callback, "objective_every", default)
    return math.inf if wanted is None else wanted


def objective_passes(callback: Callback | None, explicit: int | None, default: int = 10) -> int:
    """`objective_interval` as a whole number of passes, 0 meaning never."""
    every = objective_interval(callback, explicit, default)
    return 0 if math.isinf(every) else int(every)


@dataclass
class SolveResult:
    """What a solver returns; every measure describes the returned state.

    w: weights over the original features (shape (n_features,) or (n_classes, n_features));
    bias: the weight of the appended bias feature times its value (0.0 when there is none);
    alpha: the dual variables; n_iter: outer iterations run; status: why it ended; gap: the
    solver's stopping measure (module docstring), equal to the last history record's;
    pg_max, pg_min, pg_range, max_violation: that measure under its own name; primal, dual:
    final objectives (as in `Progress`); duality_gap: (P − D) / max(1, |P|); method: the method
    that finished the solve where there is a choice (``"dcd"`` or ``"newton"``); history: one
    `Progress` per outer iteration, plus one for the returned state when no pass ended on it.
    """

    w: np.ndarray
    bias: float | np.ndarray
    alpha: np.ndarray
    n_iter: int
    status: Status
    gap: float
    primal: float | None = None
    dual: float | None = None
    history: list[Progress] = field(default_factory=list)
    lower_bound: float | None = None
    upper_bound: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    duality_gap: float | None = None
    pg_max: float | None = None
    pg_min: float | None = None
    pg_range: float | None = None
    max_violation: float | None = None
    method: str | None = None

    @property
    def converged(self) -> bool:
        return self.status is Status.CONVERGED


def _lacks_figures_of(last: Progress, progress: Progress) -> bool:
    """Whether ``last`` lacks the objectives or the projected-gradient range ``progress`` has."""
    return (last.primal is None and progress.primal is not None) or (
        last.pg_max is None and progress.pg_max is not None
    )


class Monitor:
    """Loop policy shared by the drivers: history, time budget and the user's callback.

    Call `report` once per outer iteration; it returns the status to stop with (STOPPED when the
    callback returned False, TIME_LIMIT when the budget is spent) or None to go on, and keeps the
    first such status in ``stopped`` (a driver of several solves in turn stops them all, even
    when the solve that heard it ended converged). Call `conclude` with the record of the state
    the solver returns.
    """

    def __init__(self, callback: Callback | None = None, time_limit: float | None = None):
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
        self.callback = callback
        self.time_limit = time_limit
        self.history: list[Progress] = []
        self.start = time.perf_counter()
        self.stopped: Status | None = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def report(self, progress: Progress) -> Status | None:
        self.history.append(progress)
        stop = None
        if self.callback is not None and self.callback(progress) is False:
            stop = Status.STOPPED
        elif self.time_limit is not None and self.elapsed() >= self.time_limit:
            stop = Status.TIME_LIMIT
        if self.stopped is None:
            self.stopped = stop
        return stop

    def conclude(
        self, progress: Progress, same_range: bool = False, combined: bool = False
    ) -> Progress:
        """Make ``progress`` (the returned state) the last record, unless the last report
        already measured that state (the same iteration and gap, and with ``same_range`` the
        same projected-gradient range: a record whose round was undone can share the gap of the
        state measured after it but not its range); the callback sees it too (its answer no
        longer matters). A last record of that state without the objectives or the projected-
        gradient range ``progress`` has is replaced by ``progress``, so the history ends on the
        returned state's figures (a Newton step's record has no range; the result has). A
        ``combined`` record (of solves put together, as the classes of a one-vs-rest) is never
        the state of the last report."""
        last = None if combined or not self.history else self.history[-1]
        same = last is not None and (last.iteration, last.gap) == (progress.iteration, progress.gap)
        if same and same_range:
            same = (last.pg_max, last.pg_min) == (progress.pg_max, progress.pg_min)
        if same and _lacks_figures_of(last, progress):
            self.history.pop()
            same = False
        if not same:
            self.history.append(progress)
            if self.callback is not None:
                self.callback(progress)
            return progress
        return last
