"""Distributed workers: training jobs queued in PostgreSQL with procrastinate.

Selected by WORKER_BACKEND=procrastinate. The job row's transaction also defers its queue entry
(procrastinate's defer function on the session's connection), so a job and its entry commit or
roll back together. Any number of `margin worker` processes, on any machine that reaches the
database and the data directory, fetch entries and run the same `run_job(job_id)` as the local
pool, WORKER_CONCURRENCY jobs at a time (each in a thread; the solvers release the GIL).

One entry per attempt: whenever the job row goes back to `queued` (re-queued by a reaper, handed
back at shutdown) the lifecycle defers a new entry, and the entry of the attempt that ended is
closed by the worker that held it, or by the reaper. A worker whose attempt was taken away while
it could not reach the database thus finishes an entry that is already closed — a no-op — and never
the new one. The job row stays the source of truth; the entry only carries it to a worker.

Each worker runs a maintenance loop (`_maintain`): its `workers` row and its procrastinate
heartbeat (registering again, under a new id, if it was pruned while the database was away), and
the reaper of `app.jobs.recovery` with this backend's entry queries. Queue operations wait out a
database outage (POOL_WAIT_S); a worker whose procrastinate loop fails anyway starts it again.
SIGTERM: the worker takes no new job and lets running ones finish for WORKER_SHUTDOWN_TIMEOUT_S;
then it stops them at their next iteration and hands them back to the queue.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable

import procrastinate
from procrastinate import JobContext
from procrastinate.exceptions import ConnectorException
from procrastinate.job_context import AbortReason
from procrastinate.worker import Worker as ProcrastinateWorker
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.jobs import procrastinate_schema, workers
from app.jobs.recovery import Reaper

log = logging.getLogger("margin.worker")

TASK_NAME = "margin.run_job"
QUEUE_NAME = "training"
POOL_WAIT_S = 600.0

# The entry's `lock` is the job id: procrastinate never runs two entries with one lock at once,
# and cancel and the reaper find a job's entries by it. `queueing_lock` refuses a second waiting
# entry for the same job.
_DEFER = text(
    "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(:queue, :task, 0, :job_id, :job_id,"
    " CAST(:args AS jsonb), NULL)::procrastinate_job_to_defer_v1])"
)
_CANCEL = text(
    "SELECT procrastinate_cancel_job_v1(id, true, false) FROM procrastinate_jobs"
    " WHERE lock = :job_id AND task_name = :task AND status IN ('todo', 'doing')"
)
_CLOSE = text(
    "SELECT procrastinate_finish_job_v1(id, CAST(:status AS procrastinate_job_status), false)"
    " FROM procrastinate_jobs"
    " WHERE lock = :job_id AND task_name = :task AND status IN ('todo', 'doing')"
)
_LOST = text(
    "SELECT j.id FROM jobs j WHERE j.status = 'queued' AND NOT EXISTS"
    " (SELECT 1 FROM procrastinate_jobs e WHERE e.lock = j.id AND e.task_name = :task"
    "  AND e.status IN ('todo', 'doing'))"
)
# Entries held by a worker (not :me) whose heartbeat is older than :stall_s, or already pruned.
_STALLED = text(
    "SELECT j.lock FROM procrastinate_jobs j"
    " LEFT JOIN procrastinate_workers w ON w.id = j.worker_id"
    " WHERE j.status = 'doing' AND j.task_name = :task"
    " AND j.worker_id IS DISTINCT FROM :me"
    " AND (j.worker_id IS NULL OR w.last_heartbeat < now() - make_interval(secs => :stall_s))"
)
_BEAT = text("UPDATE procrastinate_workers SET last_heartbeat = now() WHERE id = :id RETURNING id")
_REGISTER = text("SELECT worker_id FROM procrastinate_register_worker_v1()")
_ADOPT = text("UPDATE procrastinate_jobs SET worker_id = :id WHERE id = ANY(:held)")


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
    """The procrastinate app on the service's database, with the training task registered.

    Its connection pool waits up to POOL_WAIT_S for a connection (psycopg_pool's default is 30 s,
    and after an outage the pool's reconnection backs off to about twice the outage's length): a
    worker waits out a database outage instead of failing the queue operation it was doing."""
    connector = procrastinate.PsycopgConnector(
        conninfo=conninfo(settings.db_url), timeout=POOL_WAIT_S
    )
    app = procrastinate.App(connector=connector)
    app.task(name=TASK_NAME, queue=QUEUE_NAME, pass_context=True)(_train)
    return app


class ProcrastinateQueue:
    """`app.jobs.queue.JobQueue` on procrastinate's tables, in the caller's transaction."""

    name = "procrastinate"

    def enqueue(self, session: Session, job_id: str) -> None:
        args = json.dumps({"job_id": job_id})
        params = {"queue": QUEUE_NAME, "task": TASK_NAME, "job_id": job_id, "args": args}
        session.execute(_DEFER, params)

    def cancel(self, session: Session, job_id: str) -> None:
        session.execute(_CANCEL, {"job_id": job_id, "task": TASK_NAME})

    def close(self, session: Session, job_id: str, succeeded: bool = False) -> None:
        status = "succeeded" if succeeded else "failed"
        session.execute(_CLOSE, {"job_id": job_id, "task": TASK_NAME, "status": status})

    def lost(self, session: Session) -> list[str]:
        return list(session.scalars(_LOST, {"task": TASK_NAME}))

    def stalled(self, session: Session, stall_s: float, me: int | None) -> list[str]:
        """Job ids of entries held by procrastinate workers silent for `stall_s` (not `me`)."""
        params = {"task": TASK_NAME, "stall_s": stall_s, "me": me}
        return list(session.scalars(_STALLED, params))


def make_queue(settings: Settings) -> ProcrastinateQueue:
    conninfo(settings.db_url)  # fail at start, not on the first job, on a non-PostgreSQL URL
    return ProcrastinateQueue()


def make_reaper(
    db: Database, settings: Settings, actor: str, me: Callable[[], int | None] = lambda: None
) -> Reaper:
    """The reaper of `app.jobs.recovery` on this backend's entries; `me()` is the procrastinate
    id of the worker running it (its own entries are never stalled)."""
    queue = ProcrastinateQueue()
    return Reaper(
        db, settings, queue, actor, lambda session, stall_s: queue.stalled(session, stall_s, me())
    )


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
    """The task: run the job. A hand-back at shutdown already gave the job a new entry."""
    from app.jobs.runner import RunContext, run_job

    run_context = RunContext(**_runtime, shutdown=_ShutdownSignal(context))
    return run_job(job_id, run_context)


class _Maintenance:
    """This worker's heartbeats and its reaper, every `every_s` seconds.

    procrastinate beats from a task of its own, which ends at the first database error and is not
    restarted (its watcher of side tasks stops once the periodic deferrer, with no periodic task,
    returns): after an outage the worker's heartbeat would stay frozen and every later entry it
    fetched would look stalled. So this loop beats procrastinate's row too, and registers the
    worker again if its row was pruned meanwhile."""

    def __init__(self, db: Database, settings: Settings, worker_id: str, pworker):
        self.db, self.worker_id, self.pworker = db, worker_id, pworker
        self.reaper = make_reaper(db, settings, f"reaper@{worker_id}", lambda: pworker.worker_id)

    def run_once(self) -> None:
        try:
            workers.beat(self.db, self.worker_id, "procrastinate")
            self._procrastinate_beat()
        except Exception:
            self.reaper.cut_off()
            raise
        self.reaper.run_once()

    def _procrastinate_beat(self) -> None:
        """Keep procrastinate's heartbeat fresh; register again if the row was pruned."""
        if self.pworker.worker_id is None:  # not registered yet, or stopping
            return
        with self.db.write() as session:
            if session.scalar(_BEAT, {"id": self.pworker.worker_id}) is not None:
                return
            new_id = session.scalar(_REGISTER)
            held = [c.job.id for c in list(self.pworker._running_jobs.values()) if c.job.id]
            if held:
                session.execute(_ADOPT, {"id": new_id, "held": held})
        log.warning(
            "worker %s: registered again with procrastinate (id %s, was %s)",
            self.worker_id,
            new_id,
            self.pworker.worker_id,
        )
        self.pworker.worker_id = new_id


