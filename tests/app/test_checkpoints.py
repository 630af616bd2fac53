"""Checkpoints of a running job's iterate (CHECKPOINT_S), a retried attempt that resumes from the
last one and says so in its history, and cancel?keep_model=true."""

from __future__ import annotations

import threading
import time
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest

from app.jobs.runner import RunContext, run_job
from app.storage import StorageUnavailable, checkpoint_key, get_storage, job_checkpoints
from app.tables import Job, Model
from solvers import LinearSVC, read_libsvm
from tests.app.conftest import HEART

PARAMS = {"C": 4.0, "tol": 1e-6, "max_iter": 100000}


class StopAfter(threading.Event):
    """A shutdown signal that turns on after `n` looks (the worker is stopped mid-solve)."""

    def __init__(self, n: int):
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0 or super().is_set()


def _job(client, heart, **params):
    body = {"dataset_id": heart["id"], "params": {**PARAMS, **params}}
    return client.post("/v1/jobs", json=body).json()["id"]


def _stored(settings, job_id) -> list[str]:
    """The keys of the job's checkpoints, of every attempt."""
    return [obj.key for obj in get_storage(settings).list(job_checkpoints(job_id))]


def _coef(db, job_id):
    with db.session() as session:
        model = session.query(Model).filter_by(job_id=job_id).one()
        from app.services.model_cache import model_from_row

        return model_from_row(model).coef, model


def test_a_job_checkpoints_and_ends_at_the_uninterrupted_optimum(app, client, db, heart):
    settings = app.state.settings
    settings.checkpoint_s = 1e-4  # a checkpoint at (nearly) every iteration
    job_id = _job(client, heart)
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    with db.session() as session:
        job = session.get(Job, job_id)
    assert job.checkpoint_iteration is not None and job.checkpoint_iteration >= 3
    assert _stored(settings, job_id) == []  # removed once done
    coef, model = _coef(db, job_id)
    X, y = read_libsvm(HEART)[:2]
    straight = LinearSVC(**PARAMS).fit(X, y)
    assert model.status == "converged" and model.n_iter >= job.checkpoint_iteration
    np.testing.assert_allclose(coef[0], straight.coef_[0], atol=1e-4)


def test_a_retried_job_resumes_from_its_checkpoint(app, client, db, heart):
    settings = app.state.settings
    settings.checkpoint_s = 1e-4
    job_id = _job(client, heart)
    first = RunContext(settings, db, shutdown=StopAfter(6))
    assert run_job(job_id, first) == "queued"  # stopped at shutdown: handed back
    with db.session() as session:
        job = session.get(Job, job_id)
    stored = job.checkpoint_iteration
    assert stored and _stored(settings, job_id) == [checkpoint_key(job_id, 1)]
    assert run_job(job_id, RunContext(settings, db)) == "succeeded"
    view = client.get(f"/v1/jobs/{job_id}").json()
    assert view["resumed_from"] == stored
    reasons = [e["reason"] for e in client.get(f"/v1/jobs/{job_id}/history").json()["items"]]
    assert f"resumed from the checkpoint at iteration {stored}" in reasons
    coef, model = _coef(db, job_id)
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
    settings.checkpoint_s = 1e-4
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


def test_a_job_that_fails_after_checkpointing_leaves_no_checkpoint(
    app, client, db, heart, monkeypatch
):
    # only a success removed the checkpoint: a job failed after storing one kept it for good
    from app.jobs import runner

    settings = app.state.settings
    settings.checkpoint_s = 1e-4
    job_id = _job(client, heart)

    def scoring_fails(*args):
        raise RuntimeError("scoring failed")

    monkeypatch.setattr(runner, "_scores", scoring_fails)
    assert run_job(job_id, RunContext(settings, db)) == "failed"
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration is not None  # one was stored
    assert _stored(settings, job_id) == []


