"""Helpers of the text-label tests (tests/app/test_text_labels*.py): three overlapping clusters
labelled by text, their CSV and Parquet bodies, an upload, a job run to its model, and
scikit-learn's LinearSVC fitted on the same rows as the reference."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.jobs.runner import run_job
from tests.app.job_helpers import context

NAMES = ["virginica", "setosa", "versicolor"]  # not sorted: the classes come out sorted
C = 0.5


def flowers(seed=0, n=90):
    """Three overlapping clusters in 4 dimensions, labelled by text."""
    rng = np.random.default_rng(seed)
    which = rng.integers(0, 3, size=n)
    centers = np.array([[2.0, 0, 1, 0], [0, 2.0, 0, 1], [-1, -1, 2.0, 0]])
    X = np.round(centers[which] + rng.standard_normal((n, 4)), 3)
    return X, np.array(NAMES, dtype=object)[which]


def csv_text(X, labels, sep=",") -> bytes:
    lines = [sep.join(["label", "a", "b", "c", "d"])]
    for label, row in zip(labels, X, strict=True):
        lines.append(sep.join([str(label), *(f"{v:g}" for v in row)]))
    return ("\n".join(lines) + "\n").encode()


def parquet_data(X, labels, dictionary=False) -> bytes:
    column = pa.array(list(labels), type=pa.string())
    if dictionary:
        column = column.dictionary_encode()
    table = pa.table({"label": column, **{k: X[:, j] for j, k in enumerate("abcd")}})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=40)
    return out.getvalue()


def post(client, body: bytes, filename: str, **params):
    return client.post("/v1/datasets", files={"file": (filename, body)}, params=params)


def nothing_stored(client, settings):
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())


def train(app, client, dataset_id: str, estimator="LinearSVC", validation=None, **params) -> dict:
    """The model of a job run to its end (`validation`: a validation dataset's id)."""
    body = {"dataset_id": dataset_id, "estimator": estimator,
            "params": {"C": C, "tol": 1e-8, "max_iter": 100_000, **params}}  # fmt: skip
    if validation is not None:
        body["validation_dataset_id"] = validation
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    return client.get(f"/v1/models/{done['model_id']}").json()


def sklearn_reference(X, labels):
    from sklearn.svm import LinearSVC

    return LinearSVC(C=C, tol=1e-10, max_iter=1_000_000, random_state=0).fit(X, labels)
