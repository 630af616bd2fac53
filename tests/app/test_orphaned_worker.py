"""A pool worker whose pool process is SIGKILLed while its solver is inside a long call that never
asks the callback (so it hears no shutdown): the worker exits by itself WORKER_ORPHAN_EXIT_S later,
not at the end of the solve, and the next pool's reaper re-queues its job (JOB_RETRIES) as for a
killed worker. On SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import time

import pytest

from app.jobs.queue import LocalQueue
from app.jobs.recovery import Reaper
from app.jobs.workers import WorkerId
from app.tables import Job
from tests.app import pool_process

pytestmark = pytest.mark.timeout(300)
# WORKER_ORPHAN_EXIT_S of the test's pool: under the default (10 s) by more than SLACK_S, so that
# a worker that kept the default fails the test.
ORPHAN_EXIT_S = 3.0
# Beyond ORPHAN_EXIT_S: seeing the pool's death, the exit and this test's next look at /proc,
# on a loaded machine. The stalling solver would run an hour.
SLACK_S = 5.0


def _running_job(db, job_id: str, pool, log_path, timeout: float = 180.0) -> Job:
    deadline = time.monotonic() + timeout
    while True:
        with db.session() as session:
            job = session.get(Job, job_id)
        if job.status == "running":
            return job
        assert pool.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, f"never ran: {job.status}\n{log_path.read_text()}"
        time.sleep(0.1)


def test_an_orphaned_worker_stuck_in_its_solver_exits_and_its_job_is_requeued(
    app, client, db, heart, tmp_path
):
    update = {"job_retries": 1, "worker_orphan_exit_s": ORPHAN_EXIT_S}
    settings = app.state.settings.model_copy(update=update)
    job_id = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()["id"]
    log_path = tmp_path / "pool.log"
    pool = pool_process.start(settings, log_path, **{pool_process.STALLING_TRAINER_ENV: "1"})
    worker_pid = None
    try:
        job = _running_job(db, job_id, pool, log_path)
        worker_pid = WorkerId.parse(job.worker).pid
        assert worker_pid != pool.pid and pool_process.running(worker_pid)
        pool.kill()
        pool.wait()
        killed = time.monotonic()
        while pool_process.running(worker_pid):
            waited = time.monotonic() - killed
            assert waited < ORPHAN_EXIT_S + SLACK_S, log_path.read_text()
            time.sleep(0.05)
        waited = time.monotonic() - killed
        log = log_path.read_text()
        # it first shut down as at SIGTERM, then gave up on the solver WORKER_ORPHAN_EXIT_S later
        assert "the pool process is gone; stopping" in log
        assert f"still running {ORPHAN_EXIT_S:g} s after the pool process died" in log
        assert waited >= ORPHAN_EXIT_S - 1.0
        with db.session() as session:
            left = session.get(Job, job_id)
        assert (left.status, left.worker, left.attempt) == ("running", job.worker, 1)

        # the next pool's reaper, at its start: the worker is dead on this host (gone, or a
        # zombie not yet reaped: both count)
        reaper = Reaper(db, settings, LocalQueue(), actor="pool@next")
        assert reaper.run_once() == {job_id: "queued"}
        view = client.get(f"/v1/jobs/{job_id}").json()
        assert (view["status"], view["attempt"]) == ("queued", 1)
        assert view["error"] == (
            "attempt 1 ended: the worker process running the job is gone; re-queued"
        )
    finally:
        if pool.poll() is None:
            pool.kill()
            pool.wait()
        if worker_pid is not None and pool_process.running(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)