def test_a_job_cancelled_while_checkpointing_leaves_no_checkpoint(
    app, client, db, heart, monkeypatch
):
    from app.jobs import lifecycle
    from app.jobs.queue import LocalQueue
    from app.services import trainers

    settings = app.state.settings
    settings.checkpoint_s = 1e-4
    job_id = _job(client, heart)
    train = trainers.TRAINERS["LinearSVC"]
    calls = []

    def cancelled_on_its_tenth_pass(params, X, y, qid, callback, n_jobs, init_dual=None):
        def cancelling(progress):
            calls.append(progress.iteration)
            if len(calls) == 10:  # cancel, and stop as the callback does once its watch
                with db.write() as session:  # sees it (no wait on the watch's 0.2 s polls)
                    job = session.get(Job, job_id, with_for_update=True)
                    assert lifecycle.cancel(session, LocalQueue(), job)
                return False
            return callback(progress)

        return train(params, X, y, qid, cancelling, n_jobs, init_dual=init_dual)

    cancelled_on_its_tenth_pass.resumable = True
    monkeypatch.setitem(trainers.TRAINERS, "LinearSVC", cancelled_on_its_tenth_pass)
    assert run_job(job_id, RunContext(settings, db)) == "cancelled"
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration is not None  # one was stored
    assert _stored(settings, job_id) == []


def test_the_retention_pass_removes_checkpoints_of_jobs_that_will_not_run(
    app, client, db, heart, tmp_path, monkeypatch
):
    # a job failed or cancelled by the reaper, cancelled while queued, or deleted by retention
    # kept its checkpoint for good; those of queued and running jobs are resumed, and stay
    from sqlalchemy import update

    from app.jobs import recovery
    from app.jobs.checkpoint import Checkpoint
    from app.jobs.queue import LocalQueue
    from app.jobs.recovery import Reaper

    settings = app.state.settings
    statuses = ("queued", "running", "succeeded", "failed", "cancelled")
    ids = {status: _job(client, heart) for status in statuses}
    with db.write() as session:
        for status, job_id in ids.items():
            session.execute(update(Job).where(Job.id == job_id).values(status=status))
    storage = get_storage(settings)
    point = Checkpoint(np.ones(3), np.ones((1, 2)), np.zeros(1), 5, 0.5)

    def keys(job_id):  # attempts 1 and 2, and one stored before keys named the attempt
        return {checkpoint_key(job_id, 1), checkpoint_key(job_id, 2), f"checkpoints/{job_id}.npz"}

    for job_id in [*ids.values(), "job_deleted"]:
        for key in keys(job_id):
            point.save(storage, key, tmp_path)

    storage.store_file(_file(tmp_path / "other"), "checkpoints/notes.txt")  # not a checkpoint
    monkeypatch.setattr(recovery, "CHECKPOINT_BATCH", 2)  # the jobs asked for in three queries
    Reaper(db, settings, LocalQueue(), actor="pool@test").run_once()
    left = {obj.key for obj in storage.list("checkpoints/")}
    kept = keys(ids["queued"]) | keys(ids["running"])
    assert left == kept | {"checkpoints/notes.txt"}


def _file(path):
    path.write_text("not a checkpoint")
    return path


def _left_by_a_dead_process(tmp):
    """A partial checkpoint file in `tmp`, written by a process that is gone (as a worker killed
    mid-save is)."""
    import subprocess
    import sys
    from pathlib import Path

    tmp.mkdir(parents=True, exist_ok=True)
    writes = (
        "import sys; from pathlib import Path; from app.jobs.checkpoint import scratch_file; "
        "path = scratch_file(Path(sys.argv[1])); path.write_bytes(b'PK partial'); print(path)"
    )
    made = subprocess.run(
        [sys.executable, "-c", writes, str(tmp)], check=True, capture_output=True, text=True
    )
    left = Path(made.stdout.strip())
    assert left.parent == tmp and left.exists()
    return left


def _in_flight(tmp):
    """A temporary file of this (live) process: no sweep may take it."""
    from app.services.uploads import temp_name

    path = tmp / temp_name("upload")
    path.write_bytes(b"in flight")
    return path