async def _maintain(maintenance: _Maintenance, every_s: float) -> None:
    failing = False
    while True:
        try:
            await asyncio.to_thread(maintenance.run_once)
            failing = False
        except Exception as exc:  # a transient database error must not end the worker
            if not failing:
                log.warning("worker maintenance failed (%s); trying again every %g s", exc, every_s)
            failing = True
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
    """Import the training code and warm every solver kernel before taking jobs (and before
    registering, so that a worker counts as ready once it is warm): the first job neither waits
    for a compile nor counts one in its train_time_s."""
    import importlib

    from app.warmup import warm_worker

    importlib.import_module("app.jobs.runner")
    warm_worker(log)


def run_worker(settings: Settings, *, on_ready: Callable[[], None] | None = None) -> None:
    """Run one distributed worker until SIGINT/SIGTERM (see the module docstring)."""
    _configure_threads(settings)
    from app import logs
    from app.services.sweep import sweep_temp_files

    logs.configure(settings.log_format)
    sweep_temp_files(settings)  # a worker-only host runs no API to sweep its tmp/
    asyncio.run(_serve(settings, on_ready))


async def _serve(settings: Settings, on_ready: Callable[[], None] | None) -> None:
    app = make_app(settings)
    db = Database(settings.db_url)
    worker_id = workers.new_worker_id()
    concurrency = settings.worker_concurrency
    _runtime.update(
        settings=settings,
        db=db,
        worker_id=worker_id,
        n_jobs=settings.threads_per_job(concurrency),
        queue=ProcrastinateQueue(),
    )
    try:
        await asyncio.to_thread(procrastinate_schema.check, db)
        await asyncio.to_thread(_preload)
        async with app.open_async():
            await asyncio.to_thread(workers.register, db, worker_id, "procrastinate")
            try:
                while not await _run_once(app, db, settings, worker_id, on_ready):
                    on_ready = None
            finally:
                await asyncio.to_thread(_unregister, db, worker_id)
    finally:
        _runtime.clear()
        db.dispose()


