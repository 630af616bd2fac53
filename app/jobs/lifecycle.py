"""The job lifecycle: every change of a job's status, in one place.

    queued ──claim──▶ running ──succeed──▶ succeeded
      ▲  │              │  ├───fail─────▶ failed
      │  │              │  └───stop─────▶ cancelled
      │  │              └──requeue / release──▶ queued
      │  ├──cancel──────────────────────────▶ cancelled
      │  └──fail (cannot run) ──────────────▶ failed

`transition(session, job_id, attempt, from_, to, **fields)` is the only code that writes
`jobs.status`. It is a compare-and-set: `UPDATE jobs SET status = to, ... WHERE id = job AND
attempt = attempt AND status = from_`, so whoever holds an outdated view of the job — a worker
whose attempt was re-queued while the database was away, a reaper racing the worker's own finish —
changes nothing and learns it from the False it gets back. Only the moves in `TRANSITIONS` are
allowed, `fields` are the job's other columns (`Fields`; never `status`), and each applied change
appends a row to `job_events`, the job's history (its attempts, who moved it and why).

Entering `queued` gives the job a fresh queue entry in the same transaction (`JobQueue.enqueue`),
so a queued row always has one; the entry of an attempt that ended is closed by the worker holding
it, or by the reaper in the transaction that decides the job's fate.

The named operations below (submit, claim, succeed, fail, stop, release, requeue_or_fail, cancel)
are what the API, the workers and the reapers call; `update_running` writes a running attempt's
progress and heartbeat under the same compare-and-set, without changing its status.

Extending it: a new kind of job or worker calls these operations with its own `actor` and
`reason` (a resumed attempt says so in its reason; progress per fold or per C goes through
`update_running`); a new status or move (deletion, say) is a row added to `TRANSITIONS` and an
operation here, never a write elsewhere — `tests/test_architecture.py` scans `app/` for one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypedDict, Unpack

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.jobs.queue import JobQueue
from app.services.job_feed import notify
from app.tables import Job, JobEvent, JobProgress, JobStatus, utcnow

log = logging.getLogger("margin.jobs")

QUEUED, RUNNING = JobStatus.QUEUED, JobStatus.RUNNING
SUCCEEDED, FAILED, CANCELLED = JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED

TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = {
    QUEUED: frozenset({RUNNING, CANCELLED, FAILED}),
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, QUEUED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset(),
    CANCELLED: frozenset(),
}


class Fields(TypedDict, total=False):
    """The job columns a transition may set besides `status`."""

    attempt: int
    worker: str | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    finished_at: datetime | None
    progress: dict[str, Any] | None
    first_gap: float | None
    percent: float | None
    eta_s: float | None
    converged: bool | None
    stop_reason: str | None
    error: str | None
    cancel_requested: bool
    checkpoint_at: datetime | None
    checkpoint_iteration: int | None
    resumed_from: int | None
    keep_model: bool


# What a job going back to the queue forgets of the attempt that ended (its progress records and
# the `job_events` rows keep that attempt's history).
REQUEUE_RESET: Fields = {
    "worker": None,
    "started_at": None,
    "heartbeat_at": None,
    "progress": None,
    "first_gap": None,
    "percent": None,
    "eta_s": None,
}


class IllegalTransition(ValueError):
    """A move the lifecycle does not allow (a programming error, not a race)."""


@dataclass(frozen=True)
class Attempt:
    """One claim of a job by a worker: what every write of the running job compares against."""

    job_id: str
    number: int
    worker: str


def transition(
    session: Session,
    job_id: str,
    attempt: int,
    from_: JobStatus,
    to: JobStatus,
    /,
    *,
    queue: JobQueue | None = None,
    actor: str | None = None,
    reason: str | None = None,
    **fields: Unpack[Fields],
) -> bool:
    """Move job `job_id` from `from_` to `to` if it is still at `attempt` and `from_`; returns
    whether it moved. Entering `queued` needs the `queue`, which gets the job's new entry."""
    from_, to = JobStatus(from_), JobStatus(to)
    if to not in TRANSITIONS[from_]:
        raise IllegalTransition(f"a job cannot go from {from_} to {to}")
    _check(fields)
    if to == QUEUED and queue is None:
        raise TypeError("a transition to queued needs the queue for the job's new entry")
    result = session.execute(
        update(Job)
        .where(Job.id == job_id, Job.attempt == attempt, Job.status == from_.value)
        .values(status=to.value, **fields)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return False
    session.add(
        JobEvent(
            job_id=job_id,
            attempt=fields.get("attempt", attempt),
            from_status=from_.value,
            to_status=to.value,
            actor=actor,
            reason=reason,
        )
    )
    if to == QUEUED:
        queue.enqueue(session, job_id)
    notify(session, job_id)  # live streams on PostgreSQL learn of it at commit
    return True


def _check(fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - set(Fields.__annotations__)
    if unknown:
        raise TypeError(f"not a job field a transition sets: {', '.join(sorted(unknown))}")


def update_running(session: Session, attempt: Attempt, /, **fields: Unpack[Fields]) -> bool:
    """Write a running attempt's progress or heartbeat; False when the attempt is no longer the
    job's running one (re-queued, ended, deleted)."""
    _check(fields)
    if "attempt" in fields:
        raise TypeError("a running attempt keeps its number")
    result = session.execute(
        update(Job)
        .where(Job.id == attempt.job_id, Job.attempt == attempt.number)
        .where(Job.status == RUNNING.value)
        .values(**fields)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


# --- the API ------------------------------------------------------------------------------------


def submit(session: Session, queue: JobQueue, job: Job, actor: str = "api") -> None:
    """Insert a new job as queued, with its queue entry, in the caller's transaction."""
    job.status, job.attempt, job.cancel_requested = QUEUED.value, 0, False
    session.add(job)
    session.flush()
    session.add(JobEvent(job_id=job.id, attempt=0, to_status=QUEUED.value, actor=actor))
    queue.enqueue(session, job.id)


def cancel(
    session: Session, queue: JobQueue, job: Job, actor: str = "api", keep_model: bool = False
) -> bool:
    """Cancel a queued job at once, or ask a running one to stop (its worker ends it within an
    iteration, storing its iterate as a model with `keep_model`). `job` was read in this
    transaction, locked; False when it had already ended."""
    if job.status == QUEUED.value:
        done = _cancel_queued(session, job, actor, cancel_requested=True)
        queue.cancel(session, job.id)
        return done
    if job.status == RUNNING.value:
        session.execute(
            update(Job)
            .where(Job.id == job.id, Job.status == RUNNING.value)
            .values(cancel_requested=True, keep_model=keep_model)
            .execution_options(synchronize_session=False)
        )
        queue.cancel(session, job.id)
        return True
    return job.status == CANCELLED.value


def _cancel_queued(session: Session, job: Job, actor: str, **fields: Unpack[Fields]) -> bool:
    """queued -> cancelled, ended now; whether it moved."""
    return transition(
        session,
        job.id,
        job.attempt,
        QUEUED,
        CANCELLED,
        actor=actor,
        reason="cancelled",
        stop_reason="cancelled",
        finished_at=utcnow(),
        **fields,
    )


# --- the worker running a job ---------------------------------------------------------------------


def claim(session: Session, job_id: str, worker: str) -> Attempt | None:
    """queued -> running for `worker`: the new attempt, or None if the job is not queued (taken
    by another worker, cancelled, gone)."""
    row = session.execute(
        select(Job.attempt, Job.cancel_requested).where(
            Job.id == job_id, Job.status == QUEUED.value
        )
    ).one_or_none()
    if row is None or row.cancel_requested:
        return None
    now = utcnow()
    number = row.attempt + 1
    claimed = transition(
        session,
        job_id,
        row.attempt,
        QUEUED,
        RUNNING,
        actor=worker,
        attempt=number,
        worker=worker,
        started_at=now,
        heartbeat_at=now,
        finished_at=None,
        progress=None,
        first_gap=None,
        percent=0.0,
        eta_s=None,
        error=None,
        resumed_from=None,
    )
    return Attempt(job_id, number, worker) if claimed else None


def succeed(session: Session, attempt: Attempt, stop_reason: str, converged: bool) -> bool:
    """running -> succeeded; the caller adds the model in the same transaction."""
    fields: Fields = {"finished_at": utcnow(), "eta_s": 0.0, "stop_reason": stop_reason}
    fields["converged"] = converged
    if converged:
        fields["percent"] = 100.0
    return transition(
        session,
        attempt.job_id,
        attempt.number,
        RUNNING,
        SUCCEEDED,
        actor=attempt.worker,
        reason=stop_reason,
        **fields,
    )


def resume(session: Session, attempt: Attempt, iteration: int) -> bool:
    """Record in the job's history that this attempt starts from the checkpoint stored at
    `iteration` (a warm start), not from scratch."""
    if not update_running(session, attempt, resumed_from=iteration):
        return False
    session.add(
        JobEvent(
            job_id=attempt.job_id,
            attempt=attempt.number,
            from_status=RUNNING.value,
            to_status=RUNNING.value,
            actor=attempt.worker,
            reason=f"resumed from the checkpoint at iteration {iteration}",
        )
    )
    return True


def stop(session: Session, attempt: Attempt) -> bool:
    """running -> cancelled: the solver stopped at a cancel request."""
    return transition(
        session,
        attempt.job_id,
        attempt.number,
        RUNNING,
        CANCELLED,
        actor=attempt.worker,
        reason="cancelled",
        stop_reason="cancelled",
        converged=False,
        finished_at=utcnow(),
        eta_s=0.0,
    )


def fail(session: Session, attempt: Attempt, message: str) -> bool:
    """running -> failed, with the reason."""
    return transition(
        session,
        attempt.job_id,
        attempt.number,
        RUNNING,
        FAILED,
        actor=attempt.worker,
        reason=message,
        error=message,
        finished_at=utcnow(),
        eta_s=None,
    )


def release(session: Session, queue: JobQueue, attempt: Attempt) -> bool:
    """running -> queued as if never claimed (the worker is shutting down): the attempt does not
    count, and its progress records go."""
    released = transition(
        session,
        attempt.job_id,
        attempt.number,
        RUNNING,
        QUEUED,
        queue=queue,
        actor=attempt.worker,
        reason="released at worker shutdown",
        attempt=attempt.number - 1,
        **REQUEUE_RESET,
    )
    if released:
        session.execute(
            delete(JobProgress).where(
                JobProgress.job_id == attempt.job_id, JobProgress.attempt == attempt.number
            )
        )
    return released


# --- recovery ---------------------------------------------------------------------------------


def requeue_or_fail(
    session: Session, queue: JobQueue, job: Job, reason: str, retries: int, actor: str
) -> JobStatus | None:
    """End a running attempt whose worker is gone: back to the queue (at most `retries` times),
    else failed — or cancelled, when a cancel was asked. `job` was read in this transaction,
    locked. Returns the new status, or None if the job was not running."""
    if job.status != RUNNING.value:
        return None
    n = job.attempt
    if n <= retries and not job.cancel_requested:
        to, fields = QUEUED, {**REQUEUE_RESET, "error": f"attempt {n} ended: {reason}; re-queued"}
    elif job.cancel_requested:
        to, fields = CANCELLED, {"stop_reason": "cancelled", "finished_at": utcnow()}
        fields["error"] = f"{reason} (attempt {n} of {retries + 1})"
    else:
        to, fields = FAILED, {"finished_at": utcnow(), "eta_s": None}
        fields["error"] = f"{reason} (attempt {n} of {retries + 1})"
    moved = transition(
        session, job.id, n, RUNNING, to, queue=queue, actor=actor, reason=fields["error"], **fields
    )
    return to if moved else None


def reenqueue(session: Session, queue: JobQueue, job: Job, actor: str) -> JobStatus:
    """A queued job whose queue entry was lost: a new entry, or cancelled if a cancel was asked.
    `job` was read in this transaction, locked."""
    if job.cancel_requested:
        _cancel_queued(session, job, actor)
        return CANCELLED
    queue.enqueue(session, job.id)
    session.add(
        JobEvent(
            job_id=job.id,
            attempt=job.attempt,
            from_status=QUEUED.value,
            to_status=QUEUED.value,
            actor=actor,
            reason="its queue entry was lost; queued again",
        )
    )
    return QUEUED


def remove(session: Session, job_id: str) -> bool:
    """Remove an ended job with its progress and history (its model stays, without the job).
    False when the job is queued or running (cancel it first) or gone."""
    result = session.execute(
        delete(Job)
        .where(Job.id == job_id, Job.status.in_([s.value for s in (SUCCEEDED, FAILED, CANCELLED)]))
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return False
    # the foreign keys cascade; said explicitly for databases without enforced keys
    session.execute(delete(JobProgress).where(JobProgress.job_id == job_id))
    session.execute(delete(JobEvent).where(JobEvent.job_id == job_id))
    return True


def role(actor: str | None) -> str | None:
    """Who made a change, as API clients see it: "api", "worker" or "recovery" (worker and host
    names stay internal)."""
    if actor is None or actor == "api":
        return actor
    return "recovery" if actor.startswith(("pool", "reaper")) else "worker"


def history(session: Session, job_id: str) -> list[JobEvent]:
    """The job's status changes, oldest first."""
    return list(
        session.scalars(select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
    )
