"""run_job(job_id): the one function every worker engine runs to train a job.

It claims the job (queued -> running, atomically, so two workers never run it twice), loads the
dataset, trains with a progress callback, and commits the model row together with the job's final
status. Progress records are buffered and written at most every PROGRESS_INTERVAL_S; a watcher
thread polls the job's cancel flag and writes a heartbeat, so a cancel stops the solver within one
outer iteration and a dead worker's job can be told from a slow one. Every claimed job ends in a
terminal state (or back in the queue when its worker is shutting down); errors are recorded as a
message, the traceback goes to the worker's log.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np
from sqlalchemy import delete, insert, select, update

from app.config import Settings, get_settings
from app.db import Database
from app.services import lineage
from app.services.datasets import dataset_dir, load_dataset, load_dataset_as
from app.services.model_store import pack_weights
from app.services.progress_estimate import estimate
from app.services.stored_chunks import map_arrays
from app.services.trainers import TRAINERS, Trained, streams
from app.tables import Dataset, Job, JobProgress, JobStatus, Model, new_id, utcnow

log = logging.getLogger("margin.training")
WATCH_INTERVAL_S = 0.2
HEARTBEAT_INTERVAL_S = 2.0
MAX_ERROR_CHARS = 2000


class JobLost(Exception):
    """The job was taken from this worker (swept as orphaned, or deleted) while it ran."""


@dataclass
class RunContext:
    """What run_job needs from the engine that calls it."""

    settings: Settings
    db: Database
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    shutdown: threading.Event = field(default_factory=threading.Event)
    n_jobs: int | None = None  # solver threads for this job


@lru_cache
def default_context() -> RunContext:
    """A context from the environment's settings, built once per process (for engines that call
    run_job(job_id) with nothing else)."""
    settings = get_settings()
    return RunContext(settings, Database(settings.db_url), n_jobs=settings.solver_threads)


def run_job(job_id: str, ctx: RunContext | None = None) -> str | None:
    """Train job `job_id` if it is still queued. Returns its final status, or None when this call
    did not run it (not queued any more, or taken away while running)."""
    ctx = ctx or default_context()
    attempt = claim(ctx, job_id)
    if attempt is None:
        return None
    watch = _Watch(ctx, job_id, attempt)
    watch.start()
    recorder = _Recorder(ctx, job_id, attempt, watch)
    try:
        return _run_claimed(ctx, job_id, attempt, recorder)
    except JobLost:
        log.warning("job %s was taken from worker %s while it ran", job_id, ctx.worker_id)
        return None
    except Exception as exc:
        log.exception("job %s failed", job_id)
        return _fail(ctx, job_id, attempt, _message(exc))
    finally:
        watch.stop()


def claim(ctx: RunContext, job_id: str) -> int | None:
    """queued -> running for this worker; the attempt number, or None if the job was not queued."""
    now = utcnow()
    with ctx.db.write() as session:
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.QUEUED.value)
            .where(Job.cancel_requested.is_(False))
            .values(
                status=JobStatus.RUNNING.value,
                attempt=Job.attempt + 1,
                worker=ctx.worker_id,
                started_at=now,
                heartbeat_at=now,
                finished_at=None,
                progress=None,
                first_gap=None,
                percent=0.0,
                eta_s=None,
                error=None,
            )
        )
        if result.rowcount != 1:
            return None
        return session.scalar(select(Job.attempt).where(Job.id == job_id))


def _run_claimed(ctx: RunContext, job_id: str, attempt: int, recorder: _Recorder) -> str | None:
    with ctx.db.session() as session:
        job = session.get(Job, job_id)
        dataset = session.get(Dataset, job.dataset_id) if job.dataset_id else None
        valid = (
            session.get(Dataset, job.validation_dataset_id) if job.validation_dataset_id else None
        )
    if dataset is None:
        return _fail(ctx, job_id, attempt, "the job's dataset was deleted before it could run")
    if job.validation_dataset_id and valid is None:
        return _fail(ctx, job_id, attempt, "the job's validation dataset was deleted")
    trainer = TRAINERS[job.estimator]
    recorder.tol = job.params.get("tol")
    if streams(job.estimator, job.params):  # read in chunks; memory bounded by the cache
        X, y, qid = map_arrays(dataset_dir(ctx.settings, dataset.id), dataset.n_features)
    else:
        X, y, qid = load_dataset(ctx.settings, dataset)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trained = trainer(job.params, X, y, qid, recorder.callback, ctx.n_jobs)
    train_time = time.perf_counter() - start
    for warning in caught:
        log.warning("job %s: %s: %s", job_id, warning.category.__name__, warning.message)
    scores = {}
    if trained.status != "stopped":
        scores = _scores(ctx, trained, X, y, dataset, valid)
    origin = lineage.record(dataset, valid)
    return _finish(ctx, job_id, attempt, recorder, trained, dataset, train_time, scores, origin)


def _scores(ctx, trained: Trained, X, y, dataset: Dataset, valid: Dataset | None) -> dict:
    if trained.kind != "classifier":
        return {}
    out = {"train_accuracy": float(np.mean(trained.predict(X) == y))}
    if valid is not None:
        Xv, yv, _ = load_dataset_as(ctx.settings, valid, dataset.n_features, dataset.zero_based)
        out["validation_accuracy"] = float(np.mean(trained.predict(Xv) == yv))
    return out


def _finish(
    ctx, job_id, attempt, recorder, trained: Trained, dataset, train_time, scores, origin=None
) -> str | None:
    now = utcnow()
    with ctx.db.write() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None or job.status != JobStatus.RUNNING.value or job.attempt != attempt:
            raise JobLost(job_id)
        recorder.flush_into(session)
        if trained.status == "stopped" and not job.cancel_requested:
            _release(session, job)
            return JobStatus.QUEUED.value
        job.finished_at = now
        job.eta_s = 0.0
        if trained.status == "stopped":
            job.status = JobStatus.CANCELLED.value
            job.stop_reason = "cancelled"
            job.converged = False
            return job.status
        session.add(
            Model(
                id=new_id("mdl"),
                tenant=job.tenant,
                job_id=job.id,
                dataset_id=dataset.id,
                estimator=job.estimator,
                params=job.params,
                kind=trained.kind,
                classes=trained.classes,
                n_features=dataset.n_features,
                zero_based=dataset.zero_based,
                weights=(weights := pack_weights(trained.coef, trained.intercept)),
                size_bytes=len(weights),
                status=trained.status,
                gap=trained.gap,
                n_iter=trained.n_iter,
                train_time_s=train_time,
                train_accuracy=scores.get("train_accuracy"),
                validation_accuracy=scores.get("validation_accuracy"),
                feature_names=dataset.feature_names,
                lineage=origin,
            )
        )
        job.status = JobStatus.SUCCEEDED.value
        job.stop_reason = trained.status
        job.converged = trained.status == "converged"
        if job.converged:
            job.percent = 100.0
        return job.status


def _release(session, job: Job) -> None:
    """Put a job whose worker is shutting down back in the queue, as if never claimed."""
    session.execute(
        delete(JobProgress).where(JobProgress.job_id == job.id, JobProgress.attempt == job.attempt)
    )
    job.status = JobStatus.QUEUED.value
    job.attempt -= 1
    job.worker = None
    job.started_at = None
    job.progress = None
    job.first_gap = job.percent = job.eta_s = None


def _fail(ctx: RunContext, job_id: str, attempt: int, message: str) -> str | None:
    with ctx.db.write() as session:
        result = session.execute(
            update(Job)
            .where(Job.id == job_id, Job.status == JobStatus.RUNNING.value, Job.attempt == attempt)
            .values(status=JobStatus.FAILED.value, error=message, finished_at=utcnow(), eta_s=None)
        )
    return JobStatus.FAILED.value if result.rowcount == 1 else None


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return message[:MAX_ERROR_CHARS]


class _Watch:
    """A thread that polls the cancel flag and keeps the job's heartbeat fresh."""

    def __init__(self, ctx: RunContext, job_id: str, attempt: int):
        self.ctx = ctx
        self.job_id = job_id
        self.attempt = attempt
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{job_id}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        last_beat = time.monotonic()
        while not self._stop.wait(WATCH_INTERVAL_S):
            try:
                self._poll()
                if time.monotonic() - last_beat >= HEARTBEAT_INTERVAL_S:
                    self._beat()
                    last_beat = time.monotonic()
            except Exception as exc:  # a database hiccup must not kill the watcher
                log.warning("job %s: watcher could not reach the database: %s", self.job_id, exc)

    def _poll(self) -> None:
        with self.ctx.db.session() as session:
            row = session.execute(
                select(Job.cancel_requested, Job.status, Job.attempt).where(Job.id == self.job_id)
            ).one_or_none()
        if row is None or row.status != JobStatus.RUNNING.value or row.attempt != self.attempt:
            self.lost.set()
        elif row.cancel_requested:
            self.cancelled.set()

    def _beat(self) -> None:
        with self.ctx.db.write() as session:
            session.execute(
                update(Job)
                .where(Job.id == self.job_id, Job.attempt == self.attempt)
                .where(Job.status == JobStatus.RUNNING.value)
                .values(heartbeat_at=utcnow())
            )


