"""Helpers of the table upload tests (tests/app/test_upload_csv.py, test_upload_parquet.py,
test_upload_table_options.py): a random table and its CSV and Parquet bodies, an upload, the
stored arrays, and the check that nothing was stored."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from app.services.dataset_files import load_arrays
from app.services.datasets import dataset_dir


def table(seed=0, n=60, d=5):
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, d)), 3)
    X[rng.random((n, d)) < 0.5] = 0
    y = np.where(X.sum(axis=1) > 0, 1.0, -1.0)
    return X, y


def csv_bytes(X, y, names=None, sep=",", label="label", label_first=True):
    names = names or [f"f{j}" for j in range(X.shape[1])]
    header = [label, *names] if label_first else [*names, label]
    lines = [sep.join(header)]
    for row, target in zip(X, y, strict=True):
        cells = [f"{v:g}" for v in row]
        lines.append(sep.join([f"{target:g}", *cells] if label_first else [*cells, f"{target:g}"]))
    return ("\n".join(lines) + "\n").encode()


def post(client, body: bytes, filename="data.csv", **params):
    return client.post("/v1/datasets", files={"file": (filename, body)}, params=params)


def stored(settings, body):
    X, y, _ = load_arrays(dataset_dir(settings, body["id"]), body["n_features"])
    return X, y


def nothing_stored(client, settings):
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())



def parquet_bytes(tbl: pa.Table, **options) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(tbl, buffer, **options)
    return buffer.getvalue()
