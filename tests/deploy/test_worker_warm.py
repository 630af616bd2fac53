"""A fresh worker (an empty Numba cache) compiles its kernels before it reports ready, and its
first job's train_time_s counts no compile: `margin worker` as the local pool, on SQLite."""

from __future__ import annotations

import re
import time

import pytest
from sqlalchemy import select

from app import migrate
from app.config import Settings
from app.db import Database
from app.jobs.queue import LocalQueue
from app.schemas.jobs import JobCreate
from app.services.dataset_commit import import_file
from app.services.jobs import create_job
from app.tables import Job, Model, Worker
from tests.deploy.cluster import Processes, wait_for
from tests.deploy.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_fresh_worker_is_ready_only_when_warm_and_its_first_job_pays_no_compile(tmp_path):
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    settings.ensure_dirs()
    migrate.upgrade(settings.db_url)
    db = Database(settings.db_url)
    dataset = import_file(db, settings, ROOT / "app" / "demo" / "heart_scale", "heart")[0]
    env = {"DATA_DIR": str(data), "NUMBA_CACHE_DIR": str(tmp_path / "empty-numba-cache")}
    procs = Processes(tmp_path, env)
    try:
        worker = procs.start("worker", "--workers", "1", name="worker")

        def registered():
            if worker.poll() is not None:
                pytest.fail(procs.log(worker))
            with db.session() as session:
                rows = session.scalars(select(Worker.id)).all()
            if rows:  # a worker that reports in is warm already
                assert "solver kernels warm in" in procs.log(worker), procs.log(worker)
            return rows

        wait_for(registered, 240, "the worker to register", every=0.2)
        warm_s = float(re.search(r"kernels warm in ([0-9.]+) s", procs.log(worker)).group(1))
        body = JobCreate(dataset_id=dataset.id, estimator="LinearSVC", params={"C": 1.0})
        job = create_job(db, LocalQueue(), body, None, settings)[0]
        start = time.monotonic()

        def finished():
            with db.session() as session:
                row = session.get(Job, job.id)
                return row if row.status in ("succeeded", "failed") else None

        row = wait_for(finished, 60, "the first job", every=0.1)
        took = time.monotonic() - start
        assert row.status == "succeeded", row.error
        with db.session() as session:
            model = session.scalars(select(Model).where(Model.job_id == job.id)).one()
        # compiling took seconds; the first job's solve, without any, takes milliseconds
        assert warm_s > 2.0, warm_s
        assert model.train_time_s < min(0.5, warm_s / 10), (model.train_time_s, warm_s)
        assert took < warm_s, (took, warm_s)
    finally:
        procs.close()
        db.dispose()


@pytest.mark.timeout(30)
def test_every_warm_step_names_solver_modules_that_exist():
    """A renamed solver module would make its warm step skip silently (and the first job pay
    the compile): every module the steps name is importable."""
    from app import warmup

    named = [m for _, modules, _, _ in warmup.STEPS for m in modules]
    named += [f"solvers.multiclass.{name}" for name in ("crammer_singer", "weston_watkins")]
    assert [m for m in named if not warmup._present(m)] == []
