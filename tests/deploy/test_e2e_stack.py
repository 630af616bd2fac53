"""End to end through the stack's own commands, on loopback: PostgreSQL, `margin migrate`,
`margin api` and two `margin worker` processes (WORKER_BACKEND=procrastinate), exactly what the
compose services run; a dataset is uploaded, trained on and predicted with over HTTP."""

from __future__ import annotations

import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from tests.deploy.cluster import FreshDatabase, Processes, free_port, wait_for
from tests.deploy.conftest import ROOT

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.timeout(240)]

HEART = ROOT / "app" / "demo" / "heart_scale"


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    database = FreshDatabase()
    root = tmp_path_factory.mktemp("stack")
    port = free_port()
    env = {
        "DATABASE_URL": database.url,
        "DATA_DIR": str(root / "data"),
        "WORKER_BACKEND": "procrastinate",
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "SOLVER_THREADS": "1",
        "JOB_STALL_S": "10",
    }
    procs = Processes(root, env)
    try:
        migrated = procs.run("migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        api = procs.start("api", name="api")
        # One worker runs two jobs at once (threads), the other one at a time.
        workers = [
            procs.start("worker", name=f"worker-{n}", WORKER_CONCURRENCY=str(n)) for n in (1, 2)
        ]
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base, timeout=30) as client:

            def ready():
                if api.poll() is not None:
                    pytest.fail(f"margin api exited:\n{procs.log(api)}")
                try:
                    return client.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(ready, 90, "the API to be ready (database reachable, workers reporting)", 0.2)
            yield client, procs, api, workers
    finally:
        procs.close()
        database.drop()


def _train(client: httpx.Client, dataset_id: str, params: dict) -> dict:
    response = client.post(
        "/v1/jobs", json={"dataset_id": dataset_id, "estimator": "LinearSVC", "params": params}
    )
    assert response.status_code == 202, response.text
    job = response.json()
    # the answer reads the job back after its commit, when a worker may already have claimed it
    assert job["status"] in ("queued", "running")
    seen = {job["status"]}
    deadline = time.monotonic() + 120
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        assert time.monotonic() < deadline, f"job still {job['status']}"
        time.sleep(0.1)
        job = client.get(response.headers["Location"]).json()
        seen.add(job["status"])
    assert job["status"] == "succeeded", job["error"]
    assert seen <= {"queued", "running", "succeeded"}, seen
    assert job["attempt"] == 1 and job["model_id"]
    return job


def test_upload_train_predict(stack):
    client, procs, api, workers = stack
    from solvers import LinearSVC, read_libsvm

    with open(HEART, "rb") as f:
        response = client.post("/v1/datasets", files={"file": ("heart_scale", f)})
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert dataset["n_rows"] == 270

    X, y = read_libsvm(HEART)[:2]
    lines = HEART.read_text().splitlines()
    all_params = ({"loss": "hinge", "C": 1.0}, {"loss": "squared_hinge", "C": 0.5})
    with ThreadPoolExecutor(len(all_params)) as pool:  # submitted together, trained in parallel
        jobs = list(pool.map(lambda p: _train(client, dataset["id"], p), all_params))
    for params, job in zip(all_params, jobs, strict=True):
        model_id = job["model_id"]
        assert model_id
        model = client.get(f"/v1/models/{model_id}").json()
        assert model["job_id"] == job["id"]

        predicted = client.post(
            f"/v1/models/{model_id}/predict",
            content="\n".join(lines),
            headers={"Content-Type": "text/plain"},
        )
        assert predicted.status_code == 200, predicted.text
        direct = LinearSVC(**params).fit(X, y)
        np.testing.assert_array_equal(predicted.json()["labels"], direct.predict(X))

    # Workers and API stop cleanly on SIGTERM, as `docker compose stop` sends it. (uvicorn shuts
    # down gracefully, then re-raises the signal, so the API's status is -SIGTERM.)
    for proc in workers:
        assert Processes.stop(proc, signal.SIGTERM) == 0, procs.log(proc)
    assert Processes.stop(api, signal.SIGTERM) in (0, -signal.SIGTERM)
    assert "Application shutdown complete" in procs.log(api)
