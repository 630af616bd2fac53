"""run_job(job_id): the one function every worker engine runs to train a job.

It claims the job (queued -> running, a new attempt, so two workers never run it twice), loads
the dataset, trains with a progress callback (`attempt.Recorder`) while a watch thread keeps the
attempt's heartbeat and polls its cancel flag, and commits the model row together with the job's
final status. Every status change goes through `app.jobs.lifecycle`; every write of the attempt
compares (job, attempt), so an attempt that was taken away (re-queued while the database was
away, deleted) ends without touching the job. Errors are recorded as a message (the traceback goes
to the worker's log); a full disk as "disk full"; a worker shutting down hands the job back.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db import Database, is_disk_full, is_unavailable
from app.disk import DiskReserve
from app.jobs import budget, checkpoint, lifecycle
from app.jobs.attempt import DISK_FULL, DiskFull, JobLost, Recorder, Watch, persist
from app.jobs.lifecycle import Attempt
from app.jobs.queue import JobQueue, get_queue
from app.jobs.workers import new_worker_id
from app.logs import job_context
from app.services import lineage
from app.services.dataset_files import json_bytes
from app.services.dataset_source import row_slices, score_rows
from app.services.datasets import dataset_arrays, load_dataset, load_dataset_as, name_index
from app.services.distributed_training import distributed_arrays, distributed_trainer
from app.services.formats.labels import (
    coded_weights,
    named_values,
    number_name,
    recode,
    text_classes,
)
from app.services.model_store import pack_weights
from app.services.stored_chunks import map_arrays
from app.services.trainers import TRAINERS, Trained, resumable, streams
from app.storage import checkpoint_key, get_storage, job_checkpoints
from app.tables import Dataset, Job, JobStatus, Model, new_id, utcnow

log = logging.getLogger("margin.training")
MAX_ERROR_CHARS = 2000

__all__ = ["DiskFull", "JobLost", "RunContext", "default_context", "run_job"]


@dataclass
class RunContext:
    """What run_job needs from the engine that calls it."""

    settings: Settings
    db: Database
    worker_id: str = field(default_factory=new_worker_id)
    shutdown: threading.Event = field(default_factory=threading.Event)
    n_jobs: int | None = None  # solver threads for this job
    queue: JobQueue | None = None  # default: the backend WORKER_BACKEND names
    reserve: DiskReserve | None = None  # default: DISK_RESERVE_MB in DATA_DIR

    def __post_init__(self) -> None:
        if self.queue is None:
            self.queue = get_queue(self.settings)
        if self.reserve is None:
            self.reserve = DiskReserve(self.settings.data_dir, self.settings.disk_reserve_bytes)


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
    attempt = persist(ctx, lambda s: lifecycle.claim(s, job_id, ctx.worker_id), f"claim {job_id}")
    if attempt is None:
        return None
    watch = Watch(ctx, attempt)
    watch.start()
    try:
        with job_context(job_id):
            log.info("job %s: attempt %d started on %s", job_id, attempt.number, ctx.worker_id)
            outcome = _run_claimed(ctx, attempt, watch)
            log.info("job %s: attempt %d ended %s", job_id, attempt.number, outcome)
            return outcome
    except JobLost:
        log.warning(
            "job %s: attempt %d was taken from worker %s while it ran",
            job_id,
            attempt.number,
            ctx.worker_id,
        )
        return None
    except Exception as exc:
        if isinstance(exc, DiskFull) or is_disk_full(exc):
            log.error("job %s failed: the disk is full", job_id)
            return _fail(ctx, attempt, DISK_FULL)
        if is_unavailable(exc):  # not the job's fault: the reaper re-queues it once it is back
            log.error("job %s: attempt %d lost the database: %s", job_id, attempt.number, exc)
            return None
        log.exception("job %s failed", job_id)
        return _fail(ctx, attempt, _message(exc))
    finally:
        watch.stop()


def _rows(session: Session, job_id: str) -> tuple[Job, Dataset | None, Dataset | None]:
    job = session.get(Job, job_id)
    dataset = session.get(Dataset, job.dataset_id) if job.dataset_id else None
    valid = session.get(Dataset, job.validation_dataset_id) if job.validation_dataset_id else None
    return job, dataset, valid


def _run_claimed(ctx: RunContext, attempt: Attempt, watch: Watch) -> str | None:
    job, dataset, valid = persist(
        ctx, lambda s: _rows(s, attempt.job_id), f"load {attempt.job_id}", write=False
    )
    if dataset is None:
        return _fail(ctx, attempt, "the job's dataset was deleted before it could run")
    if job.validation_dataset_id and valid is None:
        return _fail(ctx, attempt, "the job's validation dataset was deleted")
    recorder = Recorder(ctx, attempt, watch, tol=job.params.get("tol"))
    trainer, X, y, qid = _trainer_and_data(ctx, job, dataset)
    segments = _segments(ctx, attempt, job) if resumable(trainer, job.params) else None
    params = _attempt_params(ctx, job)
    names = text_classes(dataset.classes)
    if names is not None:  # y holds class codes: so do the class weights' keys
        params = coded_weights(params, names)
    trained, train_time = _train(ctx, job, params, trainer, (X, y, qid), recorder, segments)
    keep = trained.status == "stopped" and _keeps_model(ctx, attempt)
    model = None
    if trained.status != "stopped" or keep:
        scores = _scores(ctx, trained, X, y, dataset, valid)
        if names is not None and trained.classes is not None:  # codes -> the class names
            trained.classes = [names[int(c)] for c in trained.classes]
        model = _model_row(job, trained, dataset, train_time, scores)
        model["lineage"] = lineage.record(dataset, valid)
    elif segments is not None and segments.last is not None and ctx.shutdown.is_set():
        _store_checkpoint(ctx, attempt, segments.last)  # the next attempt starts from here
    outcome, written = persist(
        ctx, lambda s: _finish(s, ctx, attempt, recorder, trained, model), f"finish {job.id}"
    )
    recorder.committed(written)
    if outcome != JobStatus.QUEUED.value and segments is not None:  # the job ended: never resumed
        _drop_checkpoint(ctx, job.id)
    return outcome


def _trainer_and_data(ctx: RunContext, job: Job, dataset: Dataset):
    """The job's trainer and its training arrays (X, y, qid): in memory, mapped in chunks for
    a streaming solver, or none at all for a distributed job."""
    trainer = TRAINERS[job.estimator]
    if job.distributed:  # the Dask workers read their rows: nothing loaded here
        trainer = distributed_trainer(
            job.distributed,
            distributed_arrays(ctx.settings, dataset),
            dataset.n_features,
            dataset.classes or [],
            ctx.settings.dask_scheduler_address,
        )
        return trainer, None, None, None
    if streams(job.estimator, job.params):  # read in chunks; memory bounded by the cache
        X, y, qid = map_arrays(dataset_arrays(ctx.settings, dataset), dataset.n_features)
    else:
        X, y, qid = load_dataset(ctx.settings, dataset)
    return trainer, X, y, qid


def _attempt_params(ctx: RunContext, job: Job) -> dict:
    """The job's params with `time_limit` what is left of its bound (`app.jobs.budget`): the
    seconds of its earlier attempts and of this one so far (loading the data) are spent."""
    if budget.bound(job.params.get("time_limit"), ctx.settings.max_job_seconds) is None:
        return job.params
    used = persist(ctx, lambda s: budget.seconds_run(s, job.id), f"time of {job.id}", write=False)
    return budget.attempt_params(job.params, ctx.settings.max_job_seconds, used)


def _train(ctx: RunContext, job: Job, params: dict, trainer, data: tuple, recorder, segments):
    """(what the trainer returned, seconds it took); its warnings go to the worker's log."""
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if segments is None:
            trained = trainer(params, *data, recorder.callback, ctx.n_jobs)
        else:
            trained = checkpoint.train(
                trainer, params, *data, recorder.callback, ctx.n_jobs, segments
            )
    train_time = time.perf_counter() - start
    for warning in caught:
        log.warning("job %s: %s: %s", job.id, warning.category.__name__, warning.message)
    return trained, train_time


