"""/metrics (Prometheus text) after a short run, its access rule where keys are required, and
the request id on every line of a request."""

from __future__ import annotations

import logging

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.jobs.runner import RunContext, run_job
from app.main import create_app
from app.services.keys import create_key


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_after_a_short_run(app, client, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    queued = samples(client.get("/metrics").text)
    assert queued[("margin_queue_depth", ())] == 1
    assert run_job(job["id"], RunContext(app.state.settings, db)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    predicted = client.post(
        f"/v1/models/{model_id}/predict", json={"instances": [[0.0] * 13, [1.0] * 13]}
    )
    assert predicted.status_code == 200
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    got = samples(response.text)
    assert got[("margin_jobs", (("status", "succeeded"),))] == 1
    assert got[("margin_jobs", (("status", "queued"),))] == 0
    assert got[("margin_queue_depth", ())] == 0
    assert got[("margin_models_trained_total", ())] == 1
    assert got[("margin_training_seconds_total", ())] > 0
    assert got[("margin_predictions_total", (("kind", "classifier"),))] == 2
    post = (("method", "POST"), ("route", "/v1/datasets"), ("status", "201"))
    assert got[("margin_http_requests_total", post)] == 1
    latency = (("method", "GET"), ("route", "/v1/jobs/{job_id}"))
    assert got[("margin_http_request_duration_seconds_count", latency)] >= 1
    # predict is a plain Starlette route (before: counted as "(unmatched)")
    predict = (("method", "POST"), ("route", "/v1/models/{model_id}/predict"), ("status", "200"))
    assert got[("margin_http_requests_total", predict)] == 1
    assert ("margin_workers_alive", ()) in got


def test_metrics_need_admin_or_the_metrics_token_where_keys_are_required(
    tmp_path, db_url, shared_parser
):
    settings = Settings(
        data_dir=tmp_path / "data", database_url=db_url, auth_mode="required",
        metrics_token="scrape-me",
    )  # fmt: skip
    app = create_app(settings)
    app.state.parser = shared_parser
    with TestClient(app, base_url="http://localhost") as client:
        reader = create_key(app.state.db, "acme", "r", ["read"])[1]
        admin = create_key(app.state.db, "ops", "a", ["admin"])[1]

        def status(token=None):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            return client.get("/metrics", headers=headers).status_code

        assert status() == 401 and status("wrong") == 401
        assert status(reader) == 403
        for token in (admin, "scrape-me"):
            ok = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
            assert ok.status_code == 200 and "margin_jobs" in ok.text


def test_each_log_line_of_a_request_carries_its_id(client, caplog):
    caplog.set_level(logging.INFO)
    response = client.post(
        "/v1/jobs", json={"dataset_id": "nope"}, headers={"X-Request-ID": "req-42"}
    )
    assert response.status_code == 404 and response.headers["x-request-id"] == "req-42"
    generated = client.get("/healthz").headers["x-request-id"]
    assert len(generated) == 32 and generated != "req-42"
    hostile = client.get("/healthz", headers={"X-Request-ID": "a b\x01" * 30})
    assert hostile.headers["x-request-id"] != "a b\x01" * 30  # not echoed: a new id instead
