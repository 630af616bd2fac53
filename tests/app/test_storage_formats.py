"""Every upload format lands in object storage: CSV, Parquet and npz uploads of the same table are
stored as objects (nothing in the API's data directory), read back through the worker's cache as
the same arrays, train the same model, and that model answers v1 predict, the v2 inference
protocol and MLflow invocations (through a registered name) alike."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.db import Database
from app.jobs.runner import RunContext, run_job
from app.services.datasets import load_dataset
from app.tables import Dataset
from margin_client._encode import npz_bytes
from tests.app.conftest import NAMES, heart_csv

pytestmark = pytest.mark.timeout(180)


def _uploads() -> tuple[dict[str, tuple[str, bytes, dict]], np.ndarray, np.ndarray]:
    text, X, y = heart_csv()
    columns = {"label": pa.array(y), **{n: pa.array(X[:, j]) for j, n in enumerate(NAMES)}}
    parquet = io.BytesIO()
    pq.write_table(pa.table(columns), parquet)
    return {
        "csv": ("heart.csv", text, {}),
        "parquet": ("heart.parquet", parquet.getvalue(), {}),
        "npz": ("heart.npz", npz_bytes(X, y), {"format": "npz"}),
    }, X, y


def _train(client, settings, dataset_id: str) -> str:
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id, "params": {"tol": 1e-4}})
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], RunContext(settings, client.app.state.db)) == "succeeded"
    return client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]


def test_csv_parquet_and_npz_uploads_are_objects_that_train_and_serve(
    s3_client, s3_settings, s3_env
):
    server, bucket = s3_env
    uploads, X, y = _uploads()
    datasets = {}
    for fmt, (filename, body, params) in uploads.items():
        response = s3_client.post(
            "/v1/datasets", files={"file": (filename, body)}, params={"name": fmt, **params}
        )
        assert response.status_code == 201, (fmt, response.text)
        datasets[fmt] = response.json()
        assert datasets[fmt]["format"] == fmt
        keys = server.keys(bucket, f"margin/datasets/{datasets[fmt]['id']}/")
        assert sorted(k.rsplit("/", 1)[1] for k in keys) == [
            "data.npy", "indices.npy", "indptr.npy", "y.npy",
        ], fmt  # fmt: skip
    assert not any((s3_settings.data_dir / "datasets").iterdir())  # nothing stored locally

    db = Database(s3_settings.db_url)
    try:
        with db.session() as session:
            rows = {fmt: session.get(Dataset, d["id"]) for fmt, d in datasets.items()}
        for fmt, row in rows.items():  # read back from the bucket through the local cache
            Xs, ys, _ = load_dataset(s3_settings, row)
            assert np.array_equal(Xs.toarray(), X) and np.array_equal(ys, y), fmt
    finally:
        db.dispose()

    models = {fmt: _train(s3_client, s3_settings, d["id"]) for fmt, d in datasets.items()}
    rows = X[:8].tolist()
    answers = {
        fmt: s3_client.post(f"/v1/models/{m}/predict", json={"instances": rows}).json()
        for fmt, m in models.items()
    }
    labels = answers["csv"]["labels"]
    for fmt, answer in answers.items():
        assert answer["labels"] == labels, fmt
        np.testing.assert_allclose(
            answer["decision_values"], answers["csv"]["decision_values"], atol=1e-9
        )

    assert s3_client.post("/v1/registered-models", json={"name": "heart"}).status_code == 201
    version = {"model_id": models["parquet"]}
    assert s3_client.post("/v1/registered-models/heart/versions", json=version).status_code == 201
    records = [dict(zip(NAMES, row, strict=True)) for row in rows]
    alias = s3_client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    assert alias.status_code == 200, alias.text
    invoked = s3_client.post(
        "/v1/models/heart@production/invocations", json={"dataframe_records": records}
    )
    assert invoked.status_code == 200, invoked.text
    assert invoked.json() == {"predictions": labels}
    tensor = {"name": "input", "shape": [len(rows), len(NAMES)], "datatype": "FP64",
              "data": [v for row in rows for v in row]}  # fmt: skip
    inferred = s3_client.post("/v2/models/heart/infer", json={"inputs": [tensor]})
    assert inferred.status_code == 200, inferred.text
    outputs = {o["name"]: o["data"] for o in inferred.json()["outputs"]}
    assert outputs["label"] == labels

    for d in datasets.values():  # deleting each dataset removes its objects
        assert s3_client.delete(f"/v1/datasets/{d['id']}").status_code == 204
    assert server.keys(bucket, "margin/datasets/") == []
