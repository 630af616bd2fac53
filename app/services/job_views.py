"""Reading jobs: the list, a job's progress records, and the job as the API shows it."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import ProblemError
from app.jobs import budget, workers
from app.schemas.common import decimal, keyset_page, sized_page
from app.tables import Job, JobProgress, JobStatus, utcnow

MAX_PROGRESS_ID = 2**63 - 1  # progress ids are 64-bit integers (migration 0012)
NO_WORKER_READY = (
    "no worker is ready yet: workers compile (or load) the solver kernels when they start, "
    "which can take minutes on a small machine; the job starts once one is ready (GET /readyz)"
)


def list_jobs(
    session: Session,
    limit: int,
    cursor: str | None,
    statuses: list[str] | None,
    dataset_id: str | None = None,
) -> tuple[list[Job], str | None]:
    query = select(Job)
    if statuses:
        query = query.where(Job.status.in_(statuses))
    if dataset_id:
        query = query.where(Job.dataset_id == dataset_id)
    # a job's params hold its class weights (264 kB for 1,000 classes of long names): 500 such
    # jobs made a 131 MB page
    return sized_page(session, query, Job.id, limit, cursor, bulk=(Job.params,))


def progress_records(
    session: Session, job: Job, limit: int, cursor: str | None
) -> tuple[list[JobProgress], str | None]:
    """The job's progress records of its latest attempt, oldest first."""
    query = select(JobProgress).where(
        JobProgress.job_id == job.id, JobProgress.attempt == max(job.attempt, 1)
    )

    def position(after: str) -> int:
        value = progress_id(after)
        if value is None:
            raise ProblemError(422, "Invalid cursor", f"cursor: not a progress cursor: {cursor!r}")
        return value

    return keyset_page(
        session, query, JobProgress.id, limit, cursor, descending=False, position=position
    )


def progress_id(text: str) -> int | None:
    """The progress id `text` spells in decimal within the column's range, else None."""
    return decimal(text, MAX_PROGRESS_ID)



def waiting_reason(session: Session, job: Job) -> str | None:
    """Why a queued job has not started, where the service can tell: no worker is ready."""
    return waiting_reasons(session, [job])[0]


def waiting_reasons(session: Session, jobs: list[Job]) -> list[str | None]:
    """`waiting_reason` of each job, the ready workers counted once for them all (a page of the
    list), and only where one of them is queued."""
    queued = [job.status == JobStatus.QUEUED.value for job in jobs]
    if not any(queued) or workers.ready_count(session) > 0:
        return [None] * len(jobs)
    return [NO_WORKER_READY if waits else None for waits in queued]


def job_view(
    job: Job, max_job_seconds: float | None = None, waiting: str | None = None
) -> dict[str, Any]:
    """The job as the API shows it; ``max_job_seconds`` (MAX_JOB_SECONDS) for its time bound,
    ``waiting`` for why a queued job waits (`waiting_reason`)."""
    end = job.finished_at or (utcnow() if job.started_at else None)
    elapsed = (end - job.started_at).total_seconds() if job.started_at and end else None
    return {
        "id": job.id,
        "dataset_id": job.dataset_id,
        "validation_dataset_id": job.validation_dataset_id,
        "estimator": job.estimator,
        "params": job.params,
        "distributed": job.distributed,
        "status": job.status,
        "progress": job.progress,
        "percent": job.percent,
        "eta_s": job.eta_s,
        "elapsed_s": elapsed,
        "tol": job.params.get("tol"),
        "time_bound_s": budget.bound(job.params.get("time_limit"), max_job_seconds),
        "converged": job.converged,
        "stop_reason": job.stop_reason,
        "attempt": job.attempt,
        "cancel_requested": job.cancel_requested,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "model_id": job.model_id,
        "error": job.error,
        "checkpoint_iteration": job.checkpoint_iteration,
        "resumed_from": job.resumed_from,
        "waiting": waiting,
    }
