"""Saving a running job's iterate (CHECKPOINT_S) and resuming from it: a retried attempt that
resumes from the last checkpoint and says so in its history, cancel?keep_model=true, a checkpoint
streamed through a file, and a resume that rides out a storage hiccup."""

from __future__ import annotations

import threading
import time
import tracemalloc

import numpy as np
import pytest

from app.jobs.runner import RunContext, run_job
from app.storage import StorageUnavailable, checkpoint_key, get_storage
from app.tables import Job, Model
from solvers import LinearSVC, read_libsvm
from tests.app.checkpoint_helpers import (
    PARAMS,
    StopAfter,
    checkpoint_every_segment,
    model_coef,
    new_job,
    stored_keys,
)
from tests.app.conftest import HEART


def test_a_job_checkpoints_and_ends_at_the_uninterrupted_optimum(app, client, db, heart):
    settings = app.state.settings
    checkpoint_every_segment(settings)  # a checkpoint every few passes, all the solve long
    job_id = new_job(client, heart)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    with db.session() as session:
        job = session.get(Job, job_id)
    assert job.checkpoint_iteration is not None and job.checkpoint_iteration >= 3
    assert stored_keys(settings, job_id) == []  # removed once done
    coef, model = model_coef(db, job_id)
    X, y = read_libsvm(HEART)[:2]
    straight = LinearSVC(**PARAMS).fit(X, y)
    assert model.status == "converged" and model.n_iter >= job.checkpoint_iteration
    np.testing.assert_allclose(coef[0], straight.coef_[0], atol=1e-4)


def test_a_retried_job_resumes_from_its_checkpoint(app, client, db, heart):
    settings = app.state.settings
    checkpoint_every_segment(settings)
    job_id = new_job(client, heart)
    first = RunContext(settings, db, shutdown=StopAfter(6))
    assert run_job(job_id, first) == "queued"  # stopped at shutdown: handed back
    with db.session() as session:
        job = session.get(Job, job_id)
    stored = job.checkpoint_iteration
    assert stored and stored_keys(settings, job_id) == [checkpoint_key(job_id, 1)]
    settings.checkpoint_s = 60.0  # the resumed attempt runs uncut (the first test cuts one)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    view = client.get(f"/v1/jobs/{job_id}").json()
    assert view["resumed_from"] == stored
    reasons = [e["reason"] for e in client.get(f"/v1/jobs/{job_id}/history").json()["items"]]
    assert f"resumed from the checkpoint at iteration {stored}" in reasons
    coef, model = model_coef(db, job_id)
    X, y = read_libsvm(HEART)[:2]
    straight = LinearSVC(**PARAMS).fit(X, y)
    assert model.status == "converged"
    np.testing.assert_allclose(coef[0], straight.coef_[0], atol=1e-4)
    progress = client.get(f"/v1/jobs/{job_id}/progress").json()["items"]
    assert progress[0]["iteration"] > stored  # counted on from the checkpoint


@pytest.mark.parametrize("keep", [True, False])
def test_cancel_with_keep_model_stores_the_iterate(app, client, db, heart, fake_trainer, keep):
    fake_trainer(n_iter=400, delay=0.02)
    job_id = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-30}}
    ).json()["id"]
    result = {}
    runner = threading.Thread(
        target=lambda: result.update(s=run_job(job_id, RunContext(app.state.settings, db)))
    )
    runner.start()
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job_id}").json()["progress"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    response = client.post(f"/v1/jobs/{job_id}/cancel", params={"keep_model": keep})
    assert response.status_code == 202
    runner.join(30)
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert result["s"] == "cancelled" and job["status"] == "cancelled"
    assert job["converged"] is False
    if not keep:
        assert job["model_id"] is None
        return
    model = client.get(f"/v1/models/{job['model_id']}").json()
    assert model["status"] == "stopped" and model["n_iter"] < 400
    predicted = client.post(
        f"/v1/models/{job['model_id']}/predict", json={"instances": [[0.0] * 13]}
    )
    assert predicted.status_code == 200


