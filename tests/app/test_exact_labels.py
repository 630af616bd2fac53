"""Integer labels beyond 2^53 in every upload format. Labels are stored as float64, which holds
every integer only below 2^53: 9007199254740993 read as 9007199254740992, so a file holding both
made one class of two (LIBSVM text, CSV, Parquet int64 and strings, npz int64 and unicode).
Integers of magnitude 2^53 or more are no exact class labels, so numeric labels holding one are a
real-valued target: stored (a regression target rounds as any float does; integer targets with
repeated values were refused, which left LinearSVR no way to train on them), and a classifier on
them is a 422 naming the bound. Labels just below it stay distinct classes; a text label column,
whose numbers are class names, refuses such a number, naming its row."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

BOUND = 2**53  # 9007199254740992
MERGED = [BOUND + 1, BOUND]  # 9007199254740993, 9007199254740992: one float64


def libsvm(labels) -> bytes:
    return "".join(f"{v} 1:{i + 1}\n" for i, v in enumerate(labels)).encode()


def csv(labels) -> bytes:
    return ("label,a\n" + "".join(f"{v},{i + 1}\n" for i, v in enumerate(labels))).encode()


def parquet(column, row_group_size=None) -> bytes:
    out = io.BytesIO()
    table = pa.table({"label": column, "a": np.arange(1.0, len(column) + 1)})
    pq.write_table(table, out, row_group_size=row_group_size)
    return out.getvalue()


def npz(y) -> bytes:
    n = len(y)
    out = io.BytesIO()
    np.savez(
        out, data=np.arange(1.0, n + 1), indices=np.zeros(n, dtype=np.int32),
        indptr=np.arange(n + 1), shape=np.array([n, 1]), format=np.array(b"csr"), y=y,
    )  # fmt: skip
    return out.getvalue()


FORMATS = {  # name: (file name, the labels as that format writes them)
    "libsvm": ("d.svm", libsvm),
    "csv": ("d.csv", csv),
    "parquet-int64": ("d.parquet", lambda v: parquet(pa.array(v, pa.int64()))),
    "parquet-string": ("d.parquet", lambda v: parquet(pa.array([str(x) for x in v]))),
    "npz-int64": ("d.npz", lambda v: npz(np.asarray(v, dtype=np.int64))),
    "npz-unicode": ("d.npz", lambda v: npz(np.asarray([str(x) for x in v]))),
}


def post(client, name: str, body: bytes):
    return client.post("/v1/datasets", files={"file": (name, body)})


NUMERIC = ["libsvm", "csv", "parquet-int64", "npz-int64"]


def classifier_refused(client, dataset_id: str, label: str) -> None:
    answer = client.post("/v1/jobs", json={"dataset_id": dataset_id})
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert "real-valued target" in detail and f"the class label {label}" in detail, detail
    assert "2^53" in detail and "renumber the classes" in detail, detail


@pytest.mark.parametrize("fmt", FORMATS)
def test_labels_beyond_2_to_the_53_are_a_real_target_not_merged_classes(client, fmt):
    name, write = FORMATS[fmt]
    answer = post(client, name, write(MERGED))
    assert answer.status_code == 201, answer.text
    labels = answer.json()["labels"]
    assert labels["kind"] == "real" and labels["max"] == float(BOUND), labels
    classifier_refused(client, answer.json()["id"], "9007199254740992")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("sign", [1, -1])
def test_just_below_the_bound_classes_stay_distinct_and_at_it_are_real(client, fmt, sign):
    name, write = FORMATS[fmt]
    below = [sign * (BOUND - 1), sign * (BOUND - 2)]
    answer = post(client, name, write(below))
    assert answer.status_code == 201, answer.text
    classes = [c["label"] for c in answer.json()["labels"]["classes"]]
    assert classes == sorted(below)  # two classes, exactly the integers sent
    answer = post(client, name, write([sign * (BOUND - 1), sign * BOUND]))
    assert answer.status_code == 201, answer.text
    assert answer.json()["labels"]["kind"] == "real"
    classifier_refused(client, answer.json()["id"], f"{sign * BOUND}")


def test_repeated_integer_targets_beyond_the_bound_train_a_regressor(app, client, db):
    """Integer targets with repeated values look like classes; beyond 2^53 they were refused
    at the upload, so LinearSVR could not train on them. A float target is a float: stored,
    and the regressor trains on it."""
    from app.jobs.runner import RunContext, run_job

    targets = [BOUND + 2, BOUND + 2, 3 * BOUND, 3 * BOUND, BOUND + 2, 3 * BOUND]
    rows = "".join(f"{t} 1:{1.0 if t == BOUND + 2 else 2.0}\n" for t in targets).encode()
    answer = post(client, "d.svm", rows)
    assert answer.status_code == 201, answer.text
    assert answer.json()["labels"]["kind"] == "real"
    body = {"dataset_id": answer.json()["id"], "estimator": "LinearSVR"}
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], RunContext(app.state.settings, db)) == "succeeded"


@pytest.mark.parametrize("fmt", ["csv", "parquet-string", "npz-unicode"])
def test_a_text_column_does_not_name_two_such_numbers_as_one_class(client, fmt):
    """With a text label the numbers are class names by their value: both were named
    "9007199254740992.0"."""
    name, write = FORMATS[fmt]
    answer = post(client, name, write(["spam", *MERGED]))
    assert answer.status_code == 422, answer.text
    assert "2^53" in answer.json()["detail"]
    assert "row 2:" in answer.json()["detail"] or "line 3:" in answer.json()["detail"]


@pytest.mark.parametrize("fmt", NUMERIC)
def test_a_real_valued_target_beyond_the_bound_is_kept(client, fmt):
    """Only classes merge: a regression target may round (as any float does)."""
    name, write = FORMATS[fmt]
    targets = [BOUND + 1, 3, -(10**18), 7, 11, 13]  # six distinct values of six rows: real
    answer = post(client, name, write(targets))
    assert answer.status_code == 201, answer.text
    assert answer.json()["labels"]["kind"] == "real"
    assert answer.json()["labels"]["max"] == float(BOUND), answer.json()["labels"]


def test_such_a_number_read_before_the_column_turns_out_text_is_refused(client):
    """Chunks of numbers are kept as numbers until a text cell comes; their names are made
    then (here in the next Parquet row group, a chunk of its own). With 1.5 among them the
    numbers alone are a real-valued target, so only the text makes them classes."""
    labels = ["1.5", "2", "1", "2", str(BOUND + 1), str(BOUND), "1", "2", "spam", "ham"]
    answer = post(client, "d.parquet", parquet(pa.array(labels), row_group_size=8))
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    assert detail.startswith("row 9: a text label makes every label a class"), detail
    assert "9007199254740992" in detail
