"""Live progress on PostgreSQL comes through LISTEN/NOTIFY: many watchers of a running job cost
one read per progress write, not a poll each four times a second."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import event

from app.db import Database
from app.jobs.runner import RunContext, run_job
from tests.deploy.cluster import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]
WATCHERS = 12


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)  # LISTEN/NOTIFY is PostgreSQL's
def test_watchers_are_fed_by_notifications(app, client, heart, fake_trainer, db_url, request):
    assert db_url.startswith("postgresql")
    fake_trainer(n_iter=12, delay=0.25)  # about 3 s of progress, a write every report
    app.state.settings.progress_interval_s = 0.01
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-30}})
    job_id = job.json()["id"]
    app.state.prediction_runner.stop()  # it polls its queue on its own schedule, not counted
    statements = []
    event.listen(app.state.db.engine, "before_cursor_execute", lambda *a: statements.append(1))
    streams: list[list[str]] = [[] for _ in range(WATCHERS)]

    def watch(lines):
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as events:
            for line in events.iter_lines():
                lines.append(line)

    threads = [threading.Thread(target=watch, args=(lines,)) for lines in streams]
    for t in threads:
        t.start()
    feeds = app.state.job_feeds.feeds
    wait_for(lambda: job_id in feeds and feeds[job_id].watchers == WATCHERS, 30, "the watchers")
    worker_db = Database(db_url)  # the worker's own engine: its writes are not counted
    try:
        started = time.monotonic()
        assert run_job(job_id, RunContext(app.state.settings, worker_db)) == "succeeded"
        took = time.monotonic() - started
    finally:
        for t in threads:
            t.join(30)
        worker_db.dispose()
    for lines in streams:
        assert sum(line.startswith("event: progress") for line in lines) == 12, lines
        assert any(line.startswith("event: end") for line in lines)
    # polling read twice per watcher four times a second (12 * 2 * 4 * 3 s = 288 statements);
    # now a few per watcher to connect and catch up, then two per job change for all of them
    # (measured: 3,127 statements before, about 100 now)
    assert took > 2.5
    assert len(statements) < 6 * WATCHERS + 3 * 16, len(statements)


def test_a_feed_keeps_each_row_once_when_reads_overlap():
    """The listener may read twice from the same `last_id` before the first read is pushed."""
    from types import SimpleNamespace

    from app.services.job_feed import Feed

    async def overlapping_reads():
        feed = Feed("job")
        rows = [SimpleNamespace(id=i) for i in range(1, 12)]
        feed.push(rows[:9], None)  # a read after a notice: rows 1–9
        feed.push(rows[5:11], None)  # a read begun before that push landed: rows 6–11
        return [row.id for row in feed.since(0)], feed.last_id

    import asyncio

    assert asyncio.run(overlapping_reads()) == (list(range(1, 12)), 11)


def test_a_push_while_a_watcher_is_not_waiting_wakes_its_next_wait():
    """A watcher sends its events between two waits; a push landing then (the job's end, right
    after its last progress) was missed: the next wait slept until the next change, or
    FEED_SAFETY_S when there was none, and the stream's end event came that late."""
    from types import SimpleNamespace

    from app.services.job_feed import Feed

    async def push_between_waits():
        feed = Feed("job")
        seen = feed.version  # noted before the watcher reads and sends
        feed.push([SimpleNamespace(id=1)], "ended")  # meanwhile
        woke = await feed.wait(seen, timeout=5.0)
        seen = feed.version
        quiet = await feed.wait(seen, timeout=0.05)  # nothing new since
        return woke, quiet, [row.id for row in feed.since(0)]

    import asyncio

    assert asyncio.run(push_between_waits()) == (True, False, [1])  # before: False, after 5 s


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_a_watchers_last_event_id_does_not_hold_back_the_others(app, client, heart, fake_trainer):
    """The feed is shared by a job's watchers: where it starts comes from the database, not from
    the first watcher's Last-Event-ID (before: a first watcher sending 2147483646 left every
    later one without progress events)."""
    fake_trainer(n_iter=12, delay=0.05)
    app.state.settings.progress_interval_s = 0.01
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-30}})
    job_id = job.json()["id"]
    streams: list[list[str]] = [[], []]

    def watch(lines, headers):
        with client.stream("GET", f"/v1/jobs/{job_id}/events", headers=headers) as events:
            for line in events.iter_lines():
                lines.append(line)

    ahead = threading.Thread(target=watch, args=(streams[0], {"Last-Event-ID": "2147483646"}))
    feeds = app.state.job_feeds.feeds
    ahead.start()
    wait_for(lambda: job_id in feeds, 30, "the first watcher's feed")
    plain = threading.Thread(target=watch, args=(streams[1], {}))
    plain.start()
    wait_for(lambda: feeds[job_id].watchers == 2, 30, "the second watcher")
    worker_db = Database(app.state.settings.db_url)
    try:
        assert run_job(job_id, RunContext(app.state.settings, worker_db)) == "succeeded"
    finally:
        for t in (ahead, plain):
            t.join(30)
        worker_db.dispose()
    progress = [sum(line.startswith("event: progress") for line in lines) for lines in streams]
    assert progress == [0, 12], streams
    assert all(any(line.startswith("event: end") for line in lines) for lines in streams)


@pytest.mark.parametrize("db_url", ["postgres"], indirect=True)
def test_progress_ids_go_past_the_32_bit_range(app, client, heart, fake_trainer, db_url):
    """Every job's reports take ids from one sequence: past 2^31 − 1 an INTEGER column failed
    every progress write (now BIGINT, migration 0012), and a resume from such an id too."""
    from sqlalchemy import text

    start = 2**31 + 10
    with app.state.db.engine.begin() as conn:
        conn.execute(text(f"ALTER SEQUENCE job_progress_id_seq RESTART WITH {start}"))
    fake_trainer(n_iter=3)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-30}})
    job_id = job.json()["id"]
    state = client.app.state
    assert run_job(job_id, RunContext(state.settings, state.db)) == "succeeded"
    response = client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": str(start)})
    assert response.text.count("event: progress") == 2, response.text
    assert f"id: {start + 2}\r\n" in response.text
