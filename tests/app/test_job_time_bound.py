"""The bound on a job's running time (`app.jobs.budget`): its time_limit, or MAX_JOB_SECONDS,
bounds the whole job over all its attempts. A time_limit above MAX_JOB_SECONDS is refused; a
search job that reaches the bound ends with stop reason time_limit and a model refitted at the
best of the Cs every fold finished; a retried attempt gets what the earlier ones left.

The bound falls at a known place: a wrapper around the real trainer sleeps through the budget in
the search's callback at one solve (one solver thread, so the solves run in the path's order)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from app.config import Settings
from app.jobs import budget, recovery
from app.jobs.runner import RunContext, run_job
from app.services import trainers
from app.tables import Job
from solvers import LinearSVCCV, read_libsvm
from tests.app.conftest import HEART

CS = [0.001, 0.01, 0.1, 1.0]
SEARCH = {"tol": 1e-6, "search": {"Cs": CS, "cv": 3}}


class Trainer:
    """The real LinearSVC trainer, recording the params each attempt got; with ``sleep_at``
    (c_index, seconds), its callback sleeps that long at the first pass of fold 0 at that C.
    Resumable as the real one: a single solve runs through the checkpointed segments."""

    resumable = True

    def __init__(self, monkeypatch, sleep_at: tuple[int, float] | None = None):
        self.sleep_at, self.params, self.called_at = sleep_at, [], []
        monkeypatch.setitem(trainers.TRAINERS, "LinearSVC", self)

    def __call__(self, params, X, y, qid, callback, n_jobs, init_dual=None):
        self.params.append(params)
        self.called_at.append(time.monotonic())
        slept = set()

        def slowed(record):
            where = (getattr(record, "stage", None), getattr(record, "fold", None),
                     getattr(record, "c_index", None))  # fmt: skip
            if self.sleep_at and where == ("path", 0, self.sleep_at[0]) and where not in slept:
                slept.add(where)
                time.sleep(self.sleep_at[1])
            return callback(record)

        return trainers.train_linear_svc(params, X, y, qid, slowed, n_jobs, init_dual)


def _submit(client, heart, **params) -> str:
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": params})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_a_time_limit_above_max_job_seconds_is_refused(app, client, heart):
    app.state.settings.max_job_seconds = 60.0
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"],
                                              "params": {"time_limit": 61}})  # fmt: skip
    assert response.status_code == 422
    assert "MAX_JOB_SECONDS" in response.text and "params.time_limit" in response.text
    assert _submit(client, heart, time_limit=60)
    assert _submit(client, heart)  # no time_limit: the job gets the bound


def test_a_job_shows_the_bound_in_force(app, client, heart):
    # its own time_limit, else MAX_JOB_SECONDS (read when shown: the one its next attempt gets)
    own, default = _submit(client, heart, time_limit=30), _submit(client, heart)
    assert client.get(f"/v1/jobs/{default}").json()["time_bound_s"] is None
    app.state.settings.max_job_seconds = 60.0
    assert client.get(f"/v1/jobs/{own}").json()["time_bound_s"] == 30.0
    assert client.get(f"/v1/jobs/{default}").json()["time_bound_s"] == 60.0
    listed = {j["id"]: j["time_bound_s"] for j in client.get("/v1/jobs").json()["items"]}
    assert listed[own] == 30.0 and listed[default] == 60.0
    assert run_job(default, RunContext(app.state.settings, app.state.db)) == "succeeded"
    with client.stream("GET", f"/v1/jobs/{default}/events") as events:
        end = [line for line in events.iter_lines() if line.startswith("data:")][-1]
    assert '"time_bound_s":60.0' in end.replace(" ", "")


def test_max_job_seconds_empty_is_no_bound_and_zero_is_refused():
    assert Settings(max_job_seconds="").max_job_seconds is None
    assert Settings(max_job_seconds="90").max_job_seconds == 90.0
    with pytest.raises(ValueError, match="max_job_seconds"):
        Settings(max_job_seconds="0")


def test_a_search_job_ends_at_the_bound_with_the_finished_Cs(app, client, db, heart, monkeypatch):
    settings = app.state.settings
    # the job asks no time_limit: the service bounds it. Its first two Cs (6 solves on
    # heart_scale, a few ms each) must finish within it with the job's start: 1 s was crossed
    # once on an idle 2-core machine, the table then empty
    settings.max_job_seconds = 3.0
    X, y = read_libsvm(HEART)[:2]
    finished = LinearSVCCV(Cs=CS[:2], cv=3, tol=1e-6, n_jobs=1).fit(X, y)  # kernels loaded too
    trainer = Trainer(monkeypatch, sleep_at=(2, settings.max_job_seconds))
    job_id = _submit(client, heart, **SEARCH)
    assert run_job(job_id, RunContext(settings, db, n_jobs=1)) == "succeeded"
    assert 0 < trainer.params[0]["time_limit"] <= settings.max_job_seconds

    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["stop_reason"] == "time_limit" and job["converged"] is False
    model = client.get(f"/v1/models/{job['model_id']}").json()
    selection = model["selection"]
    assert selection["search_status"] == "time_limit" and model["status"] == "time_limit"
    assert [row["C"] for row in selection["table"]] == pytest.approx(CS[:2])
    assert all(set(row["status"]) == {"converged"} for row in selection["table"])
    assert selection["C"] == pytest.approx(finished.C_)
    assert selection["best_score"] == pytest.approx(finished.best_score_)
    predicted = client.post(f"/v1/models/{job['model_id']}/predict", content=HEART.read_bytes(),
                            headers={"content-type": "text/plain"}).json()  # fmt: skip
    assert np.mean(np.asarray(predicted["labels"]) == y) > 0.7  # a usable model


def _dead_attempt(app, db, job_id: str, seconds: float) -> None:
    """A worker claims the job, runs `seconds`, and dies; the reaper re-queues the job."""
    from app.jobs import lifecycle

    with db.write() as session:
        assert lifecycle.claim(session, job_id, "worker-that-dies") is not None
    time.sleep(seconds)
    settings = app.state.settings
    moved = recovery.recover(db, settings, app.state.queue, [job_id], "worker died", "reaper")
    assert moved == {job_id: "queued"}


def test_a_retried_attempt_gets_what_the_earlier_one_left(app, client, db, heart, monkeypatch):
    settings = app.state.settings
    settings.job_retries = 1
    trainer = Trainer(monkeypatch)
    job_id = _submit(client, heart, tol=1e-3, time_limit=30.0)  # a single, resumable solve
    begun = time.monotonic()
    _dead_attempt(app, db, job_id, 1.0)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    # not a fresh 30 s: the dead attempt's second at least is spent; and no more than the two
    # attempts can have run by the time the trainer was called (a fixed 28 s floor left a loaded
    # machine one second for the database writes and the data's loading)
    spent = trainer.called_at[0] - begun
    assert 30.0 - spent - 0.01 <= trainer.params[0]["time_limit"] <= 29.0
    assert client.get(f"/v1/jobs/{job_id}").json()["stop_reason"] == "converged"


def test_a_retry_after_the_bound_is_spent_ends_at_once(app, client, db, heart, monkeypatch):
    settings = app.state.settings
    settings.job_retries, settings.max_job_seconds = 1, 0.5
    trainer = Trainer(monkeypatch)
    job_id = _submit(client, heart, **SEARCH)
    _dead_attempt(app, db, job_id, settings.max_job_seconds)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    assert trainer.params[0]["time_limit"] == budget.LAST_SECONDS
    with db.session() as session:
        assert session.get(Job, job_id).attempt == 2
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["stop_reason"] == "time_limit" and job["model_id"] is not None


def test_a_resumed_attempt_is_not_charged_twice_for_the_earlier_seconds():
    """The attempt's budget already counts the earlier attempts' running time: the checkpoint's
    solver seconds (part of it) are not taken off again, only this attempt's own segments."""
    from app.jobs import checkpoint

    got = []

    def trainer(params, X, y, qid, callback, n_jobs, init_dual=None):
        got.append(params["time_limit"])
        return trainers.Trained("classifier", [0, 1], np.zeros((1, 2)), np.zeros(1),
                                "converged", 0.0, 1, predict=lambda Z: Z)  # fmt: skip

    start = checkpoint.Checkpoint(np.zeros(3), np.zeros((1, 2)), np.zeros(1), 40, 100.0)
    segments = checkpoint.Segments(every_s=0, start=start, on_checkpoint=lambda point: None)
    checkpoint.train(trainer, {"time_limit": 10.0}, None, None, None, lambda p: None, 1, segments)
    assert got == [10.0]


