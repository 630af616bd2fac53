"""The `workers` table: each worker process registers, beats every few seconds, and leaves.
`/readyz` counts the workers that beat recently."""

from __future__ import annotations

import logging
import threading

from sqlalchemy import delete, update

from app.db import Database
from app.tables import Worker, utcnow

log = logging.getLogger("margin.worker")
BEAT_INTERVAL_S = 3.0


def register(db: Database, worker_id: str, backend: str) -> None:
    with db.write() as session:
        session.merge(
            Worker(id=worker_id, backend=backend, started_at=utcnow(), heartbeat_at=utcnow())
        )


def beat(db: Database, worker_id: str, job_id: str | None = None) -> None:
    with db.write() as session:
        result = session.execute(
            update(Worker)
            .where(Worker.id == worker_id)
            .values(heartbeat_at=utcnow(), job_id=job_id)
        )
        if result.rowcount == 0:
            session.add(Worker(id=worker_id, backend="local", job_id=job_id))


def unregister(db: Database, worker_id: str) -> None:
    with db.write() as session:
        session.execute(delete(Worker).where(Worker.id == worker_id))


class Heartbeat:
    """A daemon thread beating for one worker process until stopped."""

    def __init__(self, db: Database, worker_id: str, interval: float = BEAT_INTERVAL_S):
        self.db = db
        self.worker_id = worker_id
        self.interval = interval
        self.job_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                beat(self.db, self.worker_id, self.job_id)
            except Exception as exc:
                log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
