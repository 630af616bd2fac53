"""Progress records, the callback protocol and the result record shared by every solver.

A solver's Python driver owns the loop policy: it runs one compiled epoch at a time and, between
epochs, hands a `Progress` record to a `Monitor`. The monitor keeps the history, enforces the
wall-clock budget and calls the user's callback (returning ``False`` stops the solve cleanly).
Outcomes are data: every solve ends with a `SolveResult` whose `status` says why it stopped.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np


class Status(StrEnum):
    """Why a solve ended."""

    CONVERGED = "converged"  # the stopping rule held on a full pass
    MAX_ITER = "max_iter"  # the outer-iteration budget ran out first
    STOPPED = "stopped"  # the callback returned False
    TIME_LIMIT = "time_limit"  # the wall-clock budget ran out first


@dataclass(frozen=True, slots=True)
class Progress:
    """One outer iteration as seen by the callback.

    `gap` is the formulation's optimality measure: M − m for the binary solvers, max_i v_i for the
    multi-class ones, UB − LB for the structural one. Fields a formulation does not have are None.
    """

    iteration: int
    elapsed_s: float
    gap: float
    M: float | None = None
    m: float | None = None
    active: int | None = None
    primal: float | None = None
    dual: float | None = None
    lower_bound: float | None = None
    upper_bound: float | None = None
    approx_upper_bound: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (non-finite floats become None)."""
        out = {}
        for key, value in asdict(self).items():
            if isinstance(value, float) and not math.isfinite(value):
                value = None
            out[key] = value
        return out


Callback = Callable[[Progress], "bool | None"]


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
    """What a solver returns.

    w: weights over the original features (shape (n_features,) or (n_classes, n_features));
    bias: the weight of the appended bias feature times its value (0.0 when there is none);
    alpha: the dual variables; n_iter: outer iterations run; status: why it ended; gap: the final
    optimality measure; primal / dual: final objectives (dual in minimisation form where the
    formulation is a minimisation); history: one `Progress` per outer iteration.
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

    @property
    def converged(self) -> bool:
        return self.status is Status.CONVERGED


class Monitor:
    """Loop policy shared by the drivers: history, time budget and the user's callback.

    Call `report` once per outer iteration; it returns the status to stop with (STOPPED when the
    callback returned False, TIME_LIMIT when the budget is spent) or None to go on.
    """

    def __init__(self, callback: Callback | None = None, time_limit: float | None = None):
        if time_limit is not None and not time_limit > 0:
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
        self.callback = callback
        self.time_limit = time_limit
        self.history: list[Progress] = []
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def report(self, progress: Progress) -> Status | None:
        self.history.append(progress)
        if self.callback is not None and self.callback(progress) is False:
            return Status.STOPPED
        if self.time_limit is not None and self.elapsed() >= self.time_limit:
            return Status.TIME_LIMIT
        return None
