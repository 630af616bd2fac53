"""Workers on "other hosts": the API and `margin worker` processes that share nothing but
DATABASE_URL and STORAGE_URL (a real PostgreSQL and moto's S3 server), each with its own empty
local directory. Six jobs on two datasets succeed with the predictions of the embedded mode;
deleting a dataset removes its objects; a worker killed half-way through a download leaves nothing
a later job reads; an unreachable store fails an upload with 503 and stores nothing."""

from __future__ import annotations

import signal
import time

import httpx
import numpy as np
import pytest

from app import migrate
from app.config import Settings
from app.db import Database
from app.jobs.runner import RunContext, run_job
from app.schemas.jobs import JobCreate
from app.services.dataset_commit import import_file
from app.services.datasets import load_dataset
from app.services.jobs import create_job
from app.services.model_cache import model_from_row
from app.services.prediction import decision_function
from app.tables import Dataset, Model
from tests.deploy.cluster import (
    FreshDatabase,
    Processes,
    free_port,
    wait_for,
    write_regression_file,
)
from tests.deploy.conftest import ROOT
from tests.tcp_proxy import ThrottledProxy

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(300)]

HEART = ROOT / "app" / "demo" / "heart_scale"
JOBS = [
    ("heart", "LinearSVC", {"loss": "hinge", "C": 1.0}),
    ("heart", "LinearSVC", {"loss": "squared_hinge", "C": 0.5}),
    ("heart", "LinearSVC", {"C": 2.0, "tol": 1e-4}),
    ("regression", "LinearSVR", {"C": 1.0}),
    ("regression", "LinearSVR", {"C": 0.1, "loss": "squared_epsilon_insensitive"}),
    ("regression", "LinearSVR", {"epsilon": 0.2}),
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory, s3_server):
    database = FreshDatabase()
    root = tmp_path_factory.mktemp("hosts")
    bucket = s3_server.new_bucket()
    port = free_port()
    env = {
        **s3_server.env,
        "DATABASE_URL": database.url,
        "STORAGE_URL": f"s3://{bucket}/margin",
        "STORAGE_TIMEOUT_S": "3",
        "WORKER_BACKEND": "procrastinate",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "SOLVER_THREADS": "1",
        "JOB_STALL_S": "6",
        "JOB_RETRIES": "1",
        "WORKER_SHUTDOWN_TIMEOUT_S": "1",
    }
    procs = Processes(root, env)
    try:
        migrated = procs.run("migrate", "--data-dir", str(root / "migrate"))
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        api = procs.start("api", name="api", DATA_DIR=str(root / "api"))
        workers = [
            procs.start("worker", name=f"worker-{n}", DATA_DIR=str(root / f"worker-{n}"))
            for n in (1, 2)
        ]
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            def ready():
                if api.poll() is not None:
                    pytest.fail(f"margin api exited:\n{procs.log(api)}")
                try:
                    body = client.get("/readyz").json()
                except httpx.TransportError:
                    return False
                return body.get("workers") == 2

            wait_for(ready, 120, "the API and two workers to be ready", 0.3)
            yield Stack(client, procs, root, bucket, s3_server, database, workers, env)
    finally:
        procs.close()
        database.drop()


class Stack:
    def __init__(self, client, procs, root, bucket, s3, database, workers, env):
        self.client, self.procs, self.root, self.bucket = client, procs, root, bucket
        self.s3, self.database, self.workers, self.env = s3, database, workers, env
        self.datasets: dict[str, dict] = {}

    def upload(self, path, name: str) -> dict:
        with open(path, "rb") as f:
            response = self.client.post("/v1/datasets", files={"file": (name, f)})
        assert response.status_code == 201, response.text
        return response.json()

    def submit(self, dataset_id: str, estimator: str, params: dict) -> str:
        body = {"dataset_id": dataset_id, "estimator": estimator, "params": params}
        response = self.client.post("/v1/jobs", json=body)
        assert response.status_code == 202, response.text
        return response.json()["id"]

    def wait(self, job_ids: list[str], timeout: float = 120) -> list[dict]:
        def done():
            jobs = [self.client.get(f"/v1/jobs/{j}").json() for j in job_ids]
            ended = all(j["status"] in ("succeeded", "failed", "cancelled") for j in jobs)
            return jobs if ended else None

        return wait_for(done, timeout, f"{len(job_ids)} jobs to end", every=0.3)


def _embedded_models(tmp_path, datasets: dict[str, object]) -> dict[int, object]:
    """The same six jobs in the embedded mode (SQLite, file storage, in this process)."""
    settings = Settings(data_dir=tmp_path / "embedded", solver_threads=1)
    settings.ensure_dirs()
    migrate.upgrade(settings.db_url)
    db = Database(settings.db_url)
    ids = {name: import_file(db, settings, path, name)[0].id for name, path in datasets.items()}
    models = {}
    for n, (name, estimator, params) in enumerate(JOBS):
        body = JobCreate(dataset_id=ids[name], estimator=estimator, params=params)
        job, _ = create_job(db, RunContext(settings, db).queue, body, None, settings)
        assert run_job(job.id, RunContext(settings, db, n_jobs=1)) == "succeeded"
        with db.session() as session:
            row = session.query(Model).filter_by(job_id=job.id).one()
            dataset = session.get(Dataset, ids[name])
        models[n] = (model_from_row(row), load_dataset(settings, dataset)[0])
    db.dispose()
    return models