def _segments(ctx: RunContext, attempt: Attempt, job: Job) -> checkpoint.Segments:
    """Checkpoints every CHECKPOINT_S, starting from the latest attempt's stored one when the
    job has one."""
    start = None
    if job.checkpoint_iteration is not None:
        storage, scratch = get_storage(ctx.settings), ctx.settings.data_dir / "tmp"
        try:
            key = checkpoint.resume_key(storage, job.id, attempt.number)
            start = checkpoint.Checkpoint.load(storage, key, scratch) if key else None
        except Exception as exc:  # the store stayed away through the tries, or a bad file
            log.warning("job %s: checkpoint not read (%s); starting from scratch", job.id, exc)
        if start is not None:
            persist(ctx, lambda s: lifecycle.resume(s, attempt, start.iteration), "resume")
            log.info("job %s resumes from iteration %d", job.id, start.iteration)
    earlier_removed = False  # whether this attempt has removed the earlier attempts' files

    def on_checkpoint(point: checkpoint.Checkpoint) -> None:
        nonlocal earlier_removed
        earlier_removed = _store_checkpoint(ctx, attempt, point, remove_earlier=not earlier_removed)

    return checkpoint.Segments(
        every_s=ctx.settings.checkpoint_s, start=start, on_checkpoint=on_checkpoint
    )


