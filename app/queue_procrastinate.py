"""Distributed workers: training jobs queued in PostgreSQL with procrastinate.

Selected by WORKER_BACKEND=procrastinate. The API inserts a job row and defers a procrastinate job
for it in the same transaction (`ProcrastinateQueue.enqueue` calls procrastinate's defer function on
the session's connection), so a job and its queue entry commit or roll back together. Any number of
`margin worker` processes, on any machine that reaches the database and the data directory, fetch
entries and run the same `run_job(job_id)` as the local pool, WORKER_CONCURRENCY jobs at a time
(each in a thread; the solvers release the GIL in their kernels).

Failure handling, all decided on the job row, which stays the source of truth:
- cancel: the row's flag stops a running solver within one iteration (as with the local pool);
  the queue entry is cancelled too, so a queued job never starts, and a running one is told to
  abort.
- a worker that dies (SIGKILL, machine loss) stops sending procrastinate heartbeats; every worker
  runs a reaper that finds entries held by a worker silent for JOB_STALL_S, and in one
  transaction either puts the job back in the queue (its row's `attempt` counts the claims, at
  most 1 + JOB_RETRIES) or fails it with a message. An entry whose job already ended is closed
  without running again, so a job never gets two models nor stays `running`.
- SIGTERM: the worker takes no new job and lets running ones finish for
  WORKER_SHUTDOWN_TIMEOUT_S; then it stops them at their next iteration and releases them: the
  row goes back to `queued` and the entry to the queue, for another worker.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
from collections.abc import Callable

import procrastinate
from procrastinate import JobContext, RetryStrategy
from procrastinate.job_context import AbortReason
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.services import workers
from app.tables import TERMINAL_STATUSES, Job, JobStatus, utcnow

log = logging.getLogger("margin.worker")

TASK_NAME = "margin.run_job"
QUEUE_NAME = "training"
DEFAULT_SHUTDOWN_TIMEOUT_S = 20.0

# The entry's `lock` is the job id: procrastinate never runs two entries with one lock at once,
# and cancel and the reaper find a job's entry by it. `queueing_lock` refuses a second queued
# entry for the same job.
_DEFER = text(
    "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(:queue, :task, 0, :job_id, :job_id,"
    " CAST(:args AS jsonb), NULL)::procrastinate_job_to_defer_v1])"
)
_CANCEL = text(
    "SELECT procrastinate_cancel_job_v1(id, true, false) FROM procrastinate_jobs"
    " WHERE lock = :job_id AND task_name = :task AND status IN ('todo', 'doing')"
)
# Entries held by a worker whose heartbeat is older than :stall_s, or by one already pruned.
_STALLED = text(
    "SELECT j.id, j.lock FROM procrastinate_jobs j"
    " LEFT JOIN procrastinate_workers w ON w.id = j.worker_id"
    " WHERE j.status = 'doing' AND j.task_name = :task"
    " AND (j.worker_id IS NULL"
    "      OR w.last_heartbeat < now() - make_interval(secs => :stall_s))"
    " FOR UPDATE OF j SKIP LOCKED"
)
_RETRY = text("SELECT procrastinate_retry_job_v2(:id, NULL, NULL, NULL, NULL)")
_FINISH = text(
    "SELECT procrastinate_finish_job_v1(:id, CAST(:status AS procrastinate_job_status), false)"
)


class JobReleased(Exception):
    """The worker stopped before the job ended; the job went back to the queue."""


def conninfo(database_url: str) -> str:
    """A libpq connection string for a SQLAlchemy PostgreSQL URL (drops the `+driver` part)."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql":
        raise ValueError(
            "WORKER_BACKEND=procrastinate needs a PostgreSQL DATABASE_URL, got a "
            f"{url.get_backend_name()!r} URL"
        )
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