def test_a_partial_checkpoint_file_of_a_killed_worker_is_swept(app, db):
    # a worker killed while saving left `checkpoint-<ns>.npz` in tmp/, which the sweep could not
    # tie to a process: it stayed a day, however large the dual state
    from app.services.sweep import sweep_partial_uploads

    left = _left_by_a_dead_process(app.state.settings.data_dir / "tmp")
    assert str(left) in sweep_partial_uploads(app.state.settings, db)
    assert not left.exists()


def test_a_local_pool_sweeps_its_host_s_temp_files_at_its_start(app, tmp_path):
    # only the API swept tmp/ at its start: a worker-only host (`margin worker`) kept the
    # partial checkpoints of its killed workers for a day
    from tests.app import pool_process

    settings = app.state.settings  # no API started here (no client): nothing else sweeps
    tmp = settings.data_dir / "tmp"
    left, mine = _left_by_a_dead_process(tmp), _in_flight(tmp)
    log_path = tmp_path / "pool.log"
    pool = pool_process.start(settings, log_path)
    try:
        deadline = time.monotonic() + 60
        while left.exists():
            assert pool.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
    finally:
        pool.terminate()
        try:
            pool.wait(30)
        except Exception:
            pool.kill()
            pool.wait()
    assert mine.exists()


def test_a_procrastinate_worker_sweeps_its_host_s_temp_files_at_its_start(
    app, monkeypatch, tmp_path
):
    from app.jobs import procrastinate_queue

    settings = app.state.settings
    tmp = settings.data_dir / "tmp"
    left, mine = _left_by_a_dead_process(tmp), _in_flight(tmp)
    seen = []

    async def serve(settings, on_ready):  # the worker's loop, once the start is done
        seen.append(sorted(tmp.iterdir()))

    monkeypatch.setattr(procrastinate_queue, "_serve", serve)
    monkeypatch.setattr(procrastinate_queue, "_configure_threads", lambda settings: None)
    monkeypatch.setattr("app.logs.configure", lambda *args, **kwargs: None)
    procrastinate_queue.run_worker(settings)
    assert seen == [[mine]] and not left.exists()


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
    settings.checkpoint_s = 1e-4
    job_id = _job(client, heart)
    assert run_job(job_id, RunContext(settings, db, shutdown=StopAfter(6))) == "queued"
    with db.session() as session:
        stored = session.get(Job, job_id).checkpoint_iteration
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
    coef, model = _coef(db, job_id)
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


def test_an_attempt_taken_away_does_not_overwrite_the_next_attempt_s_checkpoint(
    app, client, db, heart, monkeypatch
):
    # an attempt re-queued while its worker was cut off from the database trains on and
    # checkpoints: it is refused once the job is another attempt's, but one taken away during
    # its save (after the check) wrote the job's one key, over the checkpoint of the attempt
    # running after it, and a third attempt resumed from the stale iterate
    from app.jobs import lifecycle, runner
    from app.jobs.checkpoint import Checkpoint
    from app.jobs.queue import LocalQueue

    settings = app.state.settings
    job_id = _job(client, heart)
    ctx, queue = RunContext(settings, db), LocalQueue()

    def take_over(worker):
        with db.write() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job.status == "running":
                outcome = lifecycle.requeue_or_fail(session, queue, job, "silent", 5, "pool")
                assert outcome == "queued"
        with db.write() as session:
            return lifecycle.claim(session, job_id, worker)

    first = take_over("host:1:aaaa")
    ours = Checkpoint(np.full(270, 0.5), np.ones((1, 13)), np.zeros(1), 50, 1.0)
    stale = Checkpoint(np.full(270, 0.1), np.ones((1, 13)), np.zeros(1), 80, 2.0)
    save = Checkpoint.save
    second = []

    def slow_save(point, storage, key, scratch):
        if point is stale:  # checked and current; taken away while it saves
            second.append(take_over("host:2:bbbb"))
            runner._store_checkpoint(ctx, second[0], ours)
        save(point, storage, key, scratch)

    monkeypatch.setattr(Checkpoint, "save", slow_save)
    runner._store_checkpoint(ctx, first, stale)  # the lost attempt's save lands last
    third = take_over("host:3:cccc")
    with db.session() as session:
        job = session.get(Job, job_id)
    start = runner._segments(ctx, third, job).start
    assert start.iteration == 50  # the second attempt's, not the stale one stored after it
    np.testing.assert_array_equal(start.alpha, ours.alpha)
    assert client.get(f"/v1/jobs/{job_id}").json()["resumed_from"] == 50

    runner._store_checkpoint(ctx, third, replace(ours, iteration=60))
    assert _stored(settings, job_id) == [checkpoint_key(job_id, 3)]  # the earlier ones removed
    with db.write() as session:
        assert lifecycle.succeed(session, third, "converged", True)
    runner._drop_checkpoint(ctx, job_id)  # as the third attempt's worker does at the end
    runner._store_checkpoint(ctx, first, stale)  # after the job ended: refused
    assert _stored(settings, job_id) == []


