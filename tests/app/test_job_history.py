"""A job's stored progress is bounded and log-spaced while the live stream sees every report;
ended jobs can be deleted (DELETE /v1/jobs/{id}) and expire after JOB_RETENTION_DAYS."""

from __future__ import annotations

import json
import threading
from datetime import timedelta

import numpy as np
from sqlalchemy import func, select, update

from app.jobs import history
from app.jobs.queue import LocalQueue
from app.jobs.recovery import Reaper
from app.jobs.runner import RunContext, run_job
from app.services import trainers
from app.tables import Job, JobEvent, JobProgress, Model, utcnow

REPORTS = 1000  # over twice the bound on stored rows, which a history without thinning keeps


class ManyReports:
    """`REPORTS` progress reports, as a fast solver on a small set makes."""

    def __init__(self, n=REPORTS, after_first=lambda: None):
        self.n = n
        self.after_first = after_first  # called once the first report is written

    def __call__(self, params, X, y, qid, callback, n_jobs):
        from solvers import Progress

        for it in range(1, self.n + 1):
            callback(
                Progress(it, 1e-4 * it, 10.0 / it, pg_max=1.0, pg_min=-1.0, pg_range=2.0, active=5)
            )
            if it == 1:
                self.after_first()
        return trainers.Trained(
            kind="classifier", classes=[-1, 1], coef=np.zeros((1, X.shape[1])),
            intercept=np.zeros(1), status="max_iter", gap=1e-3, n_iter=self.n,
            predict=lambda Z: np.ones(Z.shape[0]),
        )  # fmt: skip


def _count(db, job_id):
    with db.session() as session:
        return session.scalar(
            select(func.count()).select_from(JobProgress).where(JobProgress.job_id == job_id)
        )


def test_history_is_bounded_and_log_spaced_while_the_stream_sees_every_report(
    app, client, db, heart, fake_trainer, monkeypatch
):
    seen: list[int] = []
    following = threading.Event()  # the watcher has the first report: its stream is live

    def wait_for_watcher():
        assert following.wait(30), "the event stream never delivered the first report"

    fake_trainer()
    monkeypatch.setitem(trainers.TRAINERS, "LinearSVC", ManyReports(after_first=wait_for_watcher))
    app.state.settings.progress_interval_s = 0.0  # a write per report: the worst case
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-9}})
    job_id = job.json()["id"]

    def watch():
        with client.stream("GET", f"/v1/jobs/{job_id}/events") as events:
            for line in events.iter_lines():
                payload = json.loads(line[5:]) if line.startswith("data:") else {}
                if "iteration" in payload:  # a progress record (not a status change)
                    seen.append(payload["iteration"])
                    following.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert run_job(job_id, RunContext(app.state.settings, db)) == "succeeded"
    watcher.join(60)
    stored = _count(db, job_id)
    bound = history.bucket(REPORTS) + history.LIVE_WINDOW + history.PRUNE_EVERY
    assert stored <= bound, stored  # before: a row per report
    with db.session() as session:
        kept = session.scalars(
            select(JobProgress.iteration)
            .where(JobProgress.job_id == job_id)
            .order_by(JobProgress.iteration)  # PostgreSQL returns rows in no set order
        ).all()
    assert kept[:20] == list(range(1, 21))  # every early iteration, fewer later ones
    assert max(kept) == REPORTS
    # below the newest LIVE_WINDOW + PRUNE_EVERY (300) rows, which may not have been thinned
    # yet, with 100 more to spare
    gaps = np.diff([k for k in kept if k < REPORTS - 400])
    assert gaps[-1] > gaps[0]
    # the live stream saw the reports as they were written (it keeps up with the writer)
    assert seen[:50] == list(range(1, 51)) and len(seen) > stored
    assert seen == sorted(set(seen))  # each report once, in order
    assert client.get(f"/v1/jobs/{job_id}").json()["progress"]["iteration"] == REPORTS


def test_deleting_a_job_removes_its_progress_and_history(app, client, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 409  # queued: cancel it first
    assert run_job(job["id"], RunContext(app.state.settings, db)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    assert _count(db, job["id"]) > 0
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert client.get(f"/v1/jobs/{job['id']}").status_code == 404
    assert client.delete(f"/v1/jobs/{job['id']}").status_code == 404
    assert _count(db, job["id"]) == 0
    with db.session() as session:
        assert session.scalar(
            select(func.count()).select_from(JobEvent).where(JobEvent.job_id == job["id"])
        ) == 0
        model = session.get(Model, model_id)
        assert model is not None and model.job_id is None  # the model stays


def test_ended_jobs_expire_after_the_retention(app, client, db, heart, fake_trainer):
    fake_trainer()
    settings = app.state.settings
    old, recent = (client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json() for _ in "ab")
    for job in (old, recent):
        assert run_job(job["id"], RunContext(settings, db)) == "succeeded"
    with db.write() as session:
        session.execute(
            update(Job).where(Job.id == old["id"]).values(finished_at=utcnow() - timedelta(days=40))
        )
    settings.job_retention_days = 30
    Reaper(db, settings, LocalQueue(), actor="reaper@test").run_once()
    assert client.get(f"/v1/jobs/{old['id']}").status_code == 404
    assert client.get(f"/v1/jobs/{recent['id']}").status_code == 200
    assert _count(db, old["id"]) == 0