def test_a_search_out_of_time_before_any_C_says_its_model_has_no_probabilities(
    app, client, db, heart, monkeypatch
):
    # before: the model came back with "calibration": null and nothing else said why; only a
    # predict asking for probabilities found out
    settings = app.state.settings
    settings.max_job_seconds = 1.0
    Trainer(monkeypatch, sleep_at=(0, 1.5))  # the first C's first fold outlasts the bound
    job_id = _submit(client, heart, **SEARCH)
    assert run_job(job_id, RunContext(settings, db, n_jobs=1)) == "succeeded"
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert job["stop_reason"] == "time_limit"
    model = client.get(f"/v1/models/{job['model_id']}").json()
    assert model["selection"]["search_status"] == "time_limit" and model["calibration"] is None
    said = model["calibration_missing"]
    assert "ran out of time" in said and "time_limit" in said
    listed = client.get("/v1/models").json()["items"]
    assert [m["calibration_missing"] for m in listed] == [said]
    predicted = client.post(f"/v1/models/{job['model_id']}/predict?probabilities=true",
                            content=HEART.read_bytes(), headers={"content-type": "text/plain"})
    assert predicted.status_code == 422 and predicted.json()["detail"] == said


def test_a_model_that_was_not_asked_for_probabilities_misses_nothing(
    app, client, db, heart, monkeypatch
):
    Trainer(monkeypatch)
    job_id = _submit(client, heart, tol=1e-3)
    assert run_job(job_id, RunContext(app.state.settings, db)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job_id}").json()["model_id"]
    assert client.get(f"/v1/models/{model_id}").json()["calibration_missing"] is None