class CountingStore:
    """A store that counts its listings and deletions, and fails the next `fail_deletes`."""

    def __init__(self, inner):
        self.inner, self.lists, self.deletes, self.fail_deletes = inner, 0, 0, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def list(self, prefix):
        self.lists += 1
        return self.inner.list(prefix)

    def delete(self, key):
        self.deletes += 1
        if self.fail_deletes:
            self.fail_deletes -= 1
            raise StorageUnavailable("store away")
        self.inner.delete(key)


def test_an_attempt_removes_the_earlier_attempts_checkpoints_once(
    app, client, db, heart, monkeypatch
):
    # every checkpoint listed the store to remove the earlier attempts' files, which are gone
    # after the attempt's first: now the first stored checkpoint removes them, the next ones
    # list nothing (and a removal that failed is tried again at the next checkpoint)
    from app.jobs import lifecycle, runner
    from app.jobs.checkpoint import Checkpoint
    from app.jobs.queue import LocalQueue

    settings = app.state.settings
    job_id = _job(client, heart)
    ctx, queue = RunContext(settings, db), LocalQueue()
    store = CountingStore(get_storage(settings))
    monkeypatch.setattr(runner, "get_storage", lambda _settings: store)
    point = Checkpoint(np.full(270, 0.5), np.ones((1, 13)), np.zeros(1), 50, 1.0)

    def attempt_saves(worker):
        """The `on_checkpoint` of a new attempt of the job, with the store's counts at zero."""
        with db.write() as session:
            job = session.get(Job, job_id, with_for_update=True)
            if job.status == "running":
                assert lifecycle.requeue_or_fail(session, queue, job, "silent", 5, "pool")
        with db.write() as session:
            attempt = lifecycle.claim(session, job_id, worker)
        with db.session() as session:
            on_checkpoint = runner._segments(ctx, attempt, session.get(Job, job_id)).on_checkpoint
        store.lists = store.deletes = 0
        return on_checkpoint

    first = attempt_saves("host:1:aaaa")
    first(point)
    first(replace(point, iteration=51))
    assert (store.lists, store.deletes) == (1, 0)  # no earlier attempt: one look, none since
    assert _stored(settings, job_id) == [checkpoint_key(job_id, 1)]

    second = attempt_saves("host:2:bbbb")
    second(replace(point, iteration=52))
    assert (store.lists, store.deletes) == (1, 1)
    assert _stored(settings, job_id) == [checkpoint_key(job_id, 2)]  # the first's removed
    for iteration in (53, 54):
        second(replace(point, iteration=iteration))
    assert (store.lists, store.deletes) == (1, 1)  # not listed nor deleted again
    assert _stored(settings, job_id) == [checkpoint_key(job_id, 2)]

    third = attempt_saves("host:3:cccc")
    store.fail_deletes = 1
    third(replace(point, iteration=55))  # stored; the second's file could not be removed
    assert _stored(settings, job_id) == [checkpoint_key(job_id, n) for n in (2, 3)]
    third(replace(point, iteration=56))  # so this checkpoint removes it
    third(replace(point, iteration=57))
    assert (store.lists, store.deletes) == (2, 2)
    assert _stored(settings, job_id) == [checkpoint_key(job_id, 3)]
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration == 57