def _store_checkpoint(
    ctx: RunContext, attempt: Attempt, point: checkpoint.Checkpoint, remove_earlier: bool = True
) -> bool:
    """Record the checkpoint on the job, then store it under this attempt's own key, only while
    this attempt is the job's running one: an attempt taken away (re-queued while its worker was
    cut off) that stored first overwrote the next attempt's checkpoint, and re-created it after
    the job ended. One taken away during its save (after the check) rewrites only its own file,
    which a later attempt resumes only when no attempt after it stored one. A store that fails
    after the record leaves the previous file.

    With `remove_earlier`, once this attempt's file is stored, the earlier attempts' files are
    removed: an attempt does so at its first stored checkpoint only (listing the store at every
    checkpoint was needless work once they were gone; a file an attempt taken away rewrites
    later goes with the job's at its end). Returns whether the earlier attempts' files are
    removed, by this call or (without `remove_earlier`) before it."""
    fields = {"checkpoint_at": utcnow(), "checkpoint_iteration": point.iteration}
    current = persist(ctx, lambda s: lifecycle.update_running(s, attempt, **fields), "checkpoint")
    if not current:
        log.warning(
            "job %s: attempt %d lost the job; checkpoint not stored", attempt.job_id, attempt.number
        )
        return not remove_earlier
    storage, job_id = get_storage(ctx.settings), attempt.job_id
    try:
        point.save(storage, checkpoint_key(job_id, attempt.number), ctx.settings.data_dir / "tmp")
    except Exception as exc:
        log.warning("job %s: checkpoint not stored: %s", job_id, exc)
        return not remove_earlier
    if not remove_earlier:
        return True
    try:
        for key in checkpoint.attempt_keys(storage, job_id, attempt.number - 1):
            storage.delete(key)
    except Exception as exc:  # tried again at the next checkpoint, else removed at the job's end
        log.warning("job %s: earlier attempts' checkpoints not removed: %s", job_id, exc)
        return False
    return True


def _drop_checkpoint(ctx: RunContext, job_id: str) -> None:
    """Remove every attempt's checkpoint of a job that ended."""
    try:
        get_storage(ctx.settings).delete_prefix(job_checkpoints(job_id))
    except Exception as exc:  # the reaper's retention pass removes it (`app.jobs.recovery`)
        log.warning("job %s: checkpoint not removed: %s", job_id, exc)


def _keeps_model(ctx: RunContext, attempt: Attempt) -> bool:
    """A cancel with keep_model=true: store the stopped solve's iterate as a model."""
    def read(session):
        return session.get(Job, attempt.job_id, populate_existing=True)

    job = persist(ctx, read, f"read {attempt.job_id}", write=False)
    return bool(job is not None and job.cancel_requested and job.keep_model)


def _scores(ctx, trained: Trained, X, y, dataset: Dataset, valid: Dataset | None) -> dict:
    if trained.kind != "classifier":
        return {}
    out = {} if X is None else {"train_accuracy": _accuracy(trained, X, y)}
    if valid is not None:
        Xv, yv, _ = load_dataset_as(
            ctx.settings, valid, dataset.n_features, dataset.zero_based, name_index(dataset)
        )
        yv = _as_training_labels(yv, valid, dataset)
        out["validation_accuracy"] = _accuracy(trained, Xv, yv)
    return out


