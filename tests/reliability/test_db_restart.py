"""The database restarts while jobs run (a PostgreSQL cluster of the test's own): the API answers
503 while it is down and recovers without a restart; the running job keeps training and records
its result once the database is back, and no job is left queued or running."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.reliability.helpers import (
    TERMINAL,
    Margin,
    PgCluster,
    free_port,
    job_status,
    wait_for,
    write_classification_file,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]
# each job runs for its whole time budget (tol is unreachable for the hinge loss, which has no
# Newton finish), so it is mid-run when PG stops
LONG_JOB = {
    "params": {"loss": "hinge", "tol": 1e-12, "max_iter": 10_000_000, "C": 100.0, "time_limit": 4.0}
}


@pytest.fixture
def cluster():
    pg = PgCluster()
    pg.start()
    yield pg
    pg.destroy()


def test_database_restart_while_jobs_run(tmp_path, cluster):
    margin = Margin(
        tmp_path,
        data_dir=tmp_path / "data",
        database_url=cluster.url,
        job_retries=3,
        progress_interval_s=0.2,
        solver_threads=1,
    )
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        api, http = margin.api(free_port())
        margin.start("worker", "--workers", "2", name="worker")
        source = write_classification_file(tmp_path / "train.svm", 3000, 40)
        dataset = http.post("/v1/datasets", files={"file": source.open("rb")}).json()
        jobs = [
            http.post("/v1/jobs", json={"dataset_id": dataset["id"], **LONG_JOB}).json()["id"]
            for _ in range(3)
        ]
        wait_for(
            lambda: job_status(http, jobs[0]) == "running", 90, "the first job to start running"
        )

        cluster.stop()
        down = http.get("/v1/jobs")
        assert down.status_code == 503, down.text
        assert down.headers["Retry-After"]
        assert "database" in down.json()["detail"]
        assert http.get(f"/v1/jobs/{jobs[0]}").status_code == 503
        assert http.get("/healthz").status_code == 200  # the process itself is alive
        assert http.get("/readyz").status_code == 503
        time.sleep(2)  # workers notice the outage meanwhile
        cluster.start()

        def recovered():
            try:
                return http.get("/v1/jobs").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(recovered, 30, "the API to recover without a restart")
        assert api.poll() is None
        statuses = wait_for(
            lambda: (
                (s := {j: job_status(http, j) for j in jobs}) and set(s.values()) <= TERMINAL and s
            ),
            150,
            "every job to end",
            every=0.5,
        )
        views = [http.get(f"/v1/jobs/{j}").json() for j in jobs]
        for view in views:
            assert view["status"] in ("succeeded", "failed"), view
            if view["status"] == "succeeded":
                assert view["model_id"]
                assert http.get(f"/v1/models/{view['model_id']}").status_code == 200
            else:
                assert view["error"] and "Traceback" not in view["error"]
        assert list(statuses.values()).count("succeeded") == 3, views
        # the job that was running when the database went away kept training, and recorded its
        # result once the database was back: its attempt was not lost
        assert views[0]["attempt"] == 1, views[0]
        models = http.get("/v1/models").json()["items"]
        assert len({m["job_id"] for m in models}) == len(models)  # never two models for a job
    except BaseException:
        print(margin.logs())
        raise
    finally:
        margin.close()
