"""Jobs: create (validated params, Idempotency-Key, queue entry in the same transaction),
cancel and delete. The checks a request must pass are in `app.services.job_checks`; reading
jobs (list, progress, the API's view) is in `app.services.job_views`."""

from __future__ import annotations

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.errors import ProblemError
from app.jobs import lifecycle
from app.jobs.queue import JobQueue
from app.schemas.jobs import JobCreate
from app.schemas.params import EstimatorSpec
from app.services import idempotency, quotas
from app.services.dataset_source import DatasetMismatch, column_placement
from app.services.datasets import name_index, named_dataset
from app.services.job_checks import (
    MAX_DUAL_VARIABLES,
    check_cache_size,
    check_dataset_fits,
    check_distributed,
    check_time_limit,
    check_validation_labels,
    invalid,
    validate_request,
)
from app.tables import Dataset, Job, new_id


def _checked_datasets(
    session: Session,
    body: JobCreate,
    spec: EstimatorSpec,
    params: dict,
    dask_address: str | None,
    max_weights: int,
    max_dual: int = MAX_DUAL_VARIABLES,
    solver_threads: int | None = None,
) -> Dataset:
    """The job's training dataset, once it and the validation dataset (if any) fit the request
    and the tenant may queue one more job; 404, 422 or 429 otherwise."""
    dataset = named_dataset(session, body.dataset_id, lock=True)
    check_dataset_fits(spec, params, dataset, max_weights, max_dual, solver_threads)
    check_distributed(body, params, dataset, dask_address)
    quotas.check_active_jobs(session)
    if body.validation_dataset_id is not None:
        valid = named_dataset(
            session, body.validation_dataset_id, "validation_dataset_id", lock=True
        )
        if valid.zero_based and not dataset.zero_based:
            raise invalid(
                "validation_dataset_id",
                "the validation file uses feature index 0, the training file is one-based",
            )
        try:  # a table of the training columns in another order is read by name
            column_placement(valid.feature_names, name_index(dataset))
        except DatasetMismatch as exc:
            raise invalid("validation_dataset_id", str(exc)) from None
        check_validation_labels(spec, dataset, valid)
    return dataset


def create_job(
    db: Database, queue: JobQueue, body: JobCreate, key: str | None, settings: Settings
) -> tuple[Job, bool]:
    """Insert a queued job and its queue entry in one transaction. Returns (job, created).
    The service's `settings` bound it: DASK_SCHEDULER_ADDRESS (distributed jobs need one),
    MAX_MODEL_WEIGHTS (with SOLVER_THREADS), MAX_DUAL_VARIABLES, MAX_JOB_SECONDS, MAX_CACHE_MB, and
    IDEMPOTENCY_TTL_HOURS for ``key``."""
    spec, params = validate_request(body)
    check_time_limit(params, settings.max_job_seconds)
    check_cache_size(params, settings.max_cache_mb)
    key_ttl_hours = settings.idempotency_ttl_hours
    # the job as it will run (params validated, defaults filled in): {"C": 1} and {"C": 1.0}
    # are one request, and a retry matches the first whatever spelling the client used
    body_hash = (
        idempotency.request_hash({**body.model_dump(mode="json"), "params": params})
        if key
        else None
    )
    # keys stored before this fingerprint hold the raw body's; their retries within the TTL match
    raw_hash = idempotency.request_hash(body.model_dump(mode="json")) if key else None
    if key:
        with db.session() as session:
            existing = idempotency.lookup(
                session, "jobs", key, body_hash, key_ttl_hours, legacy_hash=raw_hash
            )
            if existing:
                return _replayed(session, existing), False
    # after the key: a retry replays its job, whatever became of the dataset since
    _check_online_examples(db, settings, body, spec, params)
    try:
        with db.write() as session:
            job = _queued_job(session, queue, body, spec, params, settings)
            if key:
                idempotency.remember(session, "jobs", key, body_hash, job.id, key_ttl_hours)
            session.refresh(job)  # its columns as inserted (server defaults too), for the answer
    except IntegrityError:
        if not key:
            raise
        with db.session() as session:
            existing = idempotency.lookup(
                session, "jobs", key, body_hash, key_ttl_hours, legacy_hash=raw_hash
            )
            if existing is None:
                raise
            return _replayed(session, existing), False
    with db.session() as session:  # as it is now: a worker may have started it already
        now = session.get(Job, job.id)
    # None: cancelled and deleted by another request since the commit; answer it as created
    return (now if now is not None else job), True


