"""Job event streams (GET /v1/jobs/{id}/events) cannot knock the API over: a stream holds no
database connection between its reads, their number is bounded (MAX_EVENT_STREAMS), and a
malformed Last-Event-ID header starts the stream from the beginning."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from sqlalchemy import event

from app.services import job_feed

pytestmark = pytest.mark.timeout(120)


def _watch(client, job_id, lines, opened, headers=None):
    with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers or {}) as events:
        lines.append(events.status_code)
        opened.release()
        for line in events.iter_lines():
            lines.append(line)


def _open_watchers(client, job_id, n):
    """n watchers of the job, each streaming into its own list (status code first)."""
    opened = threading.Semaphore(0)
    streams = [[] for _ in range(n)]
    threads = [threading.Thread(target=_watch, args=(client, job_id, s, opened)) for s in streams]
    for t in threads:
        t.start()
    for _ in threads:
        assert opened.acquire(timeout=30), "a watcher got no response headers"
    return streams, threads


def test_more_watchers_than_database_connections_leave_the_api_answering(app, client, heart):
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()  # queued: no worker
    n = 20  # beyond the pool's 5 connections and 10 of overflow
    streams, threads = _open_watchers(client, job["id"], n)
    # before: each stream held its request's connection while it lasted, the 16th waited for
    # one and every other request answered 503 after DB_POOL_TIMEOUT_S
    assert client.get("/v1/datasets").status_code == 200
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    for t in threads:
        t.join(30)
    for lines in streams:
        assert lines[0] == 200 and "event: end" in lines[1:], lines


def _statements_in(engine, seconds: float) -> int:
    """The SQL statements the app's engine runs in the next `seconds`."""
    count = 0

    def counted(*_args):
        nonlocal count
        count += 1

    event.listen(engine, "before_cursor_execute", counted)
    try:
        time.sleep(seconds)
    finally:
        event.remove(engine, "before_cursor_execute", counted)
    return count


def test_watchers_of_a_job_cost_the_database_what_one_costs(app, client, heart):
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()  # queued: no worker
    engine = app.state.db.engine
    streams, threads = _open_watchers(client, job["id"], 2)
    time.sleep(0.5)  # past their first reads
    few = _statements_in(engine, 2.0)
    more, more_threads = _open_watchers(client, job["id"], 18)
    time.sleep(0.5)
    many = _statements_in(engine, 2.0)
    # before (SQLite): each stream polled the job for itself, 20 streams ran many times the
    # statements of 2 (one tenant's 50 took 0.4 of a core); now the job is read once for all
    assert many <= 1.5 * few + 20, (few, many)
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    for t in [*threads, *more_threads]:
        t.join(30)
    for lines in [*streams, *more]:
        assert lines[0] == 200 and "event: end" in lines[1:], lines


def test_streams_beyond_max_event_streams_get_503(app, client, heart):
    app.state.settings.max_event_streams = 3
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    streams, threads = _open_watchers(client, job["id"], 3)
    over = client.get(f"/v1/jobs/{job['id']}/events")
    assert over.status_code == 503 and over.headers["Retry-After"]
    assert "MAX_EVENT_STREAMS" in over.json()["detail"]
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    for t in threads:
        t.join(30)
    assert all(lines[0] == 200 for lines in streams)
    # the ended streams no longer count
    again = client.get(f"/v1/jobs/{job['id']}/events")
    assert again.status_code == 200 and "event: end" in again.text


@pytest.mark.parametrize(
    "header", ["\u00b2", "99999999999999999999", "9223372036854775808", "-5", "1e9"]
)
def test_a_malformed_last_event_id_streams_from_the_start(client, heart, fake_trainer, header):
    from app.jobs.runner import RunContext, run_job

    fake_trainer(n_iter=3)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-30}})
    job_id = job.json()["id"]
    state = client.app.state
    assert run_job(job_id, RunContext(state.settings, state.db)) == "succeeded"
    response = client.get(
        f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": header.encode("latin-1")}
    )
    assert response.status_code == 200
    progress = response.text.count("event: progress")
    # anything but a plain id in range starts over (before: 500, or a stream cut by a
    # database error)
    assert progress == 3, response.text
    assert "event: end" in response.text


