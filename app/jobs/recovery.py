"""Jobs whose attempt lost its worker, and queued jobs that lost their queue entry.

`Reaper.run_once()` is called by every worker engine every few seconds (the local pool's
supervisor, each distributed worker's maintenance loop) and at start:

1. a running job whose worker process is dead on this host is re-queued (up to JOB_RETRIES times)
   or failed with the reason, at once;
2. a running job whose heartbeat is older than JOB_STALL_S likewise, its queue entries closed —
   but only once this reaper has reached the database for JOB_STALL_S without a break: after an
   outage every heartbeat is stale, and live workers get that long to beat again;
3. (backends with entries of their own) a queued job without an open entry gets a new one, and an
   entry held by a silent worker whose job is not running any more is closed (and replaced, if the
   job is still queued);
4. at most every RETENTION_EVERY_S: ended jobs past JOB_RETENTION_DAYS are deleted,
   Idempotency-Key records past IDEMPOTENCY_TTL_HOURS are forgotten, and the checkpoints of jobs
   that will not run again (ended, or deleted) are removed: a job's worker removes its checkpoint
   when it ends the job, but not when the reaper fails or cancels it, retention deletes its row,
   or an attempt that lost the job stored one after the end.

Every change goes through `app.jobs.lifecycle`, on a row locked in the deciding transaction, so
reapers on several workers never decide one job twice and never undo a worker's own finish.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session

from app import clock
from app.config import Settings
from app.db import Database
from app.jobs import history, lifecycle
from app.jobs.queue import JobQueue
from app.jobs.workers import dead_here
from app.services import idempotency
from app.storage import CHECKPOINTS, checkpoint_owner, get_storage
from app.tables import Job, JobStatus, Worker, utcnow

log = logging.getLogger("margin.recovery")
RETENTION_EVERY_S = 600.0
CHECKPOINT_BATCH = 500  # job ids per query of the checkpoint sweep


def recover(
    db: Database,
    settings: Settings,
    queue: JobQueue,
    job_ids: list[str],
    reason: str,
    actor: str,
    stale_before: datetime | None = None,
) -> dict[str, str]:
    """Re-queue or fail each job that is still running (and, with `stale_before`, still has no
    heartbeat since then); returns {job_id: new status}."""
    outcome = {}
    for job_id in job_ids:
        with db.write() as session:
            job = session.get(Job, job_id, with_for_update=True, populate_existing=True)
            if job is None or job.status != JobStatus.RUNNING:
                continue
            beat = job.heartbeat_at
            if stale_before is not None and beat is not None and beat >= stale_before:
                continue  # it beat again meanwhile
            queue.close(session, job_id)
            status = lifecycle.requeue_or_fail(
                session, queue, job, reason, settings.job_retries, actor
            )
        if status is not None:
            outcome[job_id] = status.value
            log.warning("job %s: %s -> %s", job_id, reason, status.value)
    return outcome


def recover_worker(
    db: Database, settings: Settings, queue: JobQueue, worker_id: str, reason: str
) -> dict[str, str]:
    """Recover the running jobs claimed by `worker_id` and forget the worker."""
    with db.session() as session:
        ids = list(
            session.scalars(
                select(Job.id).where(Job.worker == worker_id, Job.status == JobStatus.RUNNING)
            )
        )
    outcome = recover(db, settings, queue, ids, reason, actor="pool") if ids else {}
    with db.write() as session:
        session.execute(delete(Worker).where(Worker.id == worker_id))
    return outcome


class Reaper:
    """One engine's reaper (see the module docstring). `stalled_entries(session, stall_s)`, set
    by a backend with entries of its own, lists the job ids of entries held by silent workers."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        queue: JobQueue,
        actor: str,
        stalled_entries: Callable[[Session, float], list[str]] | None = None,
    ):
        self.db, self.settings, self.queue, self.actor = db, settings, queue, actor
        self.stalled_entries = stalled_entries
        self.connected_since: float | None = None
        self.expired_at = -RETENTION_EVERY_S  # the last retention pass

    @property
    def trusts_heartbeats(self) -> bool:
        """True once this reaper has reached the database for JOB_STALL_S without a break."""
        since = self.connected_since
        return since is not None and time.monotonic() - since >= self.settings.job_stall_s

    def cut_off(self) -> None:
        """This process could not reach the database: judge no heartbeat for JOB_STALL_S."""
        self.connected_since = None

    def run_once(self) -> dict[str, str]:
        """One pass; returns {job_id: what happened}. A database error propagates (after marking
        this reaper as cut off)."""
        try:
            return self._pass()
        except Exception:
            self.cut_off()
            raise

    def _pass(self) -> dict[str, str]:
        with self.db.session() as session:
            clock.synchronize(session)  # the heartbeats are judged on the database's clock
            stale = utcnow() - timedelta(seconds=self.settings.job_stall_s)
            rows = session.execute(
                select(Job.id, Job.worker, Job.heartbeat_at).where(Job.status == JobStatus.RUNNING)
            ).all()
        if self.connected_since is None:
            self.connected_since = time.monotonic()
        trusted = self.trusts_heartbeats
        dead = [r.id for r in rows if dead_here(r.worker)]
        stalled = [
            r.id
            for r in rows
            if trusted and r.id not in dead and (r.heartbeat_at is None or r.heartbeat_at < stale)
        ]
        outcome = {}
        if dead:
            reason = "the worker process running the job is gone"
            outcome |= recover(self.db, self.settings, self.queue, dead, reason, self.actor)
        if stalled:
            reason = f"no heartbeat from the job's worker for {self.settings.job_stall_s:g} s"
            outcome |= recover(
                self.db, self.settings, self.queue, stalled, reason, self.actor, stale
            )
        if trusted:
            outcome |= self._reconcile_entries()
        self._forget_workers(stale if trusted else None)
        if time.monotonic() - self.expired_at >= RETENTION_EVERY_S:
            self.expired_at = time.monotonic()
            self._expire_jobs()
            self._forget_idempotency_keys()
            self._forget_checkpoints()
        return outcome

    def _forget_checkpoints(self) -> None:
        """Remove the checkpoints of jobs that are neither queued nor running. A store or
        database that fails here is logged and tried again next pass: this tidying never stops
        the reaper's own work."""
        try:
            storage = get_storage(self.settings)
            stored = _stored_checkpoints(storage)
            active = self._queued_or_running(sorted(set(stored.values()))) if stored else set()
            gone = [key for key, job_id in stored.items() if job_id not in active]
            for key in gone:
                storage.delete(key)
        except Exception as exc:
            log.warning("checkpoints of ended jobs not removed: %s", exc)
            return
        if gone:
            log.info("removed %d checkpoints of ended or deleted jobs", len(gone))

    def _queued_or_running(self, ids: list[str]) -> set[str]:
        """Which of these jobs are queued or running, asked CHECKPOINT_BATCH ids at a time (a
        bound on the query's list)."""
        live = [JobStatus.QUEUED.value, JobStatus.RUNNING.value]
        found: set[str] = set()
        with self.db.session() as session:
            for start in range(0, len(ids), CHECKPOINT_BATCH):
                batch = ids[start : start + CHECKPOINT_BATCH]
                found.update(session.scalars(
                    select(Job.id).where(Job.id.in_(batch), Job.status.in_(live))
                ))  # fmt: skip
        return found

    def _forget_idempotency_keys(self) -> None:
        """IDEMPOTENCY_TTL_HOURS: delete the records past it (requests already ignore them)."""
        hours = self.settings.idempotency_ttl_hours
        with self.db.write() as session:
            count = idempotency.forget_expired(session, hours)
        if count:
            log.info("forgot %d Idempotency-Keys older than %g hours", count, hours)

    def _expire_jobs(self) -> dict[str, str]:
        """JOB_RETENTION_DAYS: delete ended jobs past it."""
        days = self.settings.job_retention_days
        if days is None:
            return {}
        with self.db.session() as session:
            ids = history.expired_jobs(session, days)
        outcome = {}
        for job_id in ids:
            with self.db.write() as session:
                if lifecycle.remove(session, job_id):
                    outcome[job_id] = "deleted (JOB_RETENTION_DAYS)"
        if outcome:
            log.info("deleted %d jobs ended more than %g days ago", len(outcome), days)
        return outcome

    def _reconcile_entries(self) -> dict[str, str]:
        """Queued jobs without an entry, and entries left with silent workers."""
        with self.db.session() as session:
            lost = set(self.queue.lost(session))
            held = set()
            if self.stalled_entries is not None:
                held = set(self.stalled_entries(session, self.settings.job_stall_s))
        outcome = {}
        for job_id in sorted(lost | held):
            with self.db.write() as session:
                job = session.get(Job, job_id, with_for_update=True, populate_existing=True)
                action = self._settle_entry(session, job, job_id, job_id in held)
            if action:
                outcome[job_id] = action
                log.warning("job %s: %s", job_id, action)
        return outcome

    def _settle_entry(self, session: Session, job: Job | None, job_id: str, held: bool) -> str:
        if job is not None and job.status == JobStatus.RUNNING:
            return ""  # judged by its own heartbeat above
        if job is None or job.status != JobStatus.QUEUED:  # it ended: never run it again
            if held:
                succeeded = job is not None and job.status == JobStatus.SUCCEEDED
                self.queue.close(session, job_id, succeeded=succeeded)
                return "closed the queue entry its silent worker held"
            return ""
        if held:  # fetched by a worker that went silent before claiming it
            self.queue.close(session, job_id)
        elif job_id not in self.queue.lost(session):  # it got an entry meanwhile
            return ""
        status = lifecycle.reenqueue(session, self.queue, job, self.actor)
        return "queued again (its queue entry was lost)" if status == "queued" else "cancelled"

    def _forget_workers(self, stale: datetime | None) -> None:
        """Drop the rows of workers dead on this host, and (`stale`) of silent ones."""
        with self.db.write() as session:
            gone = Worker.id.in_([w for w in session.scalars(select(Worker.id)) if dead_here(w)])
            if stale is not None:
                gone = or_(gone, Worker.heartbeat_at < stale)
            session.execute(delete(Worker).where(gone))


def _stored_checkpoints(storage) -> dict[str, str]:
    """Key -> job id of every stored checkpoint, of any attempt (a key that names no job is
    left alone)."""
    pairs = ((obj.key, checkpoint_owner(obj.key)) for obj in storage.list(CHECKPOINTS))
    return {key: owner[0] for key, owner in pairs if owner is not None}