class _Recorder:
    """The solver's callback: buffers progress records, writes them every PROGRESS_INTERVAL_S,
    and returns False (stop) once a cancel or shutdown is seen."""

    def __init__(self, ctx: RunContext, job_id: str, attempt: int, watch: _Watch):
        self.ctx = ctx
        self.job_id = job_id
        self.attempt = attempt
        self.watch = watch
        self.tol: float | None = None
        self.buffer: list[dict[str, Any]] = []
        self.first: tuple[float, float] | None = None
        self.latest: dict[str, Any] | None = None
        self.last_flush = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self, progress) -> bool | None:
        with self._lock:
            return self._record(progress)

    @property
    def callback(self) -> _Recorder:
        # Each objective report costs the solver a pass over the data; jobs show the gap, and
        # the objectives now and then are enough (about 2% of a solve instead of 10%).
        return self

    objective_every = 50

    def _record(self, progress) -> bool | None:
        record = progress.as_dict()
        record = {name: record.get(name) for name in JobProgress.RECORD_FIELDS}
        if self.first is None and record["gap"] is not None:
            self.first = (record["gap"], record["elapsed_s"])
        self.buffer.append(record)
        self.latest = record
        if time.monotonic() - self.last_flush >= self.ctx.settings.progress_interval_s:
            with self.ctx.db.write() as session:
                self.flush_into(session)
        if self.watch.lost.is_set():
            raise JobLost(self.job_id)
        if self.watch.cancelled.is_set() or self.ctx.shutdown.is_set():
            return False
        return None

    def flush_into(self, session) -> None:
        self.last_flush = time.monotonic()
        if not self.buffer:
            return
        latest = self.latest
        percent, eta = None, None
        if self.first is not None:
            percent, eta = estimate(
                self.first[0], self.first[1], latest["gap"], latest["elapsed_s"], self.tol
            )
        result = session.execute(
            update(Job)
            .where(Job.id == self.job_id, Job.attempt == self.attempt)
            .where(Job.status == JobStatus.RUNNING.value)
            .values(
                progress=latest,
                first_gap=self.first[0] if self.first else None,
                percent=percent,
                eta_s=eta,
                heartbeat_at=utcnow(),
            )
        )
        if result.rowcount != 1:
            raise JobLost(self.job_id)
        session.execute(
            insert(JobProgress),
            [{"job_id": self.job_id, "attempt": self.attempt, **r} for r in self.buffer],
        )
        self.buffer = []
