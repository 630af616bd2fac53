"""The procrastinate backend on a real PostgreSQL: `margin worker` processes, as deployed.

Each module gets a fresh database migrated by our Alembic history (which also installs the queue's
schema). Jobs are created through the same service function the API calls, so the job row and its
queue entry commit together; workers are real `margin worker` subprocesses.
"""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import pytest
from sqlalchemy import delete, func, select, text

from app import migrate
from app.config import Settings
from app.db import Database
from app.jobs import lifecycle
from app.jobs.procrastinate_queue import ProcrastinateQueue
from app.jobs.workers import WorkerId
from app.schemas.jobs import JobCreate
from app.services.dataset_commit import import_file
from app.services.jobs import cancel_job, create_job
from app.tables import Job, JobProgress, Model, Worker, utcnow
from tests.deploy.cluster import FreshDatabase, Processes, wait_for, write_regression_file

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(420)]

TERMINAL = ("succeeded", "failed", "cancelled")
# Seconds to wait for started workers to register: each imports the stack and loads every kernel
# from the cache first, several seconds of CPU apiece, longer on a busy machine.
REGISTER_S = 150
# A job that keeps the solver busy until its time limit (an unreachable tolerance).
LONG = {"tol": 1e-12, "max_iter": 10_000_000, "time_limit": 30.0}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    database = FreshDatabase()
    root = tmp_path_factory.mktemp("cluster")
    env = {
        "DATABASE_URL": database.url,
        "DATA_DIR": str(root / "data"),
        "WORKER_BACKEND": "procrastinate",
        "WORKER_CONCURRENCY": "1",
        "SOLVER_THREADS": "1",
        "JOB_RETRIES": "1",
        "JOB_STALL_S": "10",
        "PROGRESS_INTERVAL_S": "0.1",
        "WORKER_SHUTDOWN_TIMEOUT_S": "1",
    }
    migrate.upgrade(database.url)
    settings = Settings(database_url=database.url, data_dir=root / "data")
    settings.ensure_dirs()
    db = Database(database.url)
    datasets = {}
    for name, rows, cols in (("small", 300, 10), ("large", 4000, 30), ("long", 20000, 40)):
        path = write_regression_file(root / f"{name}.svm", rows, cols, seed=rows)
        datasets[name] = import_file(db, settings, path, name)[0].id
    procs = Processes(root, env)
    try:
        yield Cluster(db, datasets, procs, settings)
    finally:
        procs.close()
        db.dispose()
        database.drop()


@pytest.fixture(autouse=True)
def no_worker_outlives_its_test(cluster):
    """A test that fails before its own stop_all leaves no worker to take the next test's jobs."""
    started_before = len(cluster.procs.procs)
    yield
    cluster.stop_all(cluster.procs.procs[started_before:])


class Cluster:
    def __init__(
        self, db: Database, datasets: dict[str, str], procs: Processes, settings: Settings
    ):
        self.db, self.datasets, self.procs, self.settings = db, datasets, procs, settings
        self.queue = ProcrastinateQueue()

    def submit(self, dataset: str, **params) -> str:
        body = JobCreate(dataset_id=self.datasets[dataset], estimator="LinearSVR", params=params)
        return create_job(self.db, self.queue, body, None, self.settings)[0].id

    def workers(self, n: int, **env: str):
        started = [
            self.procs.start("worker", name=f"worker-{i}-{os.urandom(2).hex()}", **env)
            for i in range(n)
        ]
        pids = {p.pid for p in started}

        def registered():
            with self.db.session() as session:
                ids = session.scalars(select(Worker.id))
                return pids <= {WorkerId.parse(w).pid for w in ids}

        wait_for(registered, REGISTER_S, f"{n} workers to register", every=0.2)
        return started

    def job(self, job_id: str) -> Job:
        with self.db.session() as session:
            return session.get(Job, job_id)

    def wait_terminal(self, job_ids, timeout: float):
        def done():
            with self.db.session() as session:
                statuses = session.scalars(select(Job.status).where(Job.id.in_(job_ids))).all()
            return all(s in TERMINAL for s in statuses) and len(statuses) == len(job_ids)

        wait_for(done, timeout, f"{len(job_ids)} jobs to end", every=0.2)

    def entries(self, job_id: str) -> list[str]:
        """Statuses of the job's queue entries (successful ones are deleted)."""
        with self.db.session() as session:
            return list(
                session.scalars(
                    text("SELECT status::text FROM procrastinate_jobs WHERE lock = :j ORDER BY id"),
                    {"j": job_id},
                )
            )

    def stop_all(self, started, sig=signal.SIGTERM):
        for proc in started:
            Processes.stop(proc, sig)


