"""A job's time budget: what is left, for the attempt starting now, of the bound on the job's
running time over all its attempts.

The bound is the job's `time_limit` parameter, or MAX_JOB_SECONDS where that is smaller or the
job asked none (`bound`). It counts the job's running time (claimed by a worker, in `running`),
not only the solver's: an attempt runs from the `job_events` row that moved the job from queued to
running to the row that moved it out of running (or to now, for the attempt in progress). So a
retried attempt — after a worker died, or a shutdown handed the job back — gets what the earlier
attempts left, never a fresh budget, and a job retried JOB_RETRIES times still ends within the
bound. An attempt whose worker died is counted up to the reaper's re-queue, at most JOB_STALL_S
after its last heartbeat: the bound errs on the side of stopping early. The solvers stop on their
own clock (`time_limit`) within one outer iteration; the attempt's remaining budget, handed to
them as `time_limit`, is at least `LAST_SECONDS`, so an attempt started with the budget spent
still returns a model after one pass (with stop reason time_limit).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.tables import JobEvent, JobStatus, utcnow

LAST_SECONDS = 1e-3


def bound(time_limit: float | None, max_job_seconds: float | None) -> float | None:
    """The job's bound in seconds: the smaller of its time_limit and MAX_JOB_SECONDS (None: no
    bound)."""
    given = [float(v) for v in (time_limit, max_job_seconds) if v is not None]
    return min(given) if given else None


def seconds_run(session: Session, job_id: str, now: datetime | None = None) -> float:
    """Seconds the job has spent running over all its attempts, the one in progress counted up
    to ``now``."""
    events = session.execute(
        select(JobEvent.at, JobEvent.from_status, JobEvent.to_status)
        .where(JobEvent.job_id == job_id)
        .order_by(JobEvent.id)
    ).all()
    running = JobStatus.RUNNING.value
    total, since = 0.0, None
    for at, from_status, to_status in events:
        if to_status == running and from_status != running:
            since = at
        elif from_status == running and to_status != running and since is not None:
            total += max(0.0, (at - since).total_seconds())
            since = None
    if since is not None:
        total += max(0.0, ((now or utcnow()) - since).total_seconds())
    return total


def attempt_params(params: dict, max_job_seconds: float | None, used_s: float) -> dict:
    """The job's params for the attempt starting now: `time_limit` is what is left of the bound
    after ``used_s`` seconds (unchanged where there is no bound)."""
    limit = bound(params.get("time_limit"), max_job_seconds)
    if limit is None:
        return params
    return {**params, "time_limit": max(LAST_SECONDS, limit - used_s)}