def make_app(settings: Settings) -> procrastinate.App:
    """The procrastinate app on the service's database, with the training task registered."""
    app = procrastinate.App(
        connector=procrastinate.PsycopgConnector(conninfo=conninfo(settings.db_url))
    )
    app.task(
        name=TASK_NAME,
        queue=QUEUE_NAME,
        pass_context=True,
        retry=RetryStrategy(retry_exceptions=[JobReleased]),
    )(_train)
    return app


class ProcrastinateQueue:
    """`app.queue.JobQueue` on procrastinate's tables, in the caller's transaction."""

    name = "procrastinate"

    def enqueue(self, session: Session, job_id: str) -> None:
        session.execute(
            _DEFER,
            {
                "queue": QUEUE_NAME,
                "task": TASK_NAME,
                "job_id": job_id,
                "args": json.dumps({"job_id": job_id}),
            },
        )

    def cancel(self, session: Session, job_id: str) -> None:
        session.execute(_CANCEL, {"job_id": job_id, "task": TASK_NAME})


def make_queue(settings: Settings) -> ProcrastinateQueue:
    conninfo(settings.db_url)  # fail at start, not on the first job, on a non-PostgreSQL URL
    return ProcrastinateQueue()


# --- the worker side --------------------------------------------------------------------------

_runtime: dict[str, object] = {}  # the running worker's RunContext fields (settings, db, ...)


class _ShutdownSignal(threading.Event):
    """Set once procrastinate aborts the job because this worker is shutting down.

    run_job's callback polls `is_set()` between iterations; procrastinate tells a synchronous
    task about aborts only through `context.abort_reason()`. A cancel is not a shutdown: it
    reaches the solver through the job row's flag, as with the local pool.
    """

    def __init__(self, context: JobContext):
        super().__init__()
        self._context = context

    def is_set(self) -> bool:
        return super().is_set() or self._context.abort_reason() == AbortReason.SHUTDOWN


def _train(context: JobContext, job_id: str) -> str | None:
    """The task: run the job; when the worker shut down mid-job, hand the entry back."""
    from app.services.training import RunContext, run_job

    run_context = RunContext(**_runtime, shutdown=_ShutdownSignal(context))
    outcome = run_job(job_id, run_context)
    if outcome == JobStatus.QUEUED.value:  # run_job released the row: the entry goes back too
        raise JobReleased(f"job {job_id} released at worker shutdown")
    return outcome


def reap_stalled(db: Database, settings: Settings) -> list[tuple[str, str]]:
    """Recover the jobs of workers whose heartbeat stopped. Returns [(job_id, action)].

    Each entry is handled in the transaction that locks it (SKIP LOCKED: reapers on several
    workers never handle one entry twice).
    """
    actions = []
    with db.write() as session:
        stalled = session.execute(
            _STALLED, {"task": TASK_NAME, "stall_s": settings.job_stall_s}
        ).all()
        for entry_id, job_id in stalled:
            action = _recover(session, settings, entry_id, job_id)
            actions.append((job_id, action))
            log.warning("job %s: its worker stopped sending heartbeats; %s", job_id, action)
    return actions


def _recover(session: Session, settings: Settings, entry_id: int, job_id: str) -> str:
    """Decide one stalled entry's fate on its job row (the same rules as app.services.recovery)."""
    job = session.get(Job, job_id, with_for_update=True)
    if job is None or job.status in TERMINAL_STATUSES:
        # The job ended (or is gone); only its queue entry was left open. Never run it again.
        ended = "succeeded" if job is not None and job.status == "succeeded" else "failed"
        session.execute(_FINISH, {"id": entry_id, "status": ended})
        return "closed its queue entry"
    if job.status == JobStatus.QUEUED.value:  # fetched, never claimed (or re-queued already)
        session.execute(_RETRY, {"id": entry_id})
        return "re-queued (it had not started)"
    reason = f"no heartbeat from the job's worker for {settings.job_stall_s:g} s"
    job.eta_s = None
    if job.attempt <= settings.job_retries and not job.cancel_requested:
        job.status, job.worker = JobStatus.QUEUED.value, None
        job.error = f"attempt {job.attempt} ended: {reason}; re-queued"
        session.execute(_RETRY, {"id": entry_id})
        return f"re-queued after attempt {job.attempt}"
    job.status = JobStatus.CANCELLED.value if job.cancel_requested else JobStatus.FAILED.value
    job.stop_reason = "cancelled" if job.cancel_requested else None
    job.error = f"{reason} (attempt {job.attempt} of {settings.job_retries + 1})"
    job.finished_at = utcnow()
    session.execute(_FINISH, {"id": entry_id, "status": "failed"})
    return f"{job.status} after attempt {job.attempt}"


