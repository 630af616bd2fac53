"""Helpers of the serving tests (tests/app/test_serving_*.py): train a job to its model, and a
predict call that must succeed. The model they serve is the `served` fixture of
tests/app/conftest.py."""

from __future__ import annotations

from app.jobs.runner import RunContext, run_job


def train(app, client, dataset_id: str, **params) -> str:
    body = {"dataset_id": dataset_id, "params": {"tol": 1e-4, **params}}
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    return client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]


def predict(client, ref, body):
    response = client.post(f"/v1/models/{ref}/predict", json=body)
    assert response.status_code == 200, response.text
    return response.json()
