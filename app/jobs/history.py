"""A job's stored progress: bounded and log-spaced, while the live stream sees every report.

Each write of a running attempt inserts every report it buffered (the event stream reads them as
they come); every PRUNE_EVERY records, the attempt's rows older than the newest LIVE_WINDOW are
thinned to one row per log-spaced bucket of iterations (bucket ⌊log(iteration) / log(RATIO)⌋),
so a job keeps every early iteration, fewer and fewer later ones, and at most about
log(iterations) / log(RATIO) + LIVE_WINDOW rows: about 300 + 100 for a million iterations,
instead of one row per report. A search job's iterations start again at every solve of its
path, so its buckets are per solve (stage, fold, C index): each solve keeps its own log-spaced
history. The job row keeps the latest record (`jobs.progress`).

Finished jobs older than JOB_RETENTION_DAYS are deleted with their progress and history
(`lifecycle.delete`); their models stay.
"""

from __future__ import annotations

import logging
import math
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.tables import TERMINAL_STATUSES, Job, JobProgress, utcnow

log = logging.getLogger("margin.jobs")
RATIO = 1.05
LIVE_WINDOW = 100
PRUNE_EVERY = 200


def bucket(iteration: int) -> int:
    return int(math.log(max(1, iteration)) / math.log(RATIO))


def thin(session: Session, job_id: str, attempt: int, window: int = LIVE_WINDOW) -> int:
    """Delete the attempt's rows before the newest `window` that are not the first of their
    log-spaced bucket; returns how many went."""
    rows = session.execute(
        select(
            JobProgress.id,
            JobProgress.iteration,
            JobProgress.stage,
            JobProgress.fold,
            JobProgress.c_index,
        )
        .where(JobProgress.job_id == job_id, JobProgress.attempt == attempt)
        .order_by(JobProgress.id)
    ).all()
    older = rows[: max(0, len(rows) - window)]
    seen, doomed = set(), []
    for row in older:
        key = (row.stage, row.fold, row.c_index, bucket(row.iteration))
        if key in seen:
            doomed.append(row.id)
        seen.add(key)
    for start in range(0, len(doomed), 500):
        session.execute(delete(JobProgress).where(JobProgress.id.in_(doomed[start : start + 500])))
    return len(doomed)


def expired_jobs(session: Session, retention_days: float, limit: int = 500) -> list[str]:
    """Ids of jobs that ended more than `retention_days` ago."""
    before = utcnow() - timedelta(days=retention_days)
    return list(
        session.scalars(
            select(Job.id)
            .where(Job.status.in_(TERMINAL_STATUSES), Job.finished_at < before)
            .limit(limit)
        )
    )
