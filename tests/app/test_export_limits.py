"""Exports that hold the weights densely (ONNX, skops) are bounded: a few hundred bytes of upload
can train a model of 2^24 features, whose dense export took 2.7 GB of the API's memory."""

from __future__ import annotations

import pytest

from app.jobs.runner import RunContext, run_job
from app.services.export import MAX_DENSE_EXPORT_ENTRIES
from tests.app.conftest import upload

pytestmark = pytest.mark.timeout(120)


def test_a_dense_export_over_its_bound_is_413_and_the_sparse_ones_still_work(app, client):
    top = MAX_DENSE_EXPORT_ENTRIES + 1  # one entry over, for a model of one output
    rows = "".join(f"{i % 2} {top - i}:1\n" for i in range(8)).encode()  # 80 bytes
    dataset = upload(client, rows).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    model = client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    assert client.get(f"/v1/models/{model}").json()["n_features"] == top
    for format in ("onnx", "skops"):
        response = client.get(f"/v1/models/{model}/export", params={"format": format})
        assert response.status_code == 413, response.text[:200]
        assert "format=json" in response.json()["detail"]
    sparse = client.get(f"/v1/models/{model}/export", params={"format": "json"})
    assert sparse.status_code == 200 and len(sparse.content) < 100_000