def test_enqueue_commits_with_the_job_row(cluster):
    job_id = cluster.submit("small")
    assert cluster.entries(job_id) == ["todo"]
    # A failed transaction leaves neither the row nor the entry.
    with pytest.raises(RuntimeError), cluster.db.write() as session:
        cluster.queue.enqueue(session, "job_never_committed")
        raise RuntimeError("rollback")
    assert cluster.entries("job_never_committed") == []
    cancel_job(cluster.db, cluster.queue, job_id)  # leave no queued entry for later tests
    assert cluster.entries(job_id) == ["cancelled"]


def _hold(cluster, job_id: str, worker_beat: str = "now() - interval '1 hour'", **row) -> None:
    """Make the job's entry held ('doing') by a procrastinate worker whose last heartbeat is
    `worker_beat`, and set the job row's columns."""
    with cluster.db.write() as session:
        worker = session.scalar(
            text(
                f"INSERT INTO procrastinate_workers (last_heartbeat) VALUES ({worker_beat})"
                " RETURNING id"
            )
        )
        session.execute(
            text("UPDATE procrastinate_jobs SET status = 'doing', worker_id = :w WHERE lock = :j"),
            {"w": worker, "j": job_id},
        )
        job = session.get(Job, job_id)
        for key, value in row.items():
            setattr(job, key, value)


def _reaper(cluster, **settings):
    from app.jobs.procrastinate_queue import make_reaper

    settings = Settings(database_url=cluster.db.url, **settings)
    reaper = make_reaper(cluster.db, settings, "test")
    reaper.connected_since = time.monotonic() - settings.job_stall_s  # reached the db for long
    return reaper


HOUR_AGO = utcnow() - timedelta(hours=1)


@pytest.mark.parametrize(
    "row, expected_status, expected_entries",
    [
        # retries left (JOB_RETRIES=1, first attempt): back in the queue, with a new entry
        (
            {"status": "running", "attempt": 1, "heartbeat_at": HOUR_AGO},
            "queued",
            ["failed", "todo"],
        ),
        # no retry left: failed, with the reason
        ({"status": "running", "attempt": 2, "heartbeat_at": HOUR_AGO}, "failed", ["failed"]),
        # cancel requested while its worker died: cancelled
        (
            {"status": "running", "attempt": 1, "heartbeat_at": HOUR_AGO, "cancel_requested": True},
            "cancelled",
            ["failed"],
        ),
        # fetched but never claimed: a new entry, the row is untouched
        ({"status": "queued", "attempt": 0}, "queued", ["failed", "todo"]),
        # the job had ended (model committed) before its worker died: never run again
        ({"status": "succeeded", "attempt": 1}, "succeeded", ["succeeded"]),
    ],
)
def test_reaper_decides_on_the_job_row(cluster, row, expected_status, expected_entries):
    reaper = _reaper(cluster, job_retries=1, job_stall_s=5)
    job_id = cluster.submit("small")
    _hold(cluster, job_id, **row)
    assert job_id in reaper.run_once()
    job = cluster.job(job_id)
    assert job.status == expected_status
    assert cluster.entries(job_id) == expected_entries
    if expected_status == "failed":
        assert job.error == "no heartbeat from the job's worker for 5 s (attempt 2 of 2)"
    if expected_status == "queued":  # a re-queued job forgets the attempt, keeps its history
        assert (job.worker, job.started_at, job.percent, job.progress) == (None, None, None, None)
    assert job_id not in reaper.run_once(), "handled twice"
    if "todo" in expected_entries:  # leave nothing queued for the tests that start workers
        cancel_job(cluster.db, cluster.queue, job_id)


