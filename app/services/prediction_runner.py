"""Background prediction runs: PREDICTION_CONCURRENCY threads of the API process, fed by the
prediction_runs table.

The table is the queue: a request inserts a `queued` row and wakes the runner; a runner thread
claims the next run, fairly across tenants (the tenant with the fewest running runs first, then the
oldest; compare-and-set, so two API processes never run it twice) and writes its CSV, stopping
between chunks if the run is cancelled meanwhile. The threads are the runner's own, not the
request thread pool, and each holds at most one database connection for a moment: a burst of runs
waits in the table instead of taking every request thread and pooled connection, so other requests
and /healthz stay fast.

Runs are recovered like jobs: at start and every few seconds, a run left `running` by a process
that is gone (dead on this host, or silent for JOB_STALL_S once this runner has itself reached the
database for that long) goes back to the queue (JOB_RETRIES times) or fails with the reason.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta

from app import clock
from app.config import Settings
from app.db import Database
from app.jobs.workers import new_worker_id
from app.services import prediction_runs as runs
from app.tables import utcnow

log = logging.getLogger("margin.predictions")
IDLE_POLL_S = 2.0  # runs queued by another API process are found within this


class PredictionRunner:
    def __init__(self, db: Database, settings: Settings):
        self.db, self.settings = db, settings
        self.worker_id = new_worker_id()
        self.size = settings.prediction_concurrency
        self.beat_s = min(5.0, settings.job_stall_s / 4)
        self._wake = threading.Condition()
        self._pending = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._connected_since: float | None = None
        self._active: set[str] = set()  # the runs this process is executing (it beats them)

    def start(self) -> None:
        """Recover runs of processes that are gone from this host, then start the threads."""
        try:
            runs.recover_runs(self.db, self.settings.job_retries)
        except Exception:  # a recovery must never keep the API from starting
            log.exception("recovering interrupted prediction runs failed")
        names = [f"prediction-{i}" for i in range(self.size)]
        self._threads = [threading.Thread(target=self._work, name=n, daemon=True) for n in names]
        self._threads.append(threading.Thread(target=self._maintain, name="runs", daemon=True))
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    def wake(self) -> None:
        """A run was queued: let an idle thread look at once."""
        with self._wake:
            self._pending += 1
            self._wake.notify()

    def _idle(self) -> None:
        with self._wake:
            if self._pending == 0 and not self._stop.is_set():
                self._wake.wait(IDLE_POLL_S)
            self._pending = max(0, self._pending - 1)

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                claim = runs.claim_next(self.db, self.worker_id)
                if claim is None:
                    self._idle()
                    continue
                self._active.add(claim.run_id)
                try:
                    runs.execute_run(self.db, self.settings, claim)
                finally:
                    self._active.discard(claim.run_id)
            except Exception as exc:  # the database is away: a run left running is recovered
                log.warning("prediction runner: %s; retrying in 1 s", exc)
                self._stop.wait(1.0)

    def _maintain(self) -> None:
        while not self._stop.wait(self.beat_s):
            try:
                runs.beat(self.db, list(self._active))
                if self._connected_since is None:
                    self._connected_since = time.monotonic()
                stale = None
                if time.monotonic() - self._connected_since >= self.settings.job_stall_s:
                    with self.db.session() as session:
                        clock.synchronize(session)
                    stale = utcnow() - timedelta(seconds=self.settings.job_stall_s)
                if runs.recover_runs(self.db, self.settings.job_retries, stale):
                    self.wake()
            except Exception as exc:
                self._connected_since = None
                log.warning("prediction runner maintenance: %s", exc)
