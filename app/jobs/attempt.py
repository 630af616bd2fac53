"""A running attempt's side of the lifecycle: its watch (heartbeat and cancel flag), its progress
recorder, and writes that outlast a database outage.

A worker that loses the database keeps training: progress records wait in a bounded buffer, the
heartbeat resumes as soon as the database answers, and the attempt's final write is retried until
it commits (`persist`). Whether the result still counts is decided by the compare-and-set on
(job, attempt): if the job was re-queued meanwhile, the write changes nothing and the attempt
ends as lost. A full disk is not an outage: it ends the attempt with "disk full".
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.db import is_disk_full, is_unavailable
from app.jobs import history, lifecycle
from app.jobs.lifecycle import Attempt
from app.services.job_feed import notify
from app.services.progress_estimate import estimate
from app.tables import Job, JobProgress, JobStatus, path_percent, utcnow

if TYPE_CHECKING:
    from app.jobs.runner import RunContext

log = logging.getLogger("margin.training")
T = TypeVar("T")
WATCH_INTERVAL_S = 0.2
HEARTBEAT_INTERVAL_S = 2.0
MAX_BUFFERED_RECORDS = 10_000  # while the database is away; older records are thinned beyond
PERSIST_DEADLINE_S = 600.0  # how long a final write waits for the database to come back
SHUTDOWN_DEADLINE_S = 5.0  # ... when the worker is stopping
DISK_FULL = "disk full: the server's disk filled up while the job ran; free space and run it again"


class JobLost(Exception):
    """The attempt is no longer the job's running one (re-queued, ended or deleted meanwhile)."""


class DiskFull(Exception):
    """The database could not write: the disk is full."""


def persist(
    ctx: RunContext,
    work: Callable[[Session], T],
    what: str,
    *,
    write: bool = True,
    use_reserve: bool = False,
) -> T:
    """Run `work` in a transaction until it commits, waiting out database outages (until a
    deadline). With `use_reserve` (recording why an attempt ended), a full disk releases the disk
    reserve, or else is waited out like an outage: the reason must not be lost."""
    start, delay, warned = time.monotonic(), 0.2, False
    while True:
        try:
            if write:
                with ctx.db.write() as session:
                    return work(session)
            with ctx.db.session() as session:
                return work(session)
        except Exception as exc:
            full = is_disk_full(exc) and use_reserve
            if full and ctx.reserve.release():
                continue
            deadline = SHUTDOWN_DEADLINE_S if ctx.shutdown.is_set() else PERSIST_DEADLINE_S
            if not (full or is_unavailable(exc)) or time.monotonic() - start > deadline:
                raise
            if not warned:
                log.warning("%s: cannot write (%s); retrying", what, exc)
                warned = True
            time.sleep(delay)
            delay = min(2 * delay, 2.0)


class Watch:
    """A thread that polls the job's cancel flag and keeps the attempt's heartbeat fresh; it
    notices when the attempt was taken away and when the disk is full."""

    def __init__(self, ctx: RunContext, attempt: Attempt):
        self.ctx = ctx
        self.attempt = attempt
        self.interval = min(HEARTBEAT_INTERVAL_S, ctx.settings.job_stall_s / 4)
        self.cancelled = threading.Event()
        self.lost = threading.Event()
        self.disk_full = threading.Event()
        self._stop = threading.Event()
        name = f"watch-{attempt.job_id}"
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        last_beat, failing = time.monotonic(), False
        while not self._stop.wait(WATCH_INTERVAL_S):
            try:
                self._poll()
                if time.monotonic() - last_beat >= self.interval or failing:
                    self._beat()
                    last_beat = time.monotonic()
                if failing:
                    log.info("job %s: the database is back", self.attempt.job_id)
                failing = False
            except Exception as exc:  # the database is away: keep trying, never die
                if is_disk_full(exc):
                    self.disk_full.set()
                elif not failing:
                    log.warning("job %s: cannot reach the database: %s", self.attempt.job_id, exc)
                failing = True

    def _poll(self) -> None:
        with self.ctx.db.session() as session:
            row = session.execute(
                select(Job.cancel_requested, Job.status, Job.attempt).where(
                    Job.id == self.attempt.job_id
                )
            ).one_or_none()
        if row is None or row.status != JobStatus.RUNNING or row.attempt != self.attempt.number:
            self.lost.set()
        elif row.cancel_requested:
            self.cancelled.set()

    def _beat(self) -> None:
        with self.ctx.db.write() as session:
            if not lifecycle.update_running(session, self.attempt, heartbeat_at=utcnow()):
                self.lost.set()


