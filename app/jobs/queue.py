"""How jobs reach workers: the `JobQueue` protocol and the backend chosen by WORKER_BACKEND.

Every method runs inside the caller's transaction, so a backend that keeps its own queue entries
(procrastinate) changes them together with the job row: a job is queued with its entry or not at
all. The local backend keeps no entry of its own: the `queued` row is the entry, local workers
claim it. The distributed backend lives in `app.jobs.procrastinate_queue`, imported only when
selected.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session

from app.config import Settings


class JobQueue(Protocol):
    name: str

    def enqueue(self, session: Session, job_id: str) -> None:
        """Give the job a new entry, reaching a worker once the transaction commits."""

    def cancel(self, session: Session, job_id: str) -> None:
        """Keep a cancelled job from starting; ask the worker holding its entry to stop."""

    def close(self, session: Session, job_id: str, succeeded: bool = False) -> None:
        """End every open entry of the job (its attempt ended without the worker that held it:
        that worker's late finish then changes nothing)."""

    def lost(self, session: Session) -> list[str]:
        """Ids of queued jobs that have no open entry (the reconciler gives them one)."""


class LocalQueue:
    """The job row is the queue entry; the local pool's processes poll for queued rows."""

    name = "local"

    def enqueue(self, session: Session, job_id: str) -> None:
        return None

    def cancel(self, session: Session, job_id: str) -> None:
        return None

    def close(self, session: Session, job_id: str, succeeded: bool = False) -> None:
        return None

    def lost(self, session: Session) -> list[str]:
        return []


def get_queue(settings: Settings) -> JobQueue:
    """The queue backend named by `settings.worker_backend`."""
    if settings.worker_backend == "procrastinate":
        from app.jobs import procrastinate_queue

        return procrastinate_queue.make_queue(settings)
    return LocalQueue()


def run_worker(settings: Settings, workers: int | None = None) -> None:
    """Run workers in this process until stopped (SIGINT/SIGTERM)."""
    if settings.worker_backend == "procrastinate":
        from app.jobs import procrastinate_queue

        procrastinate_queue.run_worker(settings)
        return
    from app.jobs.local_pool import LocalPool

    LocalPool(settings, size=workers).run_forever()