def _check_online_examples(
    db: Database, settings: Settings, body: JobCreate, spec: EstimatorSpec, params: dict
) -> None:
    """422 naming the rows of an example (a qid) split into two runs, for an online structural
    job: its solver reads each run of equal qid as one example, and the job failed at start.
    The batch solver groups rows by qid, so the upload itself is valid and kept. Read before
    the job's transaction, which locks the dataset's row."""
    if spec.kind != "structural" or not params.get("online"):
        return
    import numpy as np

    from app.services import stored_chunks
    from app.services.datasets import dataset_array

    with db.session() as session:
        dataset = named_dataset(session, body.dataset_id)
    if not dataset.has_qid:  # answered by check_dataset_fits
        return
    try:
        qid = dataset_array(settings, dataset, "qid", tries=1)  # a 503 within the timeout
        stored_chunks.check_contiguous(np.load(qid, mmap_mode="r"))
    except FileNotFoundError:  # deleted meanwhile: the job's transaction answers 404
        return
    except ValueError as exc:
        raise invalid("params.online", str(exc)) from None


def _queued_job(
    session: Session,
    queue: JobQueue,
    body: JobCreate,
    spec: EstimatorSpec,
    params: dict,
    settings: Settings,
) -> Job:
    """A new job, added with its queue entry in `session` once its datasets fit the request."""
    dataset = _checked_datasets(
        session,
        body,
        spec,
        params,
        settings.dask_scheduler_address,
        settings.max_model_weights,
        settings.max_dual_variables,
        settings.solver_threads,
    )
    job = Job(
        id=new_id("job"),
        dataset_id=dataset.id,
        validation_dataset_id=body.validation_dataset_id,
        estimator=spec.name,
        params=params,
        distributed=body.distributed.model_dump() if body.distributed else None,
    )
    lifecycle.submit(session, queue, job)
    return job


def _replayed(session: Session, job_id: str) -> Job:
    """The job an Idempotency-Key created; 409 once that job was deleted."""
    job = session.get(Job, job_id)
    if job is None:
        raise idempotency.deleted("job", job_id)
    return job


def cancel_job(db: Database, queue: JobQueue, job_id: str, keep_model: bool = False) -> Job:
    """Cancel a queued job at once; ask a running one to stop (it ends within one iteration,
    its iterate stored as an unconverged model with `keep_model`)."""
    with db.write() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None:
            raise ProblemError(404, "Job not found", f"no job with id {job_id!r}")
        if not lifecycle.cancel(session, queue, job, keep_model=keep_model):
            raise ProblemError(
                409, "Job already finished", f"job {job_id!r} already ended {job.status}"
            )
        # as written, read in this transaction: a read after the commit found nothing (500)
        # once the cancelled job was deleted in between
        session.refresh(job)
    return job


def delete_job(db: Database, settings, job_id: str) -> None:
    """Delete an ended job with its progress and history (its model stays); 409 while it is
    queued or running."""
    from app.storage import get_storage, job_checkpoints

    with db.write() as session:
        job = session.get(Job, job_id, with_for_update=True)
        if job is None:
            raise ProblemError(404, "Job not found", f"no job with id {job_id!r}")
        if not lifecycle.remove(session, job_id):
            raise ProblemError(
                409,
                "Job active",
                f"job {job_id!r} is {job.status}: cancel it, then delete it once it has ended",
            )
    try:
        get_storage(settings).delete_prefix(job_checkpoints(job_id))
    except Exception:  # a checkpoint left behind is removed with the next retention pass
        pass

