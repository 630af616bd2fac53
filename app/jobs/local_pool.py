"""The local worker pool: processes started with `spawn` that claim queued jobs and run them.

`spawn`, not `fork`: Numba's OpenMP threading layer aborts in a forked child. Each child sets
NUMBA_NUM_THREADS to cores / pool size before the solvers load, so the pool never oversubscribes
the CPU. A supervisor thread replaces children that die; the job a dead child was running is
re-queued or failed (JOB_RETRIES) at once, and the reaper (`app.jobs.recovery`) runs at start and
every few seconds for jobs left by a previous service or silent for JOB_STALL_S. The supervisor
also keeps the disk reserve (`app.disk`) in place. At start, and whenever a child dies, the pool
sweeps this host's temporary files of dead processes (`app.services.sweep`): a checkpoint
half-saved by a killed worker.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
import threading
import time
from multiprocessing.connection import wait

from sqlalchemy import select

from app.config import Settings
from app.db import Database
from app.disk import DiskReserve
from app.jobs import recovery, workers
from app.jobs.queue import LocalQueue
from app.services.sweep import sweep_temp_files
from app.tables import Job, JobStatus

log = logging.getLogger("margin.worker")
SWEEP_INTERVAL_S = 5.0
# How long a child whose pool process died may take to hand its job back before it exits hard is
# WORKER_ORPHAN_EXIT_S (10 s by default): a solver hears the shutdown within an outer iteration,
# and the release waits at most SHUTDOWN_DEADLINE_S (5 s, app.jobs.attempt) for the database;
# 10 s covers both, and bounds how long an orphan runs beside the next service's workers. A
# deployment whose passes or checkpoint stores take longer raises it.
ORPHAN_EXIT_CODE = 70  # EX_SOFTWARE: the child gave up on a clean exit


def next_queued(db: Database) -> str | None:
    """The oldest queued job's id (claiming it is run_job's business)."""
    with db.session() as session:
        return session.scalar(
            select(Job.id)
            .where(Job.status == JobStatus.QUEUED.value, Job.cancel_requested.is_(False))
            .order_by(Job.id)
            .limit(1)
        )


def child_main(settings_data: dict, threads: int, worker_id: str) -> None:
    """A pool process: claim and run jobs until SIGTERM (a running job is released on SIGTERM)."""
    os.environ["NUMBA_NUM_THREADS"] = str(threads)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which stops us
    from app import logs
    from app.jobs.runner import RunContext

    settings = Settings(**settings_data)
    logs.configure(settings.log_format)
    db = Database(settings.db_url)
    ctx = RunContext(settings, db, worker_id=worker_id, n_jobs=threads, queue=LocalQueue())
    signal.signal(signal.SIGTERM, lambda *_: ctx.shutdown.set())
    _watch_parent(ctx)
    from app.warmup import warm_worker

    warm_worker(log)  # before registering: a worker counts as ready once it is warm
    _register(db, ctx)
    heartbeat = workers.Heartbeat(db, ctx.worker_id, "local")
    heartbeat.start()
    try:
        _run_jobs_until_shutdown(db, ctx, heartbeat)
    finally:
        _leave(db, ctx, heartbeat)


def _run_jobs_until_shutdown(db: Database, ctx, heartbeat: workers.Heartbeat) -> None:
    """Claim and run the oldest queued job, again and again, until SIGTERM."""
    from app.jobs.runner import run_job

    while not ctx.shutdown.is_set():
        try:
            job_id = next_queued(db)
            if job_id is None:
                ctx.shutdown.wait(ctx.settings.poll_interval_s)
                continue
            heartbeat.job_id = job_id
            run_job(job_id, ctx)
        except Exception as exc:  # the database is away: wait for it rather than crash-loop
            log.warning("worker %s: %s; retrying in 1 s", ctx.worker_id, exc)
            ctx.shutdown.wait(1.0)
        finally:
            heartbeat.job_id = None


def _leave(db: Database, ctx, heartbeat: workers.Heartbeat) -> None:
    """Stop the heartbeat, unregister this worker and close its database connections."""
    heartbeat.stop()
    try:
        workers.unregister(db, ctx.worker_id)
    except Exception as exc:
        log.warning("worker %s: could not unregister: %s", ctx.worker_id, exc)
    db.dispose()


def _child_entry(settings_data: dict, threads: int, nonce: str) -> None:
    child_main(settings_data, threads, workers.new_worker_id(nonce=nonce))


def _watch_parent(ctx) -> None:
    """When the pool's process is gone (e.g. SIGKILLed), shut down: the running job is released
    as at SIGTERM. A child that has not exited WORKER_ORPHAN_EXIT_S later (its solver inside a long
    compiled call that never asks the callback) exits at once; its job, left running under this
    process's id, is re-queued or failed by the next pool's reaper as for a killed worker. An
    orphaned worker would otherwise run on beside the next service's pool (one ran 35 minutes)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    exit_after_s = ctx.settings.worker_orphan_exit_s

    def watch() -> None:
        parent.join()  # returns when the pool's end of the pipe closes: the pool is gone
        log.warning("worker %s: the pool process is gone; stopping", ctx.worker_id)
        ctx.shutdown.set()
        time.sleep(exit_after_s)
        log.error(
            "worker %s: still running %g s after the pool process died; exiting",
            ctx.worker_id,
            exit_after_s,
        )
        os._exit(ORPHAN_EXIT_CODE)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _register(db: Database, ctx) -> None:
    """Register this worker, waiting for the database if it is not reachable yet."""
    while not ctx.shutdown.is_set():
        try:
            workers.register(db, ctx.worker_id, "local")
            return
        except Exception as exc:
            log.warning("worker %s: cannot register (%s); retrying in 1 s", ctx.worker_id, exc)
            ctx.shutdown.wait(1.0)