async def _maintain(db: Database, settings: Settings, worker_id: str, every_s: float) -> None:
    """The `workers` row's heartbeat (what /readyz counts) and the stalled-job reaper."""
    while True:
        try:
            await asyncio.to_thread(workers.beat, db, worker_id)
            await asyncio.to_thread(reap_stalled, db, settings)
        except Exception:  # a transient database error must not end the worker
            log.exception("worker maintenance failed; trying again in %g s", every_s)
        await asyncio.sleep(every_s)


def _configure_threads(settings: Settings) -> None:
    """Budget solver threads before Numba loads: concurrency x threads per job <= cores."""
    threads = settings.threads_per_job(settings.worker_concurrency)
    os.environ.setdefault("NUMBA_NUM_THREADS", str(threads))
    # Several jobs in one process call parallel kernels from several threads at once: Numba's
    # workqueue layer aborts on that, so ask for a thread-safe layer (OpenMP or TBB).
    if settings.worker_concurrency > 1:
        os.environ.setdefault("NUMBA_THREADING_LAYER", "threadsafe")


def _preload() -> None:
    """Import the training code and the estimators (loading their cached kernels' modules) before
    taking jobs, so that the first job does not pay for it."""
    import importlib
    import importlib.util

    importlib.import_module("app.services.training")
    for name in ("solvers.estimators", "solvers.structural"):
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)


def _shutdown_timeout(settings: Settings) -> float:
    """Seconds a stopping worker lets running jobs finish before releasing them."""
    value = getattr(settings, "worker_shutdown_timeout_s", None)
    if value is None:
        value = os.environ.get("WORKER_SHUTDOWN_TIMEOUT_S", DEFAULT_SHUTDOWN_TIMEOUT_S)
    return float(value)


def run_worker(settings: Settings, *, on_ready: Callable[[], None] | None = None) -> None:
    """Run one distributed worker until SIGINT/SIGTERM (see the module docstring)."""
    _configure_threads(settings)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    asyncio.run(_serve(settings, on_ready))


async def _serve(settings: Settings, on_ready: Callable[[], None] | None) -> None:
    app = make_app(settings)
    db = Database(settings.db_url)
    worker_id = f"{socket.gethostname()}:{os.getpid()}"
    concurrency = settings.worker_concurrency
    _runtime.update(
        settings=settings, db=db, worker_id=worker_id, n_jobs=settings.threads_per_job(concurrency)
    )
    beat_s = max(0.2, settings.job_stall_s / 6)
    shutdown_s = _shutdown_timeout(settings)
    try:
        await asyncio.to_thread(_preload)
        async with app.open_async():
            await asyncio.to_thread(workers.register, db, worker_id, "procrastinate")
            maintenance = asyncio.create_task(_maintain(db, settings, worker_id, beat_s))
            if on_ready is not None:
                on_ready()
            try:
                await app.run_worker_async(
                    queues=[QUEUE_NAME],
                    name=worker_id,
                    concurrency=concurrency,
                    update_heartbeat_interval=beat_s,
                    stalled_worker_timeout=settings.job_stall_s,
                    shutdown_graceful_timeout=shutdown_s,
                    abort_job_polling_interval=min(1.0, beat_s),
                    delete_jobs="successful",
                )
            finally:
                maintenance.cancel()
                await asyncio.gather(maintenance, return_exceptions=True)
                await asyncio.to_thread(workers.unregister, db, worker_id)
    finally:
        _runtime.clear()
        db.dispose()