@pytest.mark.parametrize(
    "extra",
    [{"search": {"Cs": [0.1, 1.0], "cv": 3}}, {"probability": True}],
    ids=["search", "probability"],
)
def test_jobs_of_many_solves_are_not_cut_into_segments(app, client, db, heart, extra):
    """A search or a calibrated fit runs many solves and has no one dual point to resume: with
    checkpoints due at every pass it still trains to the end, uncut."""
    settings = app.state.settings
    checkpoint_every_segment(settings)
    params = {"tol": 1e-3, **extra}
    body = {"dataset_id": heart["id"], "params": params}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration is None
        model = session.query(Model).filter_by(job_id=job_id).one()
        assert model.calibration is not None and model.status == "converged"


@pytest.mark.parametrize("where", ["directory", "s3"])
def test_a_checkpoint_goes_through_a_file_not_memory(where, tmp_path, request):
    # saving built the whole file in memory (a copy of the dual state more, up to 1 GiB at
    # MAX_DUAL_VARIABLES) and loading joined the stored chunks, then read them (two copies):
    # now the arrays read back are the only copy
    from app.jobs.checkpoint import Checkpoint
    from app.storage import FileStorage, open_storage

    if where == "s3":
        _, bucket = request.getfixturevalue("s3_env")
        storage = open_storage(f"s3://{bucket}/margin")
    else:
        storage = FileStorage(tmp_path / "store")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    alpha = np.random.default_rng(0).standard_normal(8 << 20)  # 64 MiB
    point = Checkpoint(alpha, np.ones((1, 3)), np.zeros(1), 7, 1.5)
    tracemalloc.start()
    try:
        point.save(storage, checkpoint_key("job_x", 1), scratch)
        saved = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        back = Checkpoint.load(storage, checkpoint_key("job_x", 1), scratch)
        loaded = tracemalloc.get_traced_memory()[1] - back.alpha.nbytes
    finally:
        tracemalloc.stop()
    print(f"{where}: save peak {saved / 2**20:.1f} MiB, load {loaded / 2**20:.1f} MiB more")
    np.testing.assert_array_equal(back.alpha, alpha)
    assert (back.iteration, back.elapsed_s) == (7, 1.5)
    assert list(scratch.iterdir()) == []
    assert saved < alpha.nbytes / 2 and loaded < alpha.nbytes / 2
    assert Checkpoint.load(storage, checkpoint_key("job_absent", 1), scratch) is None


class FlakyStore:
    """A stand-in for an object store (no local path: a checkpoint is fetched) over a directory
    store, whose first `failures` fetches fail as an unreachable S3 does."""

    def __init__(self, inner, failures: float):
        self.inner, self.failures, self.fetches = inner, failures, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def local_path(self, key):
        return None

    def fetch(self, key, path):
        self.fetches += 1
        if self.fetches <= self.failures:
            raise StorageUnavailable("object storage unreachable: read timeout")
        self.inner.fetch(key, path)


@pytest.mark.parametrize(
    "failures, corrupt, resumes, fetches",
    [(1, False, True, 2), (float("inf"), False, False, 3), (0, True, False, 1)],
    ids=["fails-once", "always-fails", "corrupt"],
)
def test_a_resume_rides_out_a_storage_hiccup_but_not_an_outage_or_a_bad_file(
    app, client, db, heart, monkeypatch, failures, corrupt, resumes, fetches
):
    # the stored checkpoint was read once: one S3 hiccup made the attempt start from scratch,
    # losing every pass of the earlier ones
    from app.jobs import checkpoint, runner

    assert checkpoint.READ_TRIES == 3  # the always-failing store is fetched that often
    settings = app.state.settings
    checkpoint_every_segment(settings)
    job_id = new_job(client, heart)
    assert run_job(job_id, RunContext(settings, db, shutdown=StopAfter(6))) == "queued"
    with db.session() as session:
        stored = session.get(Job, job_id).checkpoint_iteration
    settings.checkpoint_s = 60.0  # the resumed attempt runs uncut: what it starts from is tested
    if corrupt:  # a file cut short: no retry reads it whole
        path = get_storage(settings).local_path(checkpoint_key(job_id, 1))
        path.write_bytes(path.read_bytes()[:100])
    flaky = FlakyStore(get_storage(settings), failures)
    monkeypatch.setattr(runner, "get_storage", lambda _settings: flaky)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    assert flaky.fetches == fetches
    view = client.get(f"/v1/jobs/{job_id}").json()
    assert view["resumed_from"] == (stored if resumes else None)
    reasons = [e["reason"] for e in client.get(f"/v1/jobs/{job_id}/history").json()["items"]]
    assert (f"resumed from the checkpoint at iteration {stored}" in reasons) is resumes
    progress = client.get(f"/v1/jobs/{job_id}/progress").json()["items"]
    assert (progress[0]["iteration"] > stored) is resumes  # counted on, or from pass 1
    coef, model = model_coef(db, job_id)
    straight = LinearSVC(**PARAMS).fit(*read_libsvm(HEART)[:2])
    assert model.status == "converged"
    np.testing.assert_allclose(coef[0], straight.coef_[0], atol=1e-4)