def _accuracy(trained: Trained, X, y: np.ndarray) -> float:
    """The share of rows predicted right, SCORE_ENTRIES decision values and about as many
    stored entries of X at a time (`row_slices`): all of a 1.5 MB upload of 120,000 rows of
    1,000 classes at once asked for 916 MiB; 524,288 rows of 500 stored entries copied 3 GB."""
    n_rows = X.shape[0]
    step = score_rows(len(trained.classes or ()))
    right = 0
    for start, stop in row_slices(getattr(X, "indptr", None), n_rows, step):
        predicted = trained.predict(X[start:stop])
        right += int(np.count_nonzero(predicted == y[start:stop]))
    return right / n_rows if n_rows else float("nan")


def _as_training_labels(yv: np.ndarray, valid: Dataset, dataset: Dataset) -> np.ndarray:
    """The validation labels as the model predicts them before its classes are named: the
    training set's codes when its labels are text (-1, never predicted, for a class it lacks)."""
    names, valid_names = text_classes(dataset.classes), text_classes(valid.classes)
    if names is None and valid_names is None:
        return yv
    if valid_names is None:  # numeric labels against text classes: matched by name
        values = np.unique(yv)
        valid_names = [number_name(v) for v in values.tolist()]
        yv = np.searchsorted(values, yv)
    if names is None:  # text labels against numeric classes: a name is a class's number
        numbers = [float(c["label"]) for c in dataset.classes or []]
        return named_values(yv, valid_names, numbers)
    return recode(yv, valid_names, names)


def _model_row(job: Job, trained: Trained, dataset: Dataset, train_time, scores) -> dict:
    weights = pack_weights(trained.coef, trained.intercept)
    kept = (dataset.feature_names, trained.classes, trained.calibration, trained.selection)
    return dict(
        tenant=job.tenant,
        job_id=job.id,
        dataset_id=dataset.id,
        estimator=job.estimator,
        params=job.params,
        kind=trained.kind,
        classes=trained.classes,
        n_features=dataset.n_features,
        zero_based=dataset.zero_based,
        weights=weights,
        # the storage quota's share: the weights, and the JSON the model keeps beside them: its
        # copy of the feature names and of text class names (a table of long names over a few
        # rows stored megabytes per model unseen), its params, calibration and selection
        size_bytes=len(weights) + json_bytes(job.params) + sum(map(json_bytes, kept)),
        status=trained.status,
        gap=trained.gap,
        duality_gap=trained.duality_gap,
        n_iter=trained.n_iter,
        train_time_s=train_time,
        train_accuracy=scores.get("train_accuracy"),
        validation_accuracy=scores.get("validation_accuracy"),
        feature_names=dataset.feature_names,
        calibration=trained.calibration,
        selection=trained.selection,
    )


def _finish(
    session: Session, ctx: RunContext, attempt: Attempt, recorder, trained, model: dict | None
) -> tuple[str, int]:
    """The attempt's last write: its progress, then its outcome (with the model), or JobLost."""
    job = session.get(Job, attempt.job_id, with_for_update=True)
    if job is None or job.status != JobStatus.RUNNING or job.attempt != attempt.number:
        raise JobLost(attempt.job_id)
    written = recorder.flush_into(session)
    if trained.status == "stopped" and not job.cancel_requested:  # the worker is shutting down
        lifecycle.release(session, ctx.queue, attempt)
        log.info("job %s released at worker shutdown", attempt.job_id)
        return JobStatus.QUEUED.value, written
    if trained.status == "stopped":
        if model is not None:  # cancel?keep_model=true: the iterate, marked unconverged
            session.add(Model(id=new_id("mdl"), **model))
        lifecycle.stop(session, attempt)
        return JobStatus.CANCELLED.value, written
    session.add(Model(id=new_id("mdl"), **model))
    lifecycle.succeed(session, attempt, trained.status, trained.status == "converged")
    return JobStatus.SUCCEEDED.value, written


def _fail(ctx: RunContext, attempt: Attempt, message: str) -> str | None:
    failed = persist(
        ctx,
        lambda s: lifecycle.fail(s, attempt, message),
        f"fail {attempt.job_id}",
        use_reserve=True,
    )
    if failed:  # a checkpoint it stored is never resumed
        _drop_checkpoint(ctx, attempt.job_id)
    return JobStatus.FAILED.value if failed else None


def _message(exc: BaseException) -> str:
    text = str(exc).strip()
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return message[:MAX_ERROR_CHARS]
