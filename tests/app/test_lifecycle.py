"""The job lifecycle (app/jobs/lifecycle.py) on SQLite and PostgreSQL: the table of allowed moves,
compare-and-set on (job, attempt), the history it keeps, and the races it settles — a worker whose
attempt was re-queued while it could not reach the database finishes late and changes nothing."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from sqlalchemy import func, select

from app.jobs import lifecycle
from app.jobs.attempt import JobLost
from app.jobs.lifecycle import TRANSITIONS, Attempt, IllegalTransition
from app.jobs.queue import LocalQueue
from app.jobs.recovery import recover
from app.jobs.runner import RunContext, run_job
from app.tables import Job, JobProgress, JobStatus, Model

pytestmark = pytest.mark.timeout(120)
S = JobStatus


def job_row(db, job_id) -> Job:
    with db.session() as session:
        return session.get(Job, job_id)


def test_the_table_of_moves():
    allowed = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert allowed == {
        (S.QUEUED, S.RUNNING),
        (S.QUEUED, S.CANCELLED),
        (S.QUEUED, S.FAILED),
        (S.RUNNING, S.SUCCEEDED),
        (S.RUNNING, S.FAILED),
        (S.RUNNING, S.CANCELLED),
        (S.RUNNING, S.QUEUED),
    }
    assert set(TRANSITIONS) == set(S)


def test_moves_outside_the_table_and_unknown_fields_are_refused(db):
    with db.write() as session:
        for a, b in itertools.product(S, S):
            if b not in TRANSITIONS[a]:
                with pytest.raises(IllegalTransition):
                    lifecycle.transition(session, "job_x", 0, a, b)
        with pytest.raises(TypeError, match="status"):
            lifecycle.transition(session, "job_x", 0, S.QUEUED, S.FAILED, status="running")
        with pytest.raises(TypeError, match="queue"):  # entering queued needs a queue entry
            lifecycle.transition(session, "job_x", 1, S.RUNNING, S.QUEUED)


def test_compare_and_set_on_job_and_attempt(client, db, heart, fake_trainer):
    fake_trainer()
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"]
    with db.write() as session:
        first = lifecycle.claim(session, job_id, "w1")
    with db.write() as session:
        assert lifecycle.claim(session, job_id, "w2") is None  # claimed already
        stale = Attempt(job_id, first.number + 1, "w1")  # an attempt the job is not at
        assert not lifecycle.fail(session, stale, "x")
        assert not lifecycle.update_running(session, stale, percent=50.0)
    assert job_row(db, job_id).status == "running"
    with db.write() as session:
        assert lifecycle.fail(session, first, "boom")
        assert not lifecycle.fail(session, first, "twice")  # a terminal job never moves
    job = job_row(db, job_id)
    assert (job.status, job.error, job.attempt) == ("failed", "boom", 1)


def test_history_records_every_change(client, db, app, heart, fake_trainer):
    fake_trainer()
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"]
    ctx = RunContext(app.state.settings, app.state.db, worker_id="host:1:abc")
    assert run_job(job_id, ctx) == "succeeded"
    items = client.get(f"/v1/jobs/{job_id}/history").json()["items"]
    moves = [(e["from_status"], e["to_status"], e["attempt"], e["by"]) for e in items]
    assert moves == [
        (None, "queued", 0, "api"),
        ("queued", "running", 1, "worker"),
        ("running", "succeeded", 1, "worker"),
    ]
    assert "host:1:abc" not in str(items)  # worker and host names stay internal
    assert client.get("/v1/jobs/job_nope/history").status_code == 404


def test_a_late_finish_after_a_requeue_changes_nothing(app, client, db, heart, fake_trainer):
    """The first observed failure: the reaper re-queues a job whose worker could not beat (the
    database was away); that worker then finishes. Its result must not land, and the job must
    still reach a worker — it runs again as attempt 2 and succeeds."""
    fake = fake_trainer(n_iter=10_000, delay=0.002)
    settings = app.state.settings.model_copy(update={"job_retries": 1})
    job_id = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-300}}
    ).json()["id"]
    ctx = RunContext(settings, app.state.db, worker_id="slow:1:a")
    outcome = []
    runner = threading.Thread(target=lambda: outcome.append(run_job(job_id, ctx)))
    runner.start()
    while job_row(db, job_id).progress is None:
        time.sleep(0.01)
    # as the reaper does once the worker's heartbeat is older than JOB_STALL_S
    assert recover(db, settings, LocalQueue(), [job_id], "no heartbeat", "reaper") == {
        job_id: "queued"
    }
    requeued = job_row(db, job_id)
    assert (requeued.status, requeued.attempt, requeued.worker) == ("queued", 1, None)
    assert (requeued.percent, requeued.progress, requeued.started_at) == (None, None, None)
    runner.join(30)
    assert outcome == [None]  # the first attempt learnt it was taken away, and wrote nothing
    assert job_row(db, job_id).status == "queued"
    fake.n_iter = 3
    assert run_job(job_id, RunContext(settings, app.state.db, worker_id="next:2:b")) == "succeeded"
    job = job_row(db, job_id)
    assert (job.status, job.attempt, job.worker) == ("succeeded", 2, "next:2:b")
    with db.session() as session:
        assert session.scalar(select(func.count()).where(Model.job_id == job_id)) == 1
        attempts = set(
            session.scalars(select(JobProgress.attempt).where(JobProgress.job_id == job_id))
        )
        history = [(e.to_status, e.attempt) for e in lifecycle.history(session, job_id)]
    assert attempts == {1, 2}  # the first attempt's records are kept
    assert history == [
        ("queued", 0),
        ("running", 1),
        ("queued", 1),
        ("running", 2),
        ("succeeded", 2),
    ]


def test_finish_raises_job_lost_when_the_attempt_is_gone(app, client, db, heart, fake_trainer):
    from app.jobs.runner import _finish

    fake_trainer()
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"]
    with db.write() as session:
        attempt = lifecycle.claim(session, job_id, "w")
    with db.write() as session:
        job = session.get(Job, job_id)
        lifecycle.requeue_or_fail(session, LocalQueue(), job, "lost", 1, "reaper")
    ctx = RunContext(app.state.settings, app.state.db)
    with pytest.raises(JobLost), db.write() as session:
        _finish(session, ctx, attempt, None, None, None)
