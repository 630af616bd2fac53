"""How jobs reach workers: the `JobQueue` protocol and the backend chosen by WORKER_BACKEND.

`enqueue` and `cancel` are called inside the transaction that inserts (or cancels) the job row, so a
backend that keeps its own queue entry (procrastinate) commits it together with the row. The local
backend keeps no entry of its own: the `queued` row is the entry and local workers claim it.
A distributed backend lives in `app.queue_procrastinate`, imported only when selected; it provides
`make_queue(settings) -> JobQueue` and `run_worker(settings) -> None`.
"""

from __future__ import annotations

from typing import Protocol

from sqlalchemy.orm import Session

from app.config import Settings


class JobQueue(Protocol):
    name: str

    def enqueue(self, session: Session, job_id: str) -> None:
        """Make the job reach a worker once the surrounding transaction commits."""

    def cancel(self, session: Session, job_id: str) -> None:
        """Keep a cancelled job from starting (its row already says so)."""


class LocalQueue:
    """The job row is the queue entry; `app.worker` processes poll for queued rows."""

    name = "local"

    def enqueue(self, session: Session, job_id: str) -> None:
        return None

    def cancel(self, session: Session, job_id: str) -> None:
        return None


def get_queue(settings: Settings) -> JobQueue:
    """The queue backend named by `settings.worker_backend`."""
    if settings.worker_backend == "procrastinate":
        from app import queue_procrastinate

        return queue_procrastinate.make_queue(settings)
    return LocalQueue()


def run_worker(settings: Settings, workers: int | None = None) -> None:
    """Run workers in this process until stopped (SIGINT/SIGTERM)."""
    if settings.worker_backend == "procrastinate":
        from app import queue_procrastinate

        queue_procrastinate.run_worker(settings)
        return
    from app.worker import LocalPool

    LocalPool(settings, size=workers).run_forever()