async def _run_once(app, db, settings: Settings, worker_id: str, on_ready) -> bool:
    """Run procrastinate's worker until it stops (True) or loses the database for longer than
    its pool waits (False: the caller starts it again, registered anew)."""
    beat_s = max(0.2, settings.job_stall_s / 6)
    pworker = ProcrastinateWorker(
        app,
        queues=[QUEUE_NAME],
        name=worker_id,
        concurrency=settings.worker_concurrency,
        update_heartbeat_interval=beat_s,
        stalled_worker_timeout=settings.job_stall_s,
        shutdown_graceful_timeout=settings.worker_shutdown_timeout_s,
        abort_job_polling_interval=min(1.0, beat_s),
        # new entries are announced by LISTEN/NOTIFY, but procrastinate's listener does not
        # survive a database restart: poll often enough not to depend on it
        fetch_job_polling_interval=1.0,
        delete_jobs="successful",
    )
    task = asyncio.create_task(_maintain(_Maintenance(db, settings, worker_id, pworker), beat_s))
    if on_ready is not None:
        on_ready()
    try:
        await pworker.run()
        return True
    except ConnectorException as exc:
        log.error("worker %s lost the database (%s); starting again", worker_id, exc.__cause__)
        await asyncio.sleep(1.0)
        return False
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _unregister(db: Database, worker_id: str) -> None:
    try:
        workers.unregister(db, worker_id)
    except Exception as exc:  # the database is away: the row ages out of /readyz
        log.warning("worker %s: could not unregister: %s", worker_id, exc)