class LocalPool:
    """`size` spawned worker processes and the supervisor thread that keeps them alive."""

    def __init__(self, settings: Settings, size: int | None = None):
        self.settings = settings
        self.size = size or settings.local_workers()
        self.threads = settings.threads_per_job(self.size)
        self.db = Database(settings.db_url)
        self.children: list[multiprocessing.process.BaseProcess] = []
        self._ctx = multiprocessing.get_context("spawn")
        self._stopping = threading.Event()
        self._supervisor: threading.Thread | None = None
        self.host = socket.gethostname()
        self.queue = LocalQueue()
        self.reaper = recovery.Reaper(self.db, settings, self.queue, actor=f"pool@{self.host}")
        self.reserve = DiskReserve(settings.data_dir, settings.disk_reserve_bytes)
        self._ids: dict[int, str] = {}  # pid -> worker id

    def start(self) -> None:
        self.settings.ensure_dirs()
        sweep_temp_files(self.settings)  # a worker-only host runs no API to sweep its tmp/
        self.reserve.ensure()
        swept = self.reaper.run_once()
        if swept:
            log.warning("recovered %d jobs left running by a previous run: %s", len(swept), swept)
        self.children = [self._spawn() for _ in range(self.size)]
        self._supervisor = threading.Thread(target=self._supervise, name="pool", daemon=True)
        self._supervisor.start()
        log.info("local pool: %d workers, %d solver threads each", self.size, self.threads)

    def _spawn(self):
        nonce = workers.new_nonce()
        process = self._ctx.Process(
            target=_child_entry,
            args=(self.settings.model_dump(mode="json"), self.threads, nonce),
            name="margin-worker",
            daemon=True,
        )
        process.start()
        self._ids[process.pid] = workers.new_worker_id(process.pid, nonce)
        return process

    def worker_id(self, process) -> str:
        return self._ids.get(process.pid, f"{self.host}:{process.pid}")

    def _supervise(self) -> None:
        last_sweep = time.monotonic()
        every = min(SWEEP_INTERVAL_S, self.settings.job_stall_s / 4)
        while not self._stopping.is_set():
            wait([p.sentinel for p in self.children], timeout=1.0)
            if self._stopping.is_set():
                break
            self._replace_dead()
            if time.monotonic() - last_sweep > every:
                last_sweep = time.monotonic()
                self._sweep()

    def _replace_dead(self) -> None:
        """Recover the jobs of each child that died, and start another in its place."""
        for i, process in enumerate(self.children):
            if not process.is_alive():
                self._recover(process)
                self.children[i] = self._spawn()

    def _sweep(self) -> None:
        """Put the disk reserve back if it was used, and run the reaper's pass; a failed pass
        is logged, and the next sweep tries again."""
        self.reserve.ensure()
        try:
            self.reaper.run_once()
        except Exception as exc:
            log.warning("sweep failed: %s", exc)

    def _recover(self, process) -> None:
        code = process.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        reason = f"the worker process running the job died ({how})"
        log.error("worker %s died (%s); starting a new one", self.worker_id(process), how)
        try:
            recovery.recover_worker(
                self.db, self.settings, self.queue, self.worker_id(process), reason
            )
        except Exception:
            log.exception("could not recover the jobs of worker %s", self.worker_id(process))
        # its temporary files (a checkpoint half-saved, a download) go now, not at the next start
        sweep_temp_files(self.settings, dead_pid=process.pid)

    def alive(self) -> int:
        return sum(p.is_alive() for p in self.children)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the children (a running job is released to the queue), then wait for them."""
        self._stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout=5)
        for process in self.children:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self.children:
            process.join(max(0.1, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join(5)
                self._recover(process)
        self.db.dispose()

    def run_forever(self) -> None:
        """Start, then block until SIGINT or SIGTERM; stop cleanly."""
        done = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: done.set())
        self.start()
        try:
            while not done.wait(1.0):
                pass
        finally:
            self.stop()