def test_polled_feeds_read_only_the_watched_jobs_that_changed(app, client, heart, monkeypatch):
    monkeypatch.setattr(job_feed, "STATES_AT_ONCE", 3)  # four jobs: two queries of states
    real_states, asked = job_feed._states, []

    def states(db, job_ids):
        asked.append(len(job_ids))
        return real_states(db, job_ids)

    monkeypatch.setattr(job_feed, "_states", states)
    jobs = [client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"] for _ in "abcd"]
    assert client.post(f"/v1/jobs/{jobs[3]}/cancel").status_code == 200  # ended before watched
    feeds = job_feed.PolledJobFeeds(app.state.db, 0.25)
    feeds._loop = asyncio.new_event_loop()
    read = []
    monkeypatch.setattr(feeds, "_refresh", read.extend)
    for job_id in jobs:
        feeds.feeds[job_id] = job_feed.Feed(job_id)
    try:
        feeds._poll()
        feeds._loop.run_until_complete(asyncio.sleep(0))  # what the poll handed the loop
    finally:
        feeds._loop.close()
    assert asked == [3, 1]
    # new feeds: each read once, but for the ended job's, whose watchers are woken to read the
    # database themselves (its feed keeps no rows)
    assert sorted(read) == sorted(jobs[:3])
    ended = feeds.feeds[jobs[3]]
    assert ended.version == 1 and ended.since(0) is None and not ended.rows
    read.clear()
    feeds._poll()
    assert read == []  # nothing changed: nothing read
    assert client.post(f"/v1/jobs/{jobs[1]}/cancel").status_code == 200
    assert client.delete(f"/v1/jobs/{jobs[2]}").status_code == 409  # queued: unchanged
    feeds._poll()
    assert read == [jobs[1]]


def test_a_job_ending_before_its_feed_is_first_read_ends_its_stream_at_once(app, client, heart):
    """A watcher reads the job itself (queued), then the job ends before the feed's first read:
    on SQLite that read saw an ended job and, to hold no rows, pushed nothing, so the watcher
    slept FEED_SAFETY_S (15 s) before it read the end itself. The first poll is held back 2 s."""
    feeds = app.state.job_feeds
    if isinstance(feeds, job_feed.PolledJobFeeds):
        feeds.poll_s = 2.0
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()  # queued: no worker
    streams, threads = _open_watchers(client, job["id"], 1)
    time.sleep(0.5)  # past the watcher's own first read
    cancelled = time.monotonic()
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    threads[0].join(30)
    took = time.monotonic() - cancelled
    assert streams[0][0] == 200 and "event: end" in streams[0][1:], streams[0]
    assert took < 10.0, took  # the first poll (2 s) ends it, not FEED_SAFETY_S (15 s)


def test_a_stream_whose_client_leaves_mid_read_ends_without_an_error():
    """The server ends a stream whose client left by cancelling its task group (anyio: the
    cancellation is delivered again at every await until the task leaves the scope). A stream
    with a key was reading its next event in a task of its own when that came; the task's own
    cancellation takes more than one turn of the loop (the feed's `wait_for` waits for its
    inner wait), so the stream's cleanup was cancelled again while it waited for the task, and
    closed the events under it: "RuntimeError: aclose(): asynchronous generator is already
    running", logged with its traceback for each client that left while a job trained."""
    import anyio

    from app.api.jobs import _while_key_lives

    closed = []

    async def events():  # as `_fed_events` between two progress records
        try:
            while True:
                await asyncio.wait_for(asyncio.Event().wait(), 60)  # as `Feed.wait` does
                yield {"event": "progress"}
        finally:
            closed.append(True)

    async def alive():
        return True

    async def watch():
        async def read():
            async for _ in _while_key_lives(events(), alive, 60):
                pass

        async with anyio.create_task_group() as group:  # as sse_starlette serves a stream
            group.start_soon(read)
            await asyncio.sleep(0.05)
            group.cancel_scope.cancel()  # the client left
        await asyncio.sleep(0.05)  # the reading task's own cancellation ends

    asyncio.run(watch())
    assert closed == [True]  # the feed's cleanup ran: the events were closed once


def test_a_stream_whose_read_outlives_its_cancellation_still_closes_its_events():
    """As above, but the read, cancelled, still ends with an event (asyncio's `wait_for`
    returns its inner result when that arrived with the cancellation) a few turns later: the
    stream's cleanup, cancelled again while it waited for the read, left the events unclosed,
    their own cleanup (the feed's subscription) waiting for the garbage collector."""
    import anyio

    from app.api.jobs import _while_key_lives

    closed = []

    async def events():
        try:
            while True:
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:  # the inner wait's result came with it
                    for _ in range(3):
                        await asyncio.sleep(0)
                yield {"event": "progress"}
        finally:
            closed.append(True)

    async def alive():
        return True

    async def watch():
        source = events()  # held, as a reference cycle would hold it

        async def read():
            async for _ in _while_key_lives(source, alive, 60):
                pass

        async with anyio.create_task_group() as group:  # as sse_starlette serves a stream
            group.start_soon(read)
            await asyncio.sleep(0.05)
            group.cancel_scope.cancel()  # the client left
        await asyncio.sleep(0.05)  # the read ends with its event
        return list(closed), source  # seen before asyncio.run closes what is left

    assert asyncio.run(watch())[0] == [True]  # before: [] (closed only when collected)
