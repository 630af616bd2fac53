"""Text class labels in CSV, TSV and Parquet uploads, through the service over HTTP: the upload
names the classes by their text, a job trains on them and its model predicts the same texts as
scikit-learn's LinearSVC fitted on the same rows (same C, tight tolerances), evaluate matches
classes by name, JSON and ONNX exports carry the names and LIBLINEAR's refuses; the bounds
(label length, class count) answer just over their limits with nothing stored; a column of
numbers stays numeric; a regression on text labels is refused."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.jobs.runner import run_job
from app.services.dataset_files import load_arrays
from app.services.dataset_store import MAX_CLASSES
from app.services.datasets import dataset_dir
from app.services.formats.labels import MAX_LABEL_CHARS
from tests.app.job_helpers import context

pytestmark = pytest.mark.timeout(180)
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


def train(app, client, dataset_id: str, estimator="LinearSVC", **params) -> dict:
    body = {"dataset_id": dataset_id, "estimator": estimator,
            "params": {"C": C, "tol": 1e-8, "max_iter": 100_000, **params}}  # fmt: skip
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    return client.get(f"/v1/models/{done['model_id']}").json()


def sklearn_reference(X, labels):
    from sklearn.svm import LinearSVC

    return LinearSVC(C=C, tol=1e-12, max_iter=1_000_000, dual=True).fit(X, labels)


@pytest.mark.parametrize("kind", ["csv", "tsv", "parquet", "parquet-dictionary"])
def test_text_labels_upload_train_predict_evaluate(app, client, settings, kind):
    X, labels = flowers()
    if kind.startswith("parquet"):
        body, name = parquet_data(X, labels, dictionary=kind.endswith("dictionary")), "f.parquet"
    else:
        body, name = csv_text(X, labels, "," if kind == "csv" else "\t"), f"f.{kind}"
    uploaded = post(client, body, name)
    assert uploaded.status_code == 201, uploaded.text
    dataset = uploaded.json()
    names, counts = np.unique(labels.astype(str), return_counts=True)
    expected = [{"label": n, "count": int(c)} for n, c in zip(names, counts, strict=True)]
    assert dataset["labels"] == {"kind": "classes", "classes": expected}
    shown = client.get(f"/v1/datasets/{dataset['id']}").json()
    assert shown["labels"] == dataset["labels"]
    _, y = load_arrays(dataset_dir(settings, dataset["id"]), 4)[:2]
    assert np.array_equal(names[y.astype(int)], labels.astype(str))  # codes of sorted names

    model = train(app, client, dataset["id"])
    reference = sklearn_reference(X, labels.astype(str))
    assert model["classes"] == reference.classes_.tolist() == sorted(NAMES)

    X_new, _ = flowers(seed=1, n=40)
    predicted = client.post(
        f"/v1/models/{model['id']}/predict", json={"instances": X_new.tolist()}
    )
    assert predicted.status_code == 200, predicted.text
    assert predicted.json()["labels"] == reference.predict(X_new).tolist()
    np.testing.assert_allclose(
        predicted.json()["decision_values"], reference.decision_function(X_new),
        rtol=1e-4, atol=1e-4,
    )  # fmt: skip

    report = client.post(f"/v1/models/{model['id']}/evaluate", json={"dataset_id": dataset["id"]})
    assert report.status_code == 200, report.text
    train_predicted = reference.predict(X)
    assert report.json()["labels"] == sorted(NAMES)
    assert report.json()["accuracy"] == pytest.approx(np.mean(train_predicted == labels))
    from sklearn.metrics import confusion_matrix

    assert report.json()["confusion_matrix"] == confusion_matrix(
        labels.astype(str), train_predicted, labels=sorted(NAMES)
    ).tolist()
    assert model["train_accuracy"] == pytest.approx(np.mean(train_predicted == labels))


def test_exports_carry_the_names_and_liblinear_refuses(app, client):
    import onnxruntime

    X, labels = flowers(2)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    model = train(app, client, dataset["id"])
    document = client.get(f"/v1/models/{model['id']}/export", params={"format": "json"}).json()
    assert document["classes"] == sorted(NAMES)

    onnx = client.get(f"/v1/models/{model['id']}/export", params={"format": "onnx"})
    assert onnx.status_code == 200, onnx.text
    session = onnxruntime.InferenceSession(onnx.content, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {session.get_inputs()[0].name: X})
    served = client.post(f"/v1/models/{model['id']}/predict", json={"instances": X.tolist()})
    assert [str(v) for v in outputs[0].tolist()] == served.json()["labels"]

    refused = client.get(f"/v1/models/{model['id']}/export", params={"format": "liblinear"})
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert "integer labels only" in detail and "'setosa'" in detail and "json, onnx" in detail


def test_binary_text_labels_and_a_class_weight_by_name(app, client):
    X, labels = flowers(3, n=80)
    binary = np.where(labels == "setosa", "spam", "ham").astype(object)
    dataset = post(client, csv_text(X, binary), "s.csv").json()
    model = train(app, client, dataset["id"], class_weight={"spam": 2.0})
    from sklearn.svm import LinearSVC

    reference = LinearSVC(C=C, tol=1e-12, max_iter=1_000_000, class_weight={"spam": 2.0})
    reference.fit(X, binary.astype(str))
    assert model["classes"] == ["ham", "spam"]
    predicted = client.post(f"/v1/models/{model['id']}/predict", json={"instances": X.tolist()})
    assert predicted.json()["labels"] == reference.predict(X).tolist()
    unknown = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                            "params": {"class_weight": {"eggs": 2.0}}})  # fmt: skip
    assert unknown.status_code == 422 and "eggs" in unknown.json()["detail"]


def test_a_regression_on_text_labels_is_refused(client):
    X, labels = flowers(4)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    refused = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "estimator": "LinearSVR"})
    assert refused.status_code == 422, refused.text
    assert "text labels" in refused.json()["detail"] and "setosa" in refused.json()["detail"]


def test_a_mixed_column_is_text_and_a_numeric_one_is_unchanged(client):
    mixed = b"label,a\n1,0.5\na,1\n1.0,2\n02,3\n2,1\n"
    body = post(client, mixed, "m.csv").json()
    # numbers in a text column are named as numbers: 1 and 1.0 are "1", 02 is "2"
    assert body["labels"]["classes"] == [{"label": "1", "count": 2}, {"label": "2", "count": 2},
                               {"label": "a", "count": 1}]  # fmt: skip
    numeric = post(client, b"label,a\n1,0.5\n-1,1\n1.0,2\n-1,3\n", "n.csv").json()
    assert numeric["labels"]["classes"] == [{"label": -1, "count": 2}, {"label": 1, "count": 2}]
    strings = parquet_data(np.ones((4, 4)), ["1", "-1", "1.0", "-1"])
    assert post(client, strings, "n.parquet").json()["labels"] == numeric["labels"]


def test_label_length_bound(client, settings):
    at_limit = "x" * MAX_LABEL_CHARS
    ok = post(client, f"label,a\n{at_limit},1\nb,2\n".encode(), "ok.csv")
    assert ok.status_code == 201 and ok.json()["labels"]["classes"][1]["label"] == at_limit
    client.delete(f"/v1/datasets/{ok.json()['id']}")
    over = post(client, f"label,a\nb,1\nb,2\n{at_limit}y,2\n".encode(), "long.csv")
    assert over.status_code == 422, over.text
    assert over.json()["detail"].startswith("line 4: the label has 256 characters")
    nothing_stored(client, settings)
    column = ["b", "x" * (MAX_LABEL_CHARS + 1)]
    over = post(client, parquet_data(np.ones((2, 4)), column), "long.parquet")
    assert over.status_code == 422 and over.json()["detail"].startswith("row 2: the label has")
    nothing_stored(client, settings)


def test_class_count_bound(client, settings):
    def classes(n):
        return ("label,a\n" + "".join(f"c{i},{i % 7}\n" for i in range(n))).encode()

    at_limit = post(client, classes(MAX_CLASSES), "k.csv").json()["labels"]["classes"]
    assert len(at_limit) == MAX_CLASSES and at_limit[-1] == {"label": "c999", "count": 1}
    client.delete(f"/v1/datasets/{client.get('/v1/datasets').json()['items'][0]['id']}")
    over = post(client, classes(MAX_CLASSES + 1), "k.csv")
    assert over.status_code == 422, over.text
    assert over.json()["detail"].startswith(f"line {MAX_CLASSES + 2}: more than {MAX_CLASSES}")
    nothing_stored(client, settings)


def test_an_empty_label_names_its_line(client, settings):
    for params in ({}, {"empty_cells": "zero"}):
        refused = post(client, b"label,a\nspam,1\n,2\n", "e.csv", **params)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == "line 3: the label is empty"
        nothing_stored(client, settings)
    missing = parquet_data(np.ones((2, 4)), ["spam", None])
    refused = post(client, missing, "e.parquet")
    assert refused.status_code == 422 and "row 2: the label is missing" in refused.json()["detail"]