class Recorder:
    """The solver's callback: buffers progress records (whatever fields `JobProgress` stores),
    writes them every PROGRESS_INTERVAL_S, and returns False (stop) once a cancel or shutdown is
    seen. Raises JobLost or DiskFull to end the attempt."""

    # Each objective report costs the solver a pass over the data; jobs show the gap, and the
    # objectives now and then are enough (about 2% of a solve instead of 10%).
    objective_every = 50

    def __init__(self, ctx: RunContext, attempt: Attempt, watch: Watch, tol: float | None = None):
        self.ctx = ctx
        self.attempt = attempt
        self.watch = watch
        self.tol = tol
        self.buffer: list[dict[str, Any]] = []
        self.first: tuple[float, float] | None = None
        self.latest: dict[str, Any] | None = None
        self.percent: float | None = None  # never moves back (see flush_into)
        self.since_thinned = 0  # records written since the history was last thinned
        self.last_flush = time.monotonic()
        self._lock = threading.Lock()

    @property
    def callback(self) -> Recorder:
        return self

    def __call__(self, progress) -> bool | None:
        with self._lock:
            return self._record(progress)

    def _record(self, progress) -> bool | None:
        values = progress.as_dict()  # a search's also say where on its path it is
        record = {name: values.get(name) for name in JobProgress.RECORD_FIELDS}
        if self.first is None and record.get("gap") is not None:
            self.first = (record["gap"], record["elapsed_s"])
        self.buffer.append(record)
        self.latest = {**record, "percent": path_percent(record)}
        if len(self.buffer) > MAX_BUFFERED_RECORDS:  # keep the latest and every other before it
            self.buffer = self.buffer[::-2][::-1]
        if time.monotonic() - self.last_flush >= self.ctx.settings.progress_interval_s:
            self._try_flush()
        if self.watch.lost.is_set():
            raise JobLost(self.attempt.job_id)
        if self.watch.disk_full.is_set():
            raise DiskFull(self.attempt.job_id)
        if self.watch.cancelled.is_set() or self.ctx.shutdown.is_set():
            return False
        return None

    def _try_flush(self) -> None:
        self.last_flush = time.monotonic()
        try:
            with self.ctx.db.write() as session:
                written = self.flush_into(session)
        except Exception as exc:
            if is_disk_full(exc):
                raise DiskFull(self.attempt.job_id) from exc
            if not is_unavailable(exc):
                raise
            return  # the records wait for the database
        self.committed(written)

    def flush_into(self, session: Session) -> int:
        """Write the buffered records and the job's latest state; returns how many records, to
        pass to `committed` once the transaction commits."""
        if not self.buffer:
            return 0
        latest, percent, eta = self.latest, self.latest["percent"], None
        if percent is None and self.first is not None:
            percent, eta = estimate(
                self.first[0], self.first[1], latest.get("gap"), latest["elapsed_s"], self.tol
            )
        if percent is not None:
            # The gap is not monotone (a one-vs-rest solve starts each class afresh; shrinking
            # restarts): the percentage reports the furthest the solve has come, never less.
            percent = self.percent = max(percent, self.percent or 0.0)
        current = lifecycle.update_running(
            session,
            self.attempt,
            progress=latest,
            first_gap=self.first[0] if self.first else None,
            percent=percent,
            eta_s=eta,
            heartbeat_at=utcnow(),
        )
        if not current:
            raise JobLost(self.attempt.job_id)
        rows = [
            {"job_id": self.attempt.job_id, "attempt": self.attempt.number, **r}
            for r in self.buffer
        ]
        session.execute(insert(JobProgress), rows)
        notify(session, self.attempt.job_id)
        self.since_thinned += len(rows)
        if self.since_thinned >= history.PRUNE_EVERY:
            history.thin(session, self.attempt.job_id, self.attempt.number)
            self.since_thinned = 0
        return len(rows)

    def committed(self, written: int) -> None:
        self.buffer = self.buffer[written:]
