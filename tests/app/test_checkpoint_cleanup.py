"""Checkpoint files that must not outlive their use: a job that ends other than by success
removes its checkpoint, the reaper's retention pass removes those of jobs that will not run, and
the partial file of a worker killed mid-save is swept at the start of the API or a worker."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from app.jobs.runner import RunContext, run_job
from app.services import prediction_csv
from app.storage import checkpoint_key, get_storage
from app.tables import Job
from tests.app.checkpoint_helpers import (
    checkpoint_every_segment,
    in_flight,
    left_by_a_dead_process,
    new_job,
    stored_keys,
)


def test_a_job_that_fails_after_checkpointing_leaves_no_checkpoint(
    app, client, db, heart, monkeypatch
):
    # only a success removed the checkpoint: a job failed after storing one kept it for good
    from app.jobs import runner

    settings = app.state.settings
    checkpoint_every_segment(settings)
    job_id = new_job(client, heart, max_iter=20)  # a few checkpoints, not the ~1,800 passes

    def scoring_fails(*args):
        raise RuntimeError("scoring failed")

    monkeypatch.setattr(runner, "_scores", scoring_fails)
    assert run_job(job_id, RunContext(settings, db)) == "failed"
    with db.session() as session:
        assert session.get(Job, job_id).checkpoint_iteration is not None  # one was stored
    assert stored_keys(settings, job_id) == []


def test_a_job_cancelled_while_checkpointing_leaves_no_checkpoint(
    app, client, db, heart, monkeypatch
):
    from app.jobs import lifecycle
    from app.jobs.queue import LocalQueue
    from app.services import trainers

    settings = app.state.settings
    checkpoint_every_segment(settings)
    job_id = new_job(client, heart)
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
    assert stored_keys(settings, job_id) == []


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
    ids = {status: new_job(client, heart) for status in statuses}
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


def test_a_partial_checkpoint_file_of_a_killed_worker_is_swept(app, db):
    # a worker killed while saving left `checkpoint-<ns>.npz` in tmp/, which the sweep could not
    # tie to a process: it stayed a day, however large the dual state
    from app.services.sweep import sweep_partial_uploads

    left = left_by_a_dead_process(app.state.settings.data_dir / "tmp")
    assert str(left) in sweep_partial_uploads(app.state.settings, db)
    assert not left.exists()


def test_a_local_pool_sweeps_its_host_s_temp_files_at_its_start(app, tmp_path):
    # only the API swept tmp/ at its start: a worker-only host (`margin worker`) kept the
    # partial checkpoints of its killed workers for a day
    from tests.app import pool_process

    settings = app.state.settings  # no API started here (no client): nothing else sweeps
    tmp = settings.data_dir / "tmp"
    left, mine = left_by_a_dead_process(tmp), in_flight(tmp)
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
    left, mine = left_by_a_dead_process(tmp), in_flight(tmp)
    seen = []

    async def serve(settings, on_ready):  # the worker's loop, once the start is done
        seen.append(sorted(tmp.iterdir()))

    monkeypatch.setattr(procrastinate_queue, "_serve", serve)
    monkeypatch.setattr(procrastinate_queue, "_configure_threads", lambda settings: None)
    monkeypatch.setattr("app.logs.configure", lambda *args, **kwargs: None)
    procrastinate_queue.run_worker(settings)
    assert seen == [[mine]] and not left.exists()


def test_a_prediction_runs_csv_of_a_killed_api_process_is_swept(app, db):
    """An API process killed while a background prediction run wrote its CSV left
    `tmp/<run id>.csv.part` (or the whole `tmp/<run id>.csv`, between its rename and its
    upload), a name the sweep could not tie to a process: kept a day, up to the whole CSV's
    size, when the run was then failed (its retries spent) rather than run again."""
    from app.services.sweep import sweep_partial_uploads

    tmp = app.state.settings.data_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    writes = (
        "import sys; from pathlib import Path; "
        "from app.services.prediction_csv import staging_path; "
        "whole = staging_path(Path(sys.argv[1]), 'pred_0123456789abcdef'); "
        "part = whole.with_suffix('.csv.part'); "
        "part.write_text('row,label\\n0,1\\n'); whole.write_text('row,label\\n'); "
        "print(part); print(whole)"
    )
    made = subprocess.run(
        [sys.executable, "-c", writes, str(app.state.settings.data_dir)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    left = [Path(line) for line in made.stdout.split()]
    assert all(path.parent == tmp and path.exists() for path in left)
    mine = prediction_csv.staging_path(app.state.settings.data_dir, "pred_fedcba9876543210")
    mine.with_suffix(".csv.part").write_text("row,label\n")  # a run of this live process
    removed = sweep_partial_uploads(app.state.settings, db)
    assert sorted(removed) == sorted(str(path) for path in left)
    assert not any(path.exists() for path in left)
    assert mine.with_suffix(".csv.part").exists()