def test_reaper_leaves_live_attempts_alone_and_gives_lost_jobs_an_entry(cluster):
    reaper = _reaper(cluster, job_stall_s=60)
    running = cluster.submit("small")
    # its procrastinate worker is silent, but the attempt itself beats: not stalled
    _hold(cluster, running, status="running", attempt=1, heartbeat_at=utcnow())
    lost = cluster.submit("small")
    with cluster.db.write() as session:  # the entry vanished (as a late finish once deleted it)
        session.execute(text("DELETE FROM procrastinate_jobs WHERE lock = :j"), {"j": lost})
    assert reaper.run_once() == {lost: "queued again (its queue entry was lost)"}
    assert cluster.entries(running) == ["doing"] and cluster.job(running).status == "running"
    assert cluster.entries(lost) == ["todo"]
    with cluster.db.session() as session:
        events = [(e.from_status, e.to_status) for e in lifecycle.history(session, lost)]
    assert events == [(None, "queued"), ("queued", "queued")]
    # a reaper that has just (re)gained the database judges no heartbeat yet
    fresh = _reaper(cluster, job_stall_s=60)
    fresh.connected_since = None
    with cluster.db.write() as session:
        session.get(Job, running).heartbeat_at = HOUR_AGO
    assert fresh.run_once() == {}
    cancel_job(cluster.db, cluster.queue, lost)
    with cluster.db.write() as session:  # tidy up: as if the job had been cancelled and ended
        session.execute(
            text("UPDATE procrastinate_jobs SET status = 'cancelled' WHERE lock = :j"),
            {"j": running},
        )
        job = session.get(Job, running)
        job.status, job.stop_reason = "cancelled", "cancelled"


@pytest.mark.slow
def test_forty_mixed_jobs_on_four_workers_run_exactly_once(cluster):
    started = cluster.workers(4)
    sizes = ["large" if i % 5 == 0 else "small" for i in range(40)]
    job_ids = [cluster.submit(size, max_iter=200) for size in sizes]
    cluster.wait_terminal(job_ids, timeout=240)
    with cluster.db.session() as session:
        jobs = session.scalars(select(Job).where(Job.id.in_(job_ids))).all()
        models = session.execute(
            select(Model.job_id, func.count())
            .where(Model.job_id.in_(job_ids))
            .group_by(Model.job_id)
        ).all()
        attempts = session.execute(
            select(JobProgress.job_id, func.max(JobProgress.attempt))
            .where(JobProgress.job_id.in_(job_ids))
            .group_by(JobProgress.job_id)
        ).all()
    assert sorted(j.status for j in jobs) == ["succeeded"] * 40, [j.error for j in jobs]
    assert all(j.attempt == 1 for j in jobs), [j.attempt for j in jobs]
    assert dict(models) == {job_id: 1 for job_id in job_ids}
    assert all(max_attempt == 1 for _, max_attempt in attempts)
    assert len({j.worker for j in jobs}) >= 2, "the jobs were not spread over the workers"
    for job_id in job_ids:
        assert cluster.entries(job_id) == [], "a queue entry was left behind"
    cluster.stop_all(started)


@pytest.mark.slow
def test_sigkill_mid_job_is_retried_on_another_worker(cluster):
    started = cluster.workers(2, JOB_STALL_S="2")
    job_id = cluster.submit("long", **{**LONG, "time_limit": 6.0})  # outlasts the kill

    def first_progress():
        job = cluster.job(job_id)
        return job.status == "running" and job.progress is not None and job

    victim_id = wait_for(first_progress, 120, "the job to report progress").worker
    victim = next(p for p in started if WorkerId.parse(victim_id).pid == p.pid)
    Processes.stop(victim, signal.SIGKILL)
    cluster.wait_terminal([job_id], timeout=90)
    job = cluster.job(job_id)
    assert job.status == "succeeded", job.error
    assert job.attempt == 2
    assert job.worker != victim_id
    with cluster.db.session() as session:
        assert session.scalar(select(func.count()).where(Model.job_id == job_id)) == 1
        attempts = session.scalars(
            select(JobProgress.attempt).where(JobProgress.job_id == job_id).distinct()
        ).all()
    assert sorted(attempts) == [1, 2], "both attempts should have reported progress"
    # one entry per attempt: the dead one's closed by the reaper, the second's deleted on success
    assert cluster.entries(job_id) == ["failed"]
    cluster.stop_all([p for p in started if p is not victim])


