"""Worker processes: their ids, and the `workers` table they register in and beat into.

A worker id is `host:pid:nonce` — the host and pid let the local pool tell a dead process on this
machine at once, and the random nonce keeps two processes apart where hosts and pids repeat
(containers with host networking are all `pid 1` on the same host name). `/readyz` counts the
workers that beat recently; a worker whose row vanished (pruned while the database was away)
registers again with its next beat.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app import clock
from app.db import Database
from app.tables import Worker, utcnow

log = logging.getLogger("margin.worker")
BEAT_INTERVAL_S = 3.0
ALIVE_S = 15.0  # a worker whose heartbeat is at most this old counts as ready


def new_nonce() -> str:
    return uuid.uuid4().hex[:8]


def new_worker_id(pid: int | None = None, nonce: str | None = None) -> str:
    """A unique id for a worker process: `host:pid:nonce` (this process's pid by default)."""
    return f"{socket.gethostname()}:{pid or os.getpid()}:{nonce or new_nonce()}"


@dataclass(frozen=True)
class WorkerId:
    host: str
    pid: int | None

    @classmethod
    def parse(cls, worker_id: str | None) -> WorkerId | None:
        """The host and pid of `host:pid:nonce` (or of an older `host:pid`)."""
        if not worker_id or ":" not in worker_id:
            return None
        host, _, rest = worker_id.partition(":")
        pid = rest.partition(":")[0]
        return cls(host, int(pid) if pid.isdigit() else None)

    def dead_here(self) -> bool:
        """True when the process ran on this host and no longer exists, or has exited and
        waits for its parent to reap it (a zombie: where the parent died too, that waits on
        the host's init, which in a container without one never comes)."""
        if self.host != socket.gethostname() or self.pid is None:
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return _exited(self.pid)


def _exited(pid: int) -> bool:
    """Whether a process that still exists is a zombie (state Z in Linux's /proc; elsewhere,
    where there is no /proc, it counts as alive)."""
    return process_state(pid) == "Z"


def process_state(pid: int) -> str | None:
    """The state letter of process `pid` in Linux's /proc/<pid>/stat (R running, S sleeping, Z a
    zombie: exited, not yet reaped, ...); None where it cannot be read: no such process, or no
    /proc. The letter follows the command name's closing parenthesis (the name may hold any)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def dead_here(worker_id: str | None) -> bool:
    parsed = WorkerId.parse(worker_id)
    return parsed is not None and parsed.dead_here()


def register(db: Database, worker_id: str, backend: str) -> None:
    with db.write() as session:
        session.merge(
            Worker(id=worker_id, backend=backend, started_at=utcnow(), heartbeat_at=utcnow())
        )


def ready_count(session: Session, max_age_s: float = ALIVE_S) -> int:
    """Workers whose heartbeat is at most `max_age_s` old: a worker registers only once its
    kernels are warm, so one still compiling them is not counted."""
    clock.synchronize(session)
    since = utcnow() - timedelta(seconds=max_age_s)
    return session.scalar(
        select(func.count()).select_from(Worker).where(Worker.heartbeat_at >= since)
    )


def beat(db: Database, worker_id: str, backend: str, job_id: str | None = None) -> None:
    """Refresh the worker's heartbeat; register it again if its row is gone."""
    with db.write() as session:
        result = session.execute(
            update(Worker)
            .where(Worker.id == worker_id)
            .values(heartbeat_at=utcnow(), job_id=job_id)
        )
        if result.rowcount == 0:
            log.warning("worker %s: registering again (its row was gone)", worker_id)
            session.add(Worker(id=worker_id, backend=backend, job_id=job_id))


def check_health(settings, max_age_s: float = 15.0) -> int:
    """`margin worker --check`: 0 when a worker process of this host has beaten into the
    database within `max_age_s` and is warm (ready to take jobs), else 1 with the reason. The
    container health check of the worker role (an exec probe on Kubernetes)."""
    import sys
    from datetime import timedelta

    from sqlalchemy import select

    host = socket.gethostname()
    options = {} if settings.is_sqlite else {"connect_args": {"connect_timeout": 5}}
    db = Database(settings.db_url, **options)
    try:
        with db.session() as session:
            clock.synchronize(session, force=True)
            since = utcnow() - timedelta(seconds=max_age_s)
            rows = session.scalars(
                select(Worker.id).where(Worker.heartbeat_at >= since, Worker.id.like(f"{host}:%"))
            ).all()
    except Exception as exc:
        print(f"worker check: database unreachable: {exc}", file=sys.stderr)
        return 1
    finally:
        db.dispose()
    if not rows:
        message = f"worker check: no worker on {host} beat in the last {max_age_s:g} s"
        print(message, file=sys.stderr)
        return 1
    print(f"worker check: {len(rows)} worker(s) on {host} alive")
    return 0


def unregister(db: Database, worker_id: str) -> None:
    with db.write() as session:
        session.execute(delete(Worker).where(Worker.id == worker_id))


class Heartbeat:
    """A daemon thread beating for one worker process until stopped."""

    def __init__(self, db: Database, worker_id: str, backend: str, interval=BEAT_INTERVAL_S):
        self.db = db
        self.worker_id = worker_id
        self.backend = backend
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
        failing = False
        while not self._stop.wait(self.interval):
            try:
                beat(self.db, self.worker_id, self.backend, self.job_id)
                if failing:
                    log.info("worker %s: heartbeat restored", self.worker_id)
                failing = False
            except Exception as exc:
                if not failing:
                    log.warning("worker %s: heartbeat failed: %s", self.worker_id, exc)
                failing = True