def test_six_jobs_on_two_datasets_without_a_shared_filesystem(stack, tmp_path):
    regression = write_regression_file(tmp_path / "regression.svm", 400, 12, seed=3)
    files = {"heart": HEART, "regression": regression}
    for name, path in files.items():
        stack.datasets[name] = stack.upload(path, name)
    for dataset in stack.datasets.values():
        keys = stack.s3.keys(stack.bucket, f"margin/datasets/{dataset['id']}/")
        assert len(keys) == 4, keys
    assert not (stack.root / "api" / "datasets" / stack.datasets["heart"]["id"]).exists()

    job_ids = [stack.submit(stack.datasets[n]["id"], e, p) for n, e, p in JOBS]
    jobs = stack.wait(job_ids)
    assert [j["status"] for j in jobs] == ["succeeded"] * 6, [j["error"] for j in jobs]
    assert all(j["attempt"] == 1 for j in jobs)
    ran_on = set()
    for n in (1, 2):  # each worker downloaded into its own directory, nothing else
        cache = stack.root / f"worker-{n}" / "cache"
        if cache.exists() and [p for p in cache.iterdir() if not p.name.startswith(".")]:
            ran_on.add(n)
        assert not (stack.root / f"worker-{n}" / "datasets").exists() or not any(
            (stack.root / f"worker-{n}" / "datasets").iterdir()
        )
    assert ran_on, "no worker downloaded a dataset"

    embedded = _embedded_models(tmp_path, files)
    for n, job in enumerate(jobs):
        model, X = embedded[n]
        lines = files[JOBS[n][0]].read_text().splitlines()
        response = stack.client.post(
            f"/v1/models/{job['model_id']}/predict",
            content="\n".join(lines),
            headers={"Content-Type": "text/plain"},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        expected = decision_function(model, X)
        if model.is_regressor:
            np.testing.assert_allclose(body["values"], expected[:, 0], rtol=1e-9, atol=1e-12)
        else:
            np.testing.assert_allclose(body["decision_values"], expected, rtol=1e-9, atol=1e-12)


def test_deleting_a_dataset_removes_its_objects(stack, tmp_path):
    path = write_regression_file(tmp_path / "gone.svm", 50, 4, seed=9)
    dataset = stack.upload(path, "gone")
    prefix = f"margin/datasets/{dataset['id']}/"
    assert stack.s3.keys(stack.bucket, prefix)
    assert stack.client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204
    assert stack.s3.keys(stack.bucket, prefix) == []


def test_unreachable_storage_during_an_upload(stack, tmp_path):
    before = stack.s3.keys(stack.bucket)
    path = write_regression_file(tmp_path / "outage.svm", 300, 8, seed=11)
    stack.s3.pause()
    try:
        start = time.monotonic()
        with open(path, "rb") as f:
            response = stack.client.post("/v1/datasets", files={"file": ("outage", f)})
        took = time.monotonic() - start
    finally:
        stack.s3.resume()
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"]
    assert took < float(stack.env["STORAGE_TIMEOUT_S"]) + 5, took
    names = [d["name"] for d in stack.client.get("/v1/datasets").json()["items"]]
    assert "outage" not in names
    assert stack.s3.keys(stack.bucket) == before
    # the store is back: the next upload succeeds, and earlier datasets still train
    again = stack.upload(path, "outage")
    job = stack.submit(stack.datasets["heart"]["id"], "LinearSVC", {"C": 0.3})
    job2 = stack.submit(again["id"], "LinearSVR", {})
    assert [j["status"] for j in stack.wait([job, job2])] == ["succeeded"] * 2


def test_a_worker_killed_mid_download_leaves_nothing_a_later_job_reads(stack, tmp_path):
    for proc in stack.workers:  # from here on only the workers started below take jobs
        Processes.stop(proc, signal.SIGTERM)
    big = write_regression_file(tmp_path / "big.svm", 20000, 12, seed=5)
    dataset = stack.upload(big, "big")
    proxy = ThrottledProxy(("127.0.0.1", stack.s3.port), rate=300_000)  # ~2.9 MB in ~10 s
    local = stack.root / "worker-slow"
    try:
        slow = stack.procs.start(
            "worker", name="worker-slow", DATA_DIR=str(local), AWS_ENDPOINT_URL=proxy.endpoint
        )
        job_id = stack.submit(dataset["id"], "LinearSVR", {"C": 1.0})

        def half_way():
            parts = list((local / "cache").glob("part-*")) if (local / "cache").exists() else []
            return parts and any(p.stat().st_size > 0 for d in parts for p in d.iterdir())

        wait_for(half_way, 90, "the throttled worker to be half-way through its download", 0.05)
        slow.send_signal(signal.SIGKILL)
        slow.wait()
    finally:
        proxy.close()
    partial = list((local / "cache").glob("part-*"))
    assert partial, "the killed download left its part directory"
    assert not [p for p in (local / "cache").iterdir() if not p.name.startswith((".", "part-"))]
    # the same machine's next worker: the job is re-queued, downloaded whole, and succeeds
    stack.procs.start("worker", name="worker-after", DATA_DIR=str(local))
    (job,) = stack.wait([job_id], timeout=150)
    assert job["status"] == "succeeded", job["error"]
    assert job["attempt"] == 2
    assert not any(p.exists() for p in partial), "the dead download's files were not removed"
    copies = [p for p in (local / "cache").iterdir() if not p.name.startswith((".", "part-"))]
    assert len(copies) == 1
    from app.services.dataset_files import load_arrays
    from solvers import read_libsvm

    X, y = read_libsvm(big)[:2]
    cached_X, cached_y, _ = load_arrays(copies[0], dataset["n_features"])
    assert (cached_X != X).nnz == 0 and np.array_equal(cached_y, y)
