"""Jobs whose worker died: re-queue them (up to JOB_RETRIES times) or fail them with the reason.

Used by the local pool when a child process exits mid-job, and at start and periodically for
jobs left `running` by a worker that is gone (its pid is dead on this host, or its heartbeat is
older than JOB_STALL_S).
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta

from sqlalchemy import delete, or_, select

from app.config import Settings
from app.db import Database
from app.tables import Job, JobStatus, Worker, utcnow

log = logging.getLogger("margin.recovery")


def recover(db: Database, settings: Settings, job_ids: list[str], reason: str) -> dict[str, str]:
    """Re-queue or fail each job that is still running; returns {job_id: new status}."""
    outcome = {}
    with db.write() as session:
        for job_id in job_ids:
            job = session.get(Job, job_id, with_for_update=True)
            if job is None or job.status != JobStatus.RUNNING.value:
                continue
            if job.attempt <= settings.job_retries and not job.cancel_requested:
                job.status = JobStatus.QUEUED.value
                job.worker = None
                job.error = f"attempt {job.attempt} ended: {reason}; re-queued"
            else:
                job.status = (
                    JobStatus.CANCELLED.value if job.cancel_requested else JobStatus.FAILED.value
                )
                job.stop_reason = "cancelled" if job.cancel_requested else None
                job.error = f"{reason} (attempt {job.attempt} of {settings.job_retries + 1})"
                job.finished_at = utcnow()
            job.eta_s = None
            outcome[job_id] = job.status
    for job_id, status in outcome.items():
        log.warning("job %s: %s -> %s", job_id, reason, status)
    return outcome


def recover_worker(db: Database, settings: Settings, worker_id: str, reason: str) -> dict[str, str]:
    """Recover the running jobs claimed by `worker_id` and forget the worker."""
    with db.session() as session:
        ids = list(
            session.scalars(
                select(Job.id).where(Job.worker == worker_id, Job.status == JobStatus.RUNNING.value)
            )
        )
    outcome = recover(db, settings, ids, reason) if ids else {}
    with db.write() as session:
        session.execute(delete(Worker).where(Worker.id == worker_id))
    return outcome


def _dead_here(worker_id: str | None) -> bool:
    if not worker_id or ":" not in worker_id:
        return False
    host, _, pid = worker_id.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sweep_orphaned_jobs(db: Database, settings: Settings) -> dict[str, str]:
    """Recover running jobs whose worker is gone; drop stale worker rows."""
    stale = utcnow() - timedelta(seconds=settings.job_stall_s)
    with db.session() as session:
        rows = session.execute(
            select(Job.id, Job.worker, Job.heartbeat_at).where(
                Job.status == JobStatus.RUNNING.value
            )
        ).all()
    dead = [r.id for r in rows if _dead_here(r.worker)]
    stalled = [
        r.id
        for r in rows
        if r.id not in dead and (r.heartbeat_at is None or r.heartbeat_at < stale)
    ]
    outcome = {}
    if dead:
        outcome |= recover(db, settings, dead, "the worker process running the job is gone")
    if stalled:
        outcome |= recover(
            db,
            settings,
            stalled,
            f"no heartbeat from the job's worker for {settings.job_stall_s:g} s",
        )
    with db.write() as session:
        session.execute(
            delete(Worker).where(
                or_(Worker.heartbeat_at < stale, Worker.id.in_(_dead_ids(session)))
            )
        )
    return outcome


def _dead_ids(session) -> list[str]:
    return [w for w in session.scalars(select(Worker.id)) if _dead_here(w)]