def test_a_checkpoint_read_gives_up_within_its_tries_and_at_once_on_a_bad_file(
    tmp_path, monkeypatch
):
    from app import storage
    from app.jobs.checkpoint import READ_DELAY_S, READ_TRIES, Checkpoint
    from app.storage import FileStorage

    slept, real_sleep = [], time.sleep  # the waits between tries, as asked
    reader = threading.current_thread()  # time.sleep is the process's: other threads' are not

    def sleep(seconds):
        if threading.current_thread() is reader:
            slept.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(storage.time, "sleep", sleep)
    inner, key = FileStorage(tmp_path / "store"), checkpoint_key("job_x", 1)
    Checkpoint(np.arange(5.0), np.ones((1, 3)), np.zeros(1), 7, 1.5).save(inner, key, tmp_path)
    down = FlakyStore(inner, float("inf"))
    began = time.monotonic()
    with pytest.raises(StorageUnavailable):
        Checkpoint.load(down, key, tmp_path)
    waited = time.monotonic() - began
    backoff = READ_DELAY_S * sum(range(1, READ_TRIES))  # 0.5 s, then 1 s
    assert down.fetches == READ_TRIES and backoff <= waited < backoff + 2.0
    assert slept == [READ_DELAY_S * n for n in range(1, READ_TRIES)]
    assert [p.name for p in tmp_path.iterdir()] == ["store"]  # no scratch file left

    hiccup = FlakyStore(inner, 1)
    back = Checkpoint.load(hiccup, key, tmp_path)
    assert hiccup.fetches == 2 and (back.iteration, back.elapsed_s) == (7, 1.5)
    np.testing.assert_array_equal(back.alpha, np.arange(5.0))

    inner.local_path(key).write_bytes(b"PK\x03\x04 not a checkpoint")
    bad = FlakyStore(inner, 0)
    slept.clear()
    with pytest.raises(Exception) as raised:
        Checkpoint.load(bad, key, tmp_path)
    assert not isinstance(raised.value, StorageUnavailable)
    # one read and no wait (before: a wall-clock bound of READ_DELAY_S, 0.5 s, on the read)
    assert bad.fetches == 1 and slept == []


def test_a_calibration_cut_short_by_a_cancel_says_so(app, client, db, heart, fake_trainer):
    # probability=true cancelled with keep_model=true before its folds were scored: the model
    # serves labels, and a request for probabilities was told it "ran out of time"
    fake_trainer(n_iter=400, delay=0.02)
    body = {"dataset_id": heart["id"], "params": {"tol": 1e-30, "probability": True}}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    runner = threading.Thread(target=lambda: run_job(job_id, RunContext(app.state.settings, db)))
    runner.start()
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job_id}").json()["progress"] is None:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert client.post(f"/v1/jobs/{job_id}/cancel", params={"keep_model": True}).status_code == 202
    runner.join(30)
    model = client.get(f"/v1/jobs/{job_id}").json()["model_id"]
    assert client.get(f"/v1/models/{model}").json()["status"] == "stopped"
    refused = client.post(f"/v1/models/{model}/predict",
                          json={"instances": [[0.0] * 13], "probabilities": True})  # fmt: skip
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert "cancelled" in detail and "ran out of time" not in detail