@pytest.mark.slow
def test_cancel_queued_and_running(cluster):
    (worker,) = cluster.workers(1)
    running = cluster.submit("long", **LONG)
    wait_for(lambda: cluster.job(running).status == "running", 120, "the first job to start")
    queued = cluster.submit("small")  # the only worker is busy: this one waits in the queue
    assert cluster.job(queued).status == "queued"

    cancel_job(cluster.db, cluster.queue, queued)
    assert cluster.entries(queued) == ["cancelled"]
    cancel_job(cluster.db, cluster.queue, running)
    cluster.wait_terminal([running], timeout=20)
    job = cluster.job(running)
    assert (job.status, job.stop_reason) == ("cancelled", "cancelled")
    assert job.model_id is None

    # The worker is free now and still never starts the cancelled queued job.
    other = cluster.submit("small", max_iter=50)
    cluster.wait_terminal([other], timeout=60)
    job = cluster.job(queued)
    assert (job.status, job.attempt, job.started_at) == ("cancelled", 0, None)
    cluster.stop_all([worker])


@pytest.mark.slow
def test_sigterm_releases_the_running_job_for_another_worker(cluster):
    started = cluster.workers(2)
    # 8 s: the job must outlast its first progress (2 s after its start once, on a loaded CI),
    # the SIGTERM and the 1 s of grace; at 3 s it once ended by its time limit within the grace
    job_id = cluster.submit("long", **{**LONG, "time_limit": 8.0})
    holder_id = wait_for(
        lambda: cluster.job(job_id).progress is not None and cluster.job(job_id).worker,
        120,
        "the job to run",
    )
    holder = next(p for p in started if WorkerId.parse(holder_id).pid == p.pid)
    other = next(p for p in started if p is not holder)
    # WORKER_SHUTDOWN_TIMEOUT_S=1 is shorter than the job: it is released, not finished.
    assert Processes.stop(holder, signal.SIGTERM, timeout=30) == 0
    log = cluster.procs.log(holder)
    assert f"job {job_id} released at worker shutdown" in log
    # a graceful hand-back is not an error: no ERROR line, no traceback in the worker's log
    assert " ERROR " not in log and "Traceback" not in log, log
    cluster.wait_terminal([job_id], timeout=60)
    job = cluster.job(job_id)
    # A release is not an attempt: the one run that counted is the other worker's.
    assert (job.status, job.attempt) == ("succeeded", 1), job.error
    assert WorkerId.parse(job.worker).pid == other.pid
    with cluster.db.session() as session:
        attempts = session.scalars(
            select(JobProgress.attempt).where(JobProgress.job_id == job_id).distinct()
        ).all()
    assert attempts == [1], "the released run's progress should have been discarded"
    cluster.stop_all([other])


@pytest.mark.slow
def test_a_worker_whose_rows_were_pruned_registers_again(cluster):
    """After an outage other workers may prune this one's rows (its heartbeat looked stale): it
    registers again, with a fresh heartbeat, and its next jobs run at their first attempt."""
    (worker,) = cluster.workers(1, JOB_STALL_S="3")
    with cluster.db.write() as session:
        session.execute(text("DELETE FROM procrastinate_workers"))
        session.execute(delete(Worker))

    def registered_again():
        with cluster.db.session() as session:
            ours = [w for w in session.scalars(select(Worker.id)) if WorkerId.parse(w).pid]
            fresh = session.scalar(
                text(
                    "SELECT count(*) FROM procrastinate_workers"
                    " WHERE last_heartbeat > now() - interval '2 seconds'"
                )
            )
        return [WorkerId.parse(w).pid for w in ours] == [worker.pid] and fresh == 1

    wait_for(registered_again, 60, "the worker to register again")
    job_id = cluster.submit("small", max_iter=50)
    cluster.wait_terminal([job_id], timeout=60)
    job = cluster.job(job_id)
    assert (job.status, job.attempt) == ("succeeded", 1), job.error
    cluster.stop_all([worker])
