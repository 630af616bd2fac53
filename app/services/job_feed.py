"""Live progress for the event stream: PostgreSQL's LISTEN/NOTIFY instead of polling.

Every write of a job's progress or status notifies channel `margin_jobs` with the job's id (in
its transaction, so the notice arrives once the rows are visible). One thread per API process
listens on one connection; for each notice about a job that someone watches it reads the new rows
once, and every watcher of that job takes them from the job's `Feed`. A hundred watchers thus cost
one query per progress write, and nothing while the job is quiet. After the listening connection
is lost and made again, every feed is read again (a notice may have been missed meanwhile).

SQLite has no notifications: the stream polls there (`app.api.jobs`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from app.tables import Job, JobProgress

log = logging.getLogger("margin.api")
CHANNEL = "margin_jobs"
FEED_ROWS = 5000  # rows a feed keeps for watchers that are behind; older ones are read directly


def notify(session: Session, job_id: str) -> None:
    """Tell listening API processes that job `job_id` changed (PostgreSQL only; sent at commit)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_notify(:c, :job)"), {"c": CHANNEL, "job": job_id})


class Feed:
    """The rows and state of one watched job, as last read; `wait` returns when they change."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        self.rows: deque[JobProgress] = deque(maxlen=FEED_ROWS)
        # the newest row read; None until the first read, which takes the newest rows in the
        # database (never a client's Last-Event-ID: the feed is shared by every watcher)
        self.last_id: int | None = None
        self.current: Job | None = None
        self.watchers = 0
        # pushes so far: a watcher notes it before it reads, so that a push landing while it
        # sends events (not waiting) still wakes its next `wait`
        self.version = 0
        self._changed = asyncio.Event()

    def push(self, rows: list[JobProgress], current: Job | None) -> None:
        # Two notices may be read before the first read's rows arrive here, both from the same
        # `last_id`: keep only the rows this feed does not have yet.
        rows = [row for row in rows if self.last_id is None or row.id > self.last_id]
        self.rows.extend(rows)
        if rows:
            self.last_id = rows[-1].id
        self.current = current
        self.version += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, seen: int, timeout: float) -> bool:
        """Wait for a change after `version` was `seen` (at once if one came meanwhile); False
        when `timeout` passed without one."""
        if self.version != seen:
            return True
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def since(self, after: int) -> list[JobProgress] | None:
        """Rows with id > `after`, or None when some of them left the feed (read them from the
        database)."""
        if self.rows and self.rows[0].id > after and len(self.rows) == self.rows.maxlen:
            return None
        return [row for row in self.rows if row.id > after]


class JobFeeds:
    """The listening thread and the feeds of the jobs being watched in this process."""

    def __init__(self, db):
        self.db = db
        self.feeds: dict[str, Feed] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def subscribe(self, job_id: str) -> Feed:
        """Watch `job_id` (each watcher reads the rows it has not seen from the database first)."""
        if self._thread is None:
            self._loop = asyncio.get_running_loop()
            self._thread = threading.Thread(target=self._listen, name="job-feeds", daemon=True)
            self._thread.start()
        with self._lock:
            feed = self.feeds.get(job_id)
            if feed is None:
                feed = self.feeds[job_id] = Feed(job_id)
            feed.watchers += 1
        return feed

    def unsubscribe(self, feed: Feed) -> None:
        with self._lock:
            feed.watchers -= 1
            if feed.watchers <= 0:
                self.feeds.pop(feed.job_id, None)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _listen(self) -> None:
        import psycopg

        from app.jobs.procrastinate_queue import conninfo

        while not self._stop.is_set():
            try:
                with psycopg.connect(conninfo(self.db.url), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._refresh(list(self.feeds))  # whatever changed while not listening
                    while not self._stop.is_set():
                        # each notice at once (waiting up to a second for one, so that a stop
                        # is seen): a watcher never lags the writes by more than a read
                        for notice in conn.notifies(timeout=1.0, stop_after=1):
                            if notice.payload in self.feeds:
                                self._refresh([notice.payload])
            except Exception as exc:  # the database is away: listen again once it is back
                log.warning("job feeds: %s; listening again in 1 s", exc)
                self._stop.wait(1.0)

    def _refresh(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            feed = self.feeds.get(job_id)
            if feed is None:
                continue
            with self.db.session() as session:
                current = session.get(Job, job_id)
                attempt = max(current.attempt, 1) if current else 1
                rows = _rows_after(session, job_id, attempt, feed.last_id)
            self._loop.call_soon_threadsafe(feed.push, rows, current)


def _rows_after(session: Session, job_id: str, attempt: int, after: int | None) -> list:
    """Up to FEED_ROWS rows of the attempt after id `after`, oldest first; with `after` None the
    newest FEED_ROWS (a new feed: watchers further behind read the database themselves)."""
    query = select(JobProgress).where(JobProgress.job_id == job_id, JobProgress.attempt == attempt)
    if after is None:
        newest = session.scalars(query.order_by(JobProgress.id.desc()).limit(FEED_ROWS)).all()
        return list(reversed(newest))
    query = query.where(JobProgress.id > after).order_by(JobProgress.id).limit(FEED_ROWS)
    return list(session.scalars(query))
