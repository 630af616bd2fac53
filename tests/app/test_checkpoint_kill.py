"""A worker SIGKILLed in the middle of a checkpointing job, on SQLite and PostgreSQL: the pool
re-queues the job (JOB_RETRIES), the next attempt resumes from the stored checkpoint (its history
says so and its first pass is counted past the checkpoint's), the job succeeds and its checkpoint
is removed; the model is certified against a cold solve of the same problem by the duality gap.

A real pool (`tests.app.pool_process`, as `margin worker` runs it) on the test's database; the
worker is the pool's spawned child that claimed the job."""

from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import pytest
from sqlalchemy import select

from app.config import Settings
from app.jobs.checkpoint import Checkpoint
from app.jobs.workers import WorkerId
from app.services.model_cache import model_from_row
from app.storage import checkpoint_key, get_storage, job_checkpoints
from app.tables import Job, JobProgress, Model
from solvers import LinearSVC, read_libsvm
from tests.app import pool_process
from tests.reliability.helpers import write_classification_file

pytestmark = pytest.mark.timeout(900)
# A hinge-loss solve of about two seconds on one thread (dense, overlapping classes; about 51,000
# passes, duality gap 1.7e-8 at the end); tol is the solver's stopping rule on the projected
# gradients. (At tol 1e-5 it took 215,000 passes, and this test paid them twice per database.)
PARAMS = {"loss": "hinge", "C": 1.0, "tol": 3e-5, "max_iter": 10**7}
N_ROWS, N_FEATURES = 20_000, 20
CHECKPOINT_S = 0.3
# The worker is killed once a checkpoint of this pass or later is stored. The checkpoints come
# by the clock: at a load average of about 9 the first held pass 28 (gap 3.7), and the resumed
# attempt's first gap could not be a tenth of the cold first pass's (6.45) as asserted. This
# solve's gap stays under 0.24 from pass 300 on.
KILL_FROM_PASS = 300
# The waits are for conditions, so their bounds only need to be far beyond a loaded machine's
# times: at a load average of 20 on two cores each worker took 16 s to warm its kernels and the
# resumed solve had not ended 93 s after it started (a wait of 120 s from the kill failed there).


@pytest.fixture
def settings(tmp_path, db_url) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        progress_interval_s=0.05,
        max_upload_mb=8,
        checkpoint_s=CHECKPOINT_S,
        job_retries=1,
        solver_threads=1,
    )


def _job(db, job_id: str) -> Job:
    with db.session() as session:
        return session.get(Job, job_id)


def _wait(db, job_id: str, pool, log_path, holds, what: str, timeout: float = 300.0) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        job = _job(db, job_id)
        if holds(job):
            return job
        assert pool.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, f"{what}: {job.status}\n{log_path.read_text()}"
        time.sleep(0.02)


def _primal(coef: np.ndarray, intercept: float, X, y, C: float, bias: float = 1.0) -> float:
    """The hinge-loss primal of LIBLINEAR's formulation: the bias is a feature of value `bias`
    whose weight (intercept / bias) is regularised with the others."""
    margins = y * (X @ coef + intercept)
    w_bias = intercept / bias
    return 0.5 * (coef @ coef + w_bias * w_bias) + C * np.maximum(0.0, 1.0 - margins).sum()


def test_a_killed_worker_s_job_resumes_from_its_checkpoint(app, client, db, tmp_path):
    settings = app.state.settings
    path = write_classification_file(tmp_path / "overlap.txt", N_ROWS, N_FEATURES)
    uploaded = client.post("/v1/datasets", files={"file": ("overlap.txt", path.read_bytes())})
    assert uploaded.status_code == 201, uploaded.text
    body = {"dataset_id": uploaded.json()["id"], "params": PARAMS}
    job_id = client.post("/v1/jobs", json=body).json()["id"]
    log_path = tmp_path / "pool.log"
    pool = pool_process.start(settings, log_path)
    storage, key = get_storage(settings), checkpoint_key(job_id, 1)
    try:
        running = _wait(
            db, job_id, pool, log_path,
            lambda j: j.status == "running"
            and (j.checkpoint_iteration or 0) >= KILL_FROM_PASS
            and storage.exists(key),
            f"no checkpoint of pass {KILL_FROM_PASS} or later",
        )  # fmt: skip
        worker = WorkerId.parse(running.worker).pid
        os.kill(worker, signal.SIGKILL)
        while pool_process.running(worker):
            time.sleep(0.01)
        # what the killed worker left (the next one takes seconds to start and warm up)
        left = Checkpoint.load(storage, key, settings.data_dir / "tmp")
        done = _wait(
            db, job_id, pool, log_path, lambda j: j.status not in ("queued", "running"), "stuck"
        )
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.wait(60)
    log = log_path.read_text()
    assert (done.status, done.attempt) == ("succeeded", 2), log
    history = client.get(f"/v1/jobs/{job_id}/history").json()["items"]
    reasons = [e["reason"] for e in history]
    died = "the worker process running the job died (signal 9)"
    assert reasons[2] == f"attempt 1 ended: {died}; re-queued"
    # the second attempt started from the checkpoint the killed worker left
    resumed = done.resumed_from
    assert resumed == left.iteration > 0
    assert f"resumed from the checkpoint at iteration {resumed}" in reasons
    with db.session() as session:
        rows = session.execute(
            select(JobProgress.attempt, JobProgress.iteration, JobProgress.gap)
            .where(JobProgress.job_id == job_id)
            .order_by(JobProgress.id)
        ).all()
        model = session.query(Model).filter_by(job_id=job_id).one()
        trained = model_from_row(model)
    cold_start = next(r for r in rows if r.attempt == 1)
    warm_start = next(r for r in rows if r.attempt == 2)
    assert cold_start.iteration == 1
    assert warm_start.iteration == resumed + 1  # its passes counted on from the checkpoint's,
    assert warm_start.gap < cold_start.gap / 10  # from its iterate: a cold first pass is far off
    assert storage.list(job_checkpoints(job_id)) == []  # every attempt's removed

    # certified against a cold solve: P(w) - P* <= P(w) - D(alpha_cold), and the primal's
    # strong convexity gives |w - w*| <= sqrt(2 (P(w) - P*)) for each of the two models
    X, y = read_libsvm(path)[:2]
    cold = LinearSVC(**PARAMS, n_jobs=1).fit(X, y)
    assert model.status == cold.status_ == "converged"
    dual = cold.objective_ - cold.duality_gap_ * max(1.0, abs(cold.objective_))
    ours = _primal(trained.coef[0], float(trained.intercept[0]), X, y, PARAMS["C"])
    theirs = _primal(cold.coef_[0], float(cold.intercept_[0]), X, y, PARAMS["C"])
    assert math.isclose(theirs, cold.objective_, rel_tol=1e-9)  # the same primal as the solver's
    assert (ours - dual) / ours < 1e-6, (ours, dual)
    bound = math.sqrt(2 * (ours - dual)) + math.sqrt(2 * (theirs - dual))
    ours_w = np.append(trained.coef[0], trained.intercept[0])
    cold_w = np.append(cold.coef_[0], cold.intercept_[0])
    assert np.linalg.norm(ours_w - cold_w) <= bound
    decision = X @ trained.coef[0] + trained.intercept[0]
    agree = np.mean((decision > 0) == (cold.decision_function(X) > 0))
    print(f"resumed at {resumed}; |w - w_cold| {np.linalg.norm(ours_w - cold_w):.2e}"
          f" <= {bound:.2e}; gap {(ours - dual) / ours:.1e}; predictions agree {agree:.5f}")
    assert agree > 0.999
