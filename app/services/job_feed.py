"""Live progress for the event stream, read once per API process for all the watchers of a job.

Every write of a job's progress or status notifies channel `margin_jobs` with the job's id (in
its transaction, so the notice arrives once the rows are visible). One thread per API process
listens on one connection; for each notice about a job that someone watches it reads the new rows
once, and every watcher of that job takes them from the job's `Feed`. A hundred watchers thus cost
one query per progress write, and nothing while the job is quiet. After the listening connection
is lost and made again, every feed is read again (a notice may have been missed meanwhile).

SQLite has no notifications: there `PolledJobFeeds` looks at every watched job each poll, in
two queries whatever their number, and reads the new rows of the jobs that changed, once for all
their watchers. (Each stream polled for itself before: 50 streams of one queued job, one tenant's
share, took 0.4 of a core of the API process and slowed its other requests fortyfold.)
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session

from app.tables import TERMINAL_STATUSES, Job, JobProgress

log = logging.getLogger("margin.api")
CHANNEL = "margin_jobs"
FEED_ROWS = 5000  # rows a feed keeps for watchers that are behind; older ones are read directly
STATES_AT_ONCE = 500  # watched jobs PolledJobFeeds looks at in one query


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
        self.polled: tuple | None = None  # PolledJobFeeds: the job's state at the last read
        # pushes so far: a watcher notes it before it reads, so that a push landing while it
        # sends events (not waiting) still wakes its next `wait`
        self.version = 0
        self.stale = False  # set by `invalidate`: watchers read the database, not the feed
        self._changed = asyncio.Event()

    def push(self, rows: list[JobProgress], current: Job | None) -> None:
        # Two notices may be read before the first read's rows arrive here, both from the same
        # `last_id`: keep only the rows this feed does not have yet.
        rows = [row for row in rows if self.last_id is None or row.id > self.last_id]
        self.rows.extend(rows)
        if rows:
            self.last_id = rows[-1].id
        self.current = current
        self._wake()

    def invalidate(self) -> None:
        """Wake the watchers to read the database themselves (the feed keeps no rows: its job
        ended before the feed's first read)."""
        self.rows.clear()
        self.stale = True
        self._wake()

    def _wake(self) -> None:
        """Count a change and wake every watcher waiting for one."""
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
        if self.stale:
            return None
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
        loop = asyncio.get_running_loop()
        restart = self._thread is None or not self._thread.is_alive() or self._stop.is_set()
        if restart or loop is not self._loop:  # first, stopped, or the app started again
            self._stop.set()  # a thread of an earlier loop ends
            with self._lock:
                self.feeds.clear()  # their events belong to the earlier loop
            self._loop, self._stop = loop, threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name="job-feeds", daemon=True
            )
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
            if feed.watchers <= 0 and self.feeds.get(feed.job_id) is feed:
                del self.feeds[feed.job_id]

    def _watched(self) -> list[str]:
        with self._lock:  # subscribers change the dict meanwhile, from the event loop's thread
            return list(self.feeds)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self, stop: threading.Event) -> None:
        self._listen(stop)

    def _listen(self, stop: threading.Event) -> None:
        import psycopg

        from app.jobs.procrastinate_queue import conninfo

        while not stop.is_set():
            try:
                with psycopg.connect(conninfo(self.db.url), autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self._refresh(self._watched())  # whatever changed while not listening
                    while not stop.is_set():
                        # each notice at once (waiting up to a second for one, so that a stop
                        # is seen): a watcher never lags the writes by more than a read
                        for notice in conn.notifies(timeout=1.0, stop_after=1):
                            if notice.payload in self.feeds:
                                self._refresh([notice.payload])
            except Exception as exc:  # the database is away: listen again once it is back
                log.warning("job feeds: %s; listening again in 1 s", exc)
                stop.wait(1.0)

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


class PolledJobFeeds(JobFeeds):
    """SQLite: one thread polls the watched jobs every `poll_s` (see the module's docstring)."""

    def __init__(self, db, poll_s: float):
        super().__init__(db)
        self.poll_s = poll_s

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.poll_s):
            try:
                self._poll()
            except Exception as exc:  # the database is busy or away: poll again
                log.warning("job feeds: %s; polling again in 1 s", exc)
                stop.wait(1.0)

    def _poll(self) -> None:
        """Read the jobs whose status, attempt or newest progress row changed since their last
        read (a new feed has none: it is read at once, unless its job has ended: then its watchers
        are woken to read the rows themselves and end, since a feed of an ended job of many
        rows, kept for a client that reads nothing, would hold FEED_ROWS of them for nothing)."""
        with self._lock:  # subscribers change the dict meanwhile
            feeds = list(self.feeds.values())
        if not feeds:
            return
        ids = [feed.job_id for feed in feeds]
        states = {}
        for start in range(0, len(ids), STATES_AT_ONCE):  # SQLite bounds a query's parameters
            states.update(_states(self.db, ids[start : start + STATES_AT_ONCE]))
        for feed in feeds:
            state = states.get(feed.job_id, ("deleted", None, None))
            ended_before = feed.polled is None and state[0] in TERMINAL_STATUSES
            if ended_before:  # a watcher may have read it running: it must not wait for a push
                self._loop.call_soon_threadsafe(feed.invalidate)
            elif state != feed.polled:
                self._refresh([feed.job_id])
            feed.polled = state


def _states(db, job_ids: list[str]) -> dict[str, tuple]:
    """(status, attempt, newest progress id) of each job of `job_ids` that exists."""
    with db.session() as session:
        jobs = session.execute(
            select(Job.id, Job.status, Job.attempt).where(Job.id.in_(job_ids))
        ).all()
        newest = dict(
            session.execute(
                select(JobProgress.job_id, func.max(JobProgress.id))
                .where(JobProgress.job_id.in_(job_ids))
                .group_by(JobProgress.job_id)
            ).all()
        )
    return {job_id: (status, attempt, newest.get(job_id)) for job_id, status, attempt in jobs}
