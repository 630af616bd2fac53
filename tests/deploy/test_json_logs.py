"""`margin serve` with LOG_FORMAT=json: every line is a JSON object; a request's lines carry its
request id, a job's lines its job id (also those of the worker process); /metrics scraped after
the run shows the local pool's training, which happened in another process."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.app.test_observability import samples
from tests.deploy.cluster import Processes, free_port, wait_for
from tests.deploy.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def test_json_logs_and_metrics_of_a_short_run(tmp_path):
    port = free_port()
    env = {"DATA_DIR": str(tmp_path / "data"), "LOG_FORMAT": "json", "PORT": str(port)}
    procs = Processes(tmp_path, env)
    try:
        serve = procs.start("serve", "--workers", "1", name="serve")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:

            def ready():
                if serve.poll() is not None:
                    pytest.fail(procs.log(serve))
                try:
                    return client.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(ready, 120, "margin serve to be ready", 0.3)
            with open(ROOT / "app" / "demo" / "heart_scale", "rb") as f:
                uploaded = client.post(
                    "/v1/datasets", files={"file": ("heart", f)}, headers={"X-Request-ID": "up-1"}
                )
            assert uploaded.status_code == 201
            job = client.post(
                "/v1/jobs", json={"dataset_id": uploaded.json()["id"]},
                headers={"X-Request-ID": "job-1"},
            ).json()  # fmt: skip
            deadline = time.monotonic() + 60
            while client.get(f"/v1/jobs/{job['id']}").json()["status"] != "succeeded":
                assert time.monotonic() < deadline
                time.sleep(0.2)
            got = samples(client.get("/metrics").text)
    finally:
        procs.close()
    assert got[("margin_jobs", (("status", "succeeded"),))] == 1
    assert got[("margin_training_seconds_total", ())] > 0
    lines = [line for line in procs.log(serve).splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line is JSON
    assert all({"time", "level", "logger", "message"} <= set(r) for r in records)
    by_request = [r for r in records if r.get("request_id") == "up-1"]
    assert by_request, "no line of the upload request carries its id"
    by_job = [r for r in records if r.get("job_id") == job["id"]]
    assert any("started" in r["message"] for r in by_job), by_job
    assert any("ended succeeded" in r["message"] for r in by_job), by_job
