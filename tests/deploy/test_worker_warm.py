"""A fresh worker compiles its kernels before it reports ready, and its first job's train_time_s
counts no compile: `margin worker` as the local pool, on SQLite.

Compiling every kernel from an empty Numba cache takes minutes on a small machine, so the worker
starts from a cache that holds every kernel the tests have compiled in the tree so far, less those
of the source files the first job runs (a LinearSVC on two classes: the binary solver's kernels
and the sparse row helpers); those the worker must compile before it reports ready.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import pytest
from numba.core.caching import UserProvidedCacheLocator
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

# The source files whose kernels a LinearSVC job on two classes runs: the worker's cache starts
# without them.
FIRST_JOB_SOURCES = [
    ROOT / "solvers" / "binary" / "kernels.py",
    ROOT / "solvers" / "_core" / "sparse.py",
]
CACHE_SUFFIXES = (".nbi", ".nbc")


def _cache_dir_of(cache_root: Path, source: Path) -> Path:
    """Where Numba keeps the kernels of `source` when NUMBA_CACHE_DIR is `cache_root`."""
    return cache_root / UserProvidedCacheLocator.get_suitable_cache_subpath(str(source))


def _cache_files_of(directory: Path, source: Path) -> list[Path]:
    """The index and data files of the kernels defined in `source` (named `<module>.<kernel>-`)."""
    if not directory.is_dir():
        return []
    prefix = f"{source.stem}."
    return sorted(
        p for p in directory.iterdir() if p.name.startswith(prefix) and p.suffix in CACHE_SUFFIXES
    )


def _cache_without_first_job_kernels(cache_root: Path) -> None:
    """Copy the in-tree cache of every solver source into `cache_root` (Numba's layout for
    NUMBA_CACHE_DIR), except the kernels of FIRST_JOB_SOURCES."""
    for source in sorted((ROOT / "solvers").rglob("*.py")):
        if source in FIRST_JOB_SOURCES:
            continue
        files = _cache_files_of(source.parent / "__pycache__", source)
        target = _cache_dir_of(cache_root, source)
        for path in files:
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target / path.name)
    for source in FIRST_JOB_SOURCES:
        assert _cache_files_of(_cache_dir_of(cache_root, source), source) == []


def test_a_fresh_worker_is_ready_only_when_warm_and_its_first_job_pays_no_compile(tmp_path):
    data = tmp_path / "data"
    settings = Settings(data_dir=data)
    settings.ensure_dirs()
    migrate.upgrade(settings.db_url)
    db = Database(settings.db_url)
    dataset = import_file(db, settings, ROOT / "app" / "demo" / "heart_scale", "heart")[0]
    cache_root = tmp_path / "numba-cache"
    _cache_without_first_job_kernels(cache_root)
    # the worker imports the solvers whose cache was prepared (not another installed copy)
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {"DATA_DIR": str(data), "NUMBA_CACHE_DIR": str(cache_root), "PYTHONPATH": pythonpath}
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
        # the first job's kernels were compiled (and cached) before the worker reported ready
        compiled = {
            s.name: _cache_files_of(_cache_dir_of(cache_root, s), s) for s in FIRST_JOB_SOURCES
        }
        assert all(compiled.values()), compiled
        cached_before_job = _cache_snapshot(cache_root)
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
        # the job compiled nothing: Numba writes every kernel it compiles to the cache
        assert _cache_snapshot(cache_root) == cached_before_job
    finally:
        procs.close()
        db.dispose()


def _cache_snapshot(cache_root: Path) -> dict[str, int]:
    """Every cache file under `cache_root` with its modification time (ns)."""
    return {
        str(p): p.stat().st_mtime_ns for p in cache_root.rglob("*") if p.suffix in CACHE_SUFFIXES
    }


@pytest.mark.timeout(30)
def test_every_warm_step_names_solver_modules_that_exist():
    """A renamed solver module would make its warm step skip silently (and the first job pay
    the compile): every module the steps name is importable."""
    from app import warmup

    named = [m for _, modules, _, _ in warmup.STEPS for m in modules]
    named += [f"solvers.multiclass.{name}" for name in ("crammer_singer", "weston_watkins")]
    assert [m for m in named if not warmup._present(m)] == []
