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

    return LinearSVC(C=C, tol=1e-10, max_iter=1_000_000, random_state=0).fit(X, labels)


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
        rtol=1e-5, atol=1e-5,
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
    top = client.get(f"/v1/models/{model['id']}/coefficients", params={"top": 12}).json()
    assert {item["output"] for item in top["items"]} <= set(NAMES)
    stats = client.get(f"/v1/datasets/{dataset['id']}/stats").json()
    assert [c["label"] for c in stats["classes"]] == sorted(NAMES)

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

    reference = LinearSVC(C=C, tol=1e-10, max_iter=1_000_000, random_state=0,
                          class_weight={"spam": 2.0})
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


def test_a_regressor_is_neither_validated_nor_evaluated_on_text_labels(app, client):
    """A regressor's validation set or evaluated dataset of text labels was scored against the
    stored codes of the names (0..k-1) as if they were targets: a 202, and an MSE of 3.6."""
    X, labels = flowers(4)
    names = post(client, csv_text(X, labels), "f.csv").json()
    numbers = post(client, csv_text(X, np.round(X[:, 0], 1)), "n.csv").json()
    body = {"dataset_id": numbers["id"], "estimator": "LinearSVR",
            "validation_dataset_id": names["id"]}  # fmt: skip
    refused = client.post("/v1/jobs", json=body)
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"] == "validation_dataset_id"
    assert "text labels" in refused.json()["detail"]
    model = train(app, client, numbers["id"], estimator="LinearSVR")
    url = f"/v1/models/{model['id']}/evaluate"
    answer = client.post(url, json={"dataset_id": names["id"]})
    assert answer.status_code == 422, answer.text
    assert "text labels" in answer.json()["detail"] and "setosa" in answer.json()["detail"]
    assert client.post(url, json={"dataset_id": numbers["id"]}).status_code == 200


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


def test_every_predict_form_returns_the_names(app, client):
    """predict (JSON and LIBSVM text with a text label), a background run's CSV, the MLflow
    invocations and the v2 infer output all answer the class names of the same rows."""
    import csv

    from tests.app.conftest import finished_run

    X, labels = flowers(5, n=30)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    model = train(app, client, dataset["id"])
    url = f"/v1/models/{model['id']}"
    expected = sklearn_reference(X, labels.astype(str)).predict(X).tolist()
    predicted = client.post(f"{url}/predict", json={"instances": X.tolist()})
    assert predicted.json()["labels"] == expected
    X_libsvm = "".join(
        "x " + " ".join(f"{j}:{v:g}" for j, v in enumerate(row) if v) + "\n" for row in X
    )  # zero-based indices, as the model's table columns; a text label leads each line
    text = client.post(f"{url}/predict", content=X_libsvm, headers={"content-type": "text/plain"})
    assert text.status_code == 200, text.text
    assert text.json()["labels"] == expected

    run = client.post(f"{url}/predictions", json={"dataset_id": dataset["id"]})
    assert run.status_code == 202, run.text
    assert finished_run(client, run.headers["location"])["status"] == "succeeded"
    rows = list(csv.reader(io.StringIO(client.get(run.headers["location"]).text)))
    assert rows[0] == ["row", "label", *(f"decision_value_{c}" for c in sorted(NAMES))]
    assert [r[1] for r in rows[1:]] == expected

    invoked = client.post(f"{url}/invocations", json={"instances": X.tolist()})
    assert invoked.status_code == 200 and invoked.json()["predictions"] == expected
    infer = {"inputs": [{"name": "x", "shape": list(X.shape), "datatype": "FP64",
                         "data": X.ravel().tolist()}]}  # fmt: skip
    v2 = client.post(f"/v2/models/{model['id']}/infer", json=infer)
    assert v2.status_code == 200, v2.text
    label = next(o for o in v2.json()["outputs"] if o["name"] == "label")
    assert label["datatype"] == "BYTES" and label["data"] == expected
    meta = client.get(f"/v2/models/{model['id']}").json()
    assert meta["outputs"][0]["datatype"] == "BYTES" and meta["parameters"]["classes"] == sorted(
        NAMES
    )


def test_evaluate_counts_a_label_the_model_never_saw_as_wrong(app, client):
    X, labels = flowers(6)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    model = train(app, client, dataset["id"])
    X_test, test_labels = flowers(7, n=30)
    test_labels[:5] = "rosa"  # a class the model has not got
    test = post(client, csv_text(X_test, test_labels), "t.csv").json()
    report = client.post(f"/v1/models/{model['id']}/evaluate", json={"dataset_id": test["id"]})
    assert report.status_code == 200, report.text
    predicted = sklearn_reference(X, labels.astype(str)).predict(X_test)
    from sklearn.metrics import confusion_matrix

    order = [*sorted(NAMES), "rosa"]
    assert report.json()["labels"] == order
    assert report.json()["accuracy"] == pytest.approx(np.mean(predicted == test_labels))
    assert report.json()["confusion_matrix"] == confusion_matrix(
        test_labels.astype(str), predicted, labels=order
    ).tolist()
    unrelated = post(client, b"label,a,b,c,d\nx,1,0,0,0\ny,0,1,0,0\n", "u.csv").json()
    refused = client.post(f"/v1/models/{model['id']}/evaluate",
                          json={"dataset_id": unrelated["id"]})  # fmt: skip
    assert refused.status_code == 422 and "not a test set" in refused.json()["detail"]


def test_a_validation_set_is_scored_by_class_name(app, client):
    X, labels = flowers(8)
    train_set = post(client, csv_text(X, labels), "f.csv").json()
    X_valid, valid_labels = flowers(9, n=30)
    valid_labels = np.where(valid_labels == "setosa", "rosa", valid_labels)  # codes differ too
    valid = post(client, csv_text(X_valid, valid_labels), "v.csv").json()
    job = client.post("/v1/jobs", json={"dataset_id": train_set["id"],
                                        "validation_dataset_id": valid["id"],
                                        "params": {"C": C, "tol": 1e-8, "max_iter": 100_000}})
    assert job.status_code == 202, job.text  # fmt: skip
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    predicted = sklearn_reference(X, labels.astype(str)).predict(X_valid)
    model = client.get(f"/v1/models/{model_id}").json()
    assert model["validation_accuracy"] == pytest.approx(np.mean(predicted == valid_labels))


def test_text_after_a_block_of_numbers_rewrites_the_earlier_labels(tmp_path, monkeypatch):
    """The column turns text in a later block (CSV) or row group (Parquet): the labels already
    stored as numbers are named as numbers and every row ends as its class's code."""
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 4096)  # after the header's first 64 KiB
    cells = ["1", "2", "1.0", "3"] * 6000 + ["2", "1", "spam", "2", "ham", "3", "1.0"]
    path = tmp_path / "mixed.csv"
    path.write_text("label,a\n" + "".join(f"{c},{i}\n" for i, c in enumerate(cells)))
    assert path.stat().st_size > 2 * (1 << 16)
    meta = parse_to_arrays(str(path), str(tmp_path / "csv"), fmt="csv")
    names = ["1", "2", "3", "ham", "spam"]
    assert [c["label"] for c in meta["classes"]] == names
    y = np.load(tmp_path / "csv" / "y.npy")
    as_named = ["1" if c == "1.0" else c for c in cells]
    assert [names[int(v)] for v in y] == as_named

    table = pa.table({"label": cells, "a": np.arange(float(len(cells)))})
    pq.write_table(table, tmp_path / "mixed.parquet", row_group_size=1000)
    meta = parse_to_arrays(str(tmp_path / "mixed.parquet"), str(tmp_path / "pq"), fmt="parquet")
    assert [c["label"] for c in meta["classes"]] == names
    assert [names[int(v)] for v in np.load(tmp_path / "pq" / "y.npy")] == as_named


def test_more_numbers_than_classes_before_a_text_label_is_refused(tmp_path, monkeypatch):
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 64)  # the text label in a block of its own
    path = tmp_path / "many.csv"
    rows = ["0.5,1\n"] * 20_000 + [f"{i / 7},1\n" for i in range(MAX_CLASSES + 50)]
    path.write_text("label,a\n" + "".join(rows) + "spam,1\n")
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv")
    line = len(rows) + 2
    assert meta["error"].startswith(f"line {line}: a text label after more than {MAX_CLASSES}")
    assert not (tmp_path / "out").exists()
    # within one block, the class that is one too many is named where it appears
    monkeypatch.setattr(delimited, "BLOCK_BYTES", 1 << 20)
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv")
    # 0.5 and 999 more numbers are 1000 classes: the next number is one too many
    assert meta["error"].startswith(f"line {20_000 + MAX_CLASSES + 1}: more than {MAX_CLASSES} ")


def test_the_skops_export_predicts_the_names(app, client, tmp_path):
    import skops.io

    X, labels = flowers(10)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    model = train(app, client, dataset["id"])
    exported = client.get(f"/v1/models/{model['id']}/export", params={"format": "skops"})
    assert exported.status_code == 200, exported.text
    path = tmp_path / "m.skops"
    path.write_bytes(exported.content)
    estimator = skops.io.load(path, trusted=skops.io.get_untrusted_types(file=path))
    served = client.post(f"/v1/models/{model['id']}/predict", json={"instances": X.tolist()})
    assert estimator.predict(X).tolist() == served.json()["labels"]
    assert estimator.classes_.tolist() == sorted(NAMES)


def test_probabilities_follow_the_named_classes(app, client):
    """A calibrated model (probability=true): the probability columns are in the order of its
    classes, each row's largest is its predicted name, and evaluate scores them by name."""
    X, labels = flowers(11, n=120)
    dataset = post(client, csv_text(X, labels), "f.csv").json()
    model = train(app, client, dataset["id"], probability=True)
    assert model["classes"] == sorted(NAMES)
    answer = client.post(f"/v1/models/{model['id']}/predict", params={"probabilities": "true"},
                         json={"instances": X.tolist()}).json()  # fmt: skip
    P = np.asarray(answer["probabilities"])
    assert P.shape == (120, 3) and np.allclose(P.sum(axis=1), 1.0)
    truth = np.searchsorted(sorted(NAMES), labels.astype(str))
    report = client.post(f"/v1/models/{model['id']}/evaluate",
                         json={"dataset_id": dataset["id"]}).json()  # fmt: skip
    from sklearn.metrics import log_loss

    assert report["log_loss"] == pytest.approx(log_loss(truth, P, labels=[0, 1, 2]), rel=1e-9)
    brier = np.mean(np.sum((P - np.eye(3)[truth]) ** 2, axis=1))
    assert report["brier_score"] == pytest.approx(brier, rel=1e-9)


def test_a_numeric_model_on_a_text_dataset_is_matched_by_name(service):
    """Classes 1 and 2 of a model trained on numbers are the names "1" and "2" of a text
    dataset; its class "x" is one the model lacks."""
    model_id = service.add_model([[1.0, -1.0]], [0.0], classes=[1, 2], zero_based=True)
    body = b"label,a,b\n2,1,0\n1,0,1\nx,1,0\n2,0,1\n"
    dataset = service.client.post("/v1/datasets", files={"file": ("m.csv", body)}).json()
    assert [c["label"] for c in dataset["labels"]["classes"]] == ["1", "2", "x"]
    report = service.client.post(f"/v1/models/{model_id}/evaluate",
                                 json={"dataset_id": dataset["id"]}).json()  # fmt: skip
    # decision a - b: rows 1 and 3 predict 2, rows 2 and 4 predict 1
    assert report["labels"] == [1, 2, "x"]
    assert report["confusion_matrix"] == [[1, 0, 0], [1, 1, 0], [0, 1, 0]]
    assert report["accuracy"] == pytest.approx(2 / 4)


def test_a_text_model_on_a_numeric_dataset_is_matched_by_name(app, client):
    X, labels = flowers(12)
    mixed = np.where(labels == "setosa", "1", labels)  # the class "1" beside two words
    dataset = post(client, csv_text(X, mixed), "f.csv").json()
    model = train(app, client, dataset["id"])
    assert model["classes"] == ["1", "versicolor", "virginica"]
    X_test, test_labels = flowers(13, n=30)
    numbers = np.where(test_labels == "setosa", 1.0, 3.0)  # 3 is no class of the model
    test = post(client, csv_text(X_test, numbers), "n.csv").json()
    assert [c["label"] for c in test["labels"]["classes"]] == [1, 3]
    report = client.post(f"/v1/models/{model['id']}/evaluate", json={"dataset_id": test["id"]})
    assert report.status_code == 200, report.text
    predicted = sklearn_reference(X, mixed.astype(str)).predict(X_test)
    truth = np.where(numbers == 1.0, "1", "3")
    assert report.json()["labels"] == ["1", "versicolor", "virginica", "3"]
    assert report.json()["accuracy"] == pytest.approx(np.mean(predicted == truth))


def test_npz_text_labels(app, client, settings):
    """An npz whose y is a unicode array (as the client sends (X, y) with text labels): the
    same classes and model as the CSV; a label over the bound is refused before it is read."""
    from margin_client._encode import npz_bytes

    X, labels = flowers(14)
    uploaded = post(client, npz_bytes(X, labels), "f.npz")  # an object array of str
    assert uploaded.status_code == 201, uploaded.text
    names, counts = np.unique(labels.astype(str), return_counts=True)
    assert uploaded.json()["labels"]["classes"] == [
        {"label": n, "count": int(c)} for n, c in zip(names, counts, strict=True)
    ]
    model = train(app, client, uploaded.json()["id"])
    predicted = client.post(f"/v1/models/{model['id']}/predict", json={"instances": X.tolist()})
    expected = sklearn_reference(X, labels.astype(str)).predict(X).tolist()
    assert predicted.json()["labels"] == expected
    client.delete(f"/v1/datasets/{uploaded.json()['id']}")
    wide = labels.astype(str).astype(f"<U{MAX_LABEL_CHARS + 1}")
    wide[3] = "x" * (MAX_LABEL_CHARS + 1)
    refused = post(client, npz_bytes(X, wide), "w.npz")
    assert refused.status_code == 422 and "256 characters" in refused.json()["detail"]
    # the width bounds the array, whose names may all be short: the message says so
    padded = post(client, npz_bytes(X, labels.astype(str).astype("<U300")), "p.npz")
    assert padded.status_code == 422
    assert "a unicode array of 300 characters a label (its width)" in padded.json()["detail"]
    nothing_stored(client, settings)


def test_quoted_and_spaced_names_and_an_open_quote(client, settings):
    """A name may be quoted (holding the separator) and is read without surrounding spaces; a
    quote left open is a line of the wrong cell count, named."""
    body = b'label,a\n"Smith, J",1\n  ham ,2\n"ham",3\r\nSmith\xc3\xa9,4\n'
    uploaded = post(client, body, "q.csv").json()
    client.delete(f"/v1/datasets/{uploaded['id']}")
    classes = uploaded["labels"]["classes"]
    assert classes == [{"label": "Smith, J", "count": 1}, {"label": "Smith\u00e9", "count": 1},
                       {"label": "ham", "count": 2}]  # fmt: skip
    refused = post(client, b'label,a\nspam,1\n"ham,2\nspam,3\n', "open.csv")
    assert refused.status_code == 422 and refused.json()["detail"].startswith("line 3: expected 2")
    nothing_stored(client, settings)


def test_a_text_validation_set_of_a_numeric_training_set_is_scored_by_name(app, client):
    """Training labels 1, 2, 3 (numbers) and a validation set whose labels are text ("1", "2"
    and the class "x" the model lacks): the validation accuracy matches the rows by name, as
    evaluate does, rather than counting every row wrong."""
    X, labels = flowers(14)
    numbers = np.searchsorted(sorted(NAMES), labels) + 1.0
    train_set = post(client, csv_text(X, numbers), "n.csv").json()
    assert [c["label"] for c in train_set["labels"]["classes"]] == [1, 2, 3]
    X_valid, valid_labels = flowers(15, n=30)
    valid_text = np.asarray([{"setosa": "1", "versicolor": "2"}.get(v, "x") for v in valid_labels])
    valid = post(client, csv_text(X_valid, valid_text), "v.csv").json()
    assert [c["label"] for c in valid["labels"]["classes"]] == ["1", "2", "x"]
    job = client.post("/v1/jobs", json={"dataset_id": train_set["id"],
                                        "validation_dataset_id": valid["id"],
                                        "params": {"C": C, "tol": 1e-8, "max_iter": 100_000}})
    assert job.status_code == 202, job.text  # fmt: skip
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]
    predicted = sklearn_reference(X, numbers).predict(X_valid)
    expected = np.mean([str(int(p)) == t for p, t in zip(predicted, valid_text, strict=True)])
    assert expected > 0.5  # the reference gets most rows right: a score of 0 is the bug
    model = client.get(f"/v1/models/{model_id}").json()
    assert model["validation_accuracy"] == pytest.approx(expected)
    report = client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": valid["id"]})
    assert report.json()["accuracy"] == pytest.approx(expected)


def test_a_block_of_text_labels_holds_no_more_memory_than_one_of_numbers():
    """A wide table's block read with text labels keeps the label cells, not every cell of the
    block as a Python string (which held twice the numeric read's peak: ~110 MB for a 4 MB
    block of 500 two-digit columns, against ~57 MB)."""

    from app.services.formats.delimited import BLOCK_BYTES

    row = ",".join(["12"] * 500)
    n = BLOCK_BYTES // (len(row) + 6)
    header = "label," + ",".join(f"f{i}" for i in range(500)) + "\n"

    def peak(label: str) -> int:
        return _read_peak((header + "".join(f"{label},{row}\n" for _ in range(n))).encode(), n)

    assert peak("spam") < 1.2 * peak("1")


@pytest.mark.parametrize("text_first", [True, False])
def test_an_empty_label_read_as_zero_is_no_text_class(tmp_path, monkeypatch, text_first):
    """With empty_cells=zero an empty label is 0 in a numeric column, but a text column never
    gets a made-up class "0": the empty label is refused by its line whether the text came in
    an earlier block or comes in a later one (each block here holds only numbers or only text,
    so the block of the empty label reads as numbers)."""
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 4096)  # after the header's first 64 KiB
    numbers, text = ["1,3\n"] * 20_000, ["spam,1\n"] * 20_000
    rows = [*numbers, ",2\n", *numbers]
    rows = [*text, *rows] if text_first else [*rows, *text]
    path = tmp_path / "empty.csv"
    path.write_text("label,a\n" + "".join(rows))
    options = {"empty_cells": "zero"}
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv", options=options)
    empty_line = rows.index(",2\n") + 2
    assert meta["error"].startswith(f"line {empty_line}: the label is empty")
    assert not (tmp_path / "out").exists()
    # a numeric column reads the empty label as 0, as before text labels
    path.write_text("label,a\n" + "".join([*numbers, ",2\n", *numbers]))
    meta = parse_to_arrays(str(path), str(tmp_path / "num"), fmt="csv", options=options)
    assert meta.get("error") is None
    assert [c["label"] for c in meta["classes"]] == [0, 1]
    y = np.load(tmp_path / "num" / "y.npy")
    assert y[20_000] == 0 and np.all(np.delete(y, 20_000) == 1)


def test_a_numeric_target_is_not_kept_as_candidate_class_names():
    """A block of distinct numeric labels (a regression target) is more than MAX_CLASSES
    numbers: none of them is kept for naming later text labels, so the numeric read holds no
    more than it does for a few classes (before: every distinct value of the block was put in a
    dict first, ~40% over the peak)."""

    from app.services.formats.delimited import BLOCK_BYTES

    n = BLOCK_BYTES // 16

    def peak(label) -> int:
        return _read_peak(("label,a\n" + "".join(f"{label(i)},1\n" for i in range(n))).encode(), n)

    assert peak(lambda i: f"{i * 0.001:.3f}") < 1.1 * peak(lambda i: f"{i % 3:.3f}")


def test_digits_numpy_does_not_read_are_names(client):
    """Python's float() reads Arabic-Indic and full-width digits, numpy's reader does not: such
    labels are class names as written, not the numbers 1 and 2 (nor "1" and "2")."""
    body = "label,a\n\u0661,1\n\u0662,2\n\uff11,3\n1,4\n".encode()
    uploaded = post(client, body, "d.csv")
    assert uploaded.status_code == 201, uploaded.text
    classes = [c["label"] for c in uploaded.json()["labels"]["classes"]]
    assert classes == ["1", "\u0661", "\u0662", "\uff11"]  # code point order, as sorted()


def _read_peak(body: bytes, n_rows: int) -> int:
    """The traced peak of reading a CSV body through DelimitedChunks (asserting its row count)."""
    import tracemalloc

    from app.services.formats.delimited import DelimitedChunks

    tracemalloc.start()
    try:
        rows = sum(len(chunk[3]) for chunk in DelimitedChunks(io.BytesIO(body), ",", {}))
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == n_rows
    return held


_PARSE_PEAK = """
import resource, sys
from app.services.dataset_files import parse_to_arrays
meta = parse_to_arrays(sys.argv[1], sys.argv[2], fmt="parquet")
print(meta.get("error", "no error"))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _one_name_file(tmp_path, name: str):
    """A Parquet file of one name over a million rows (dictionary-encoded, one row group)."""
    n = 1_000_000
    labels = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), [name])
    path = tmp_path / f"{len(name)}.parquet"
    table = pa.table({"label": labels.dictionary_decode(), "a": np.zeros(n)})
    pq.write_table(table, path, row_group_size=n)
    assert path.stat().st_size < 100_000
    return path


def _parse_peak_kb(path, tmp_path, error: str = "no error") -> int:
    """The peak resident memory of a process that parses the Parquet file at `path`, which
    ends with `error`."""
    import subprocess
    import sys

    run = [sys.executable, "-c", _PARSE_PEAK, str(path), str(tmp_path / f"out-{path.stem}")]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, check=True)
    said, peak = done.stdout.splitlines()[-2:]
    assert said == error, done.stdout
    return int(peak)


def test_a_repeated_long_parquet_name_costs_its_indices_not_its_copies(tmp_path):
    """A dictionary-encoded label column of one 255-character name over a million rows (a 33 kB
    file) decoded, read as plain strings, to a copy of the name per row (255 MB more than a
    one-character name, beyond the row group's decoded bound); read as a dictionary, the
    names cost their indices."""
    long, short = _one_name_file(tmp_path, "x" * MAX_LABEL_CHARS), _one_name_file(tmp_path, "x")
    assert _parse_peak_kb(long, tmp_path) < _parse_peak_kb(short, tmp_path) + 64 * 1024


def test_a_footer_that_leaves_out_the_dictionary_does_not_hide_it(tmp_path):
    """The footer's list of a column chunk's encodings is the writer's word: the dictionary-
    encoded labels above, listed as DELTA_LENGTH_BYTE_ARRAY instead of RLE_DICTIONARY, were
    read as plain strings (a copy of the name per row, 255 MB more); the encodings in the page
    headers decide."""
    long, short = _one_name_file(tmp_path, "x" * MAX_LABEL_CHARS), _one_name_file(tmp_path, "x")
    data = bytearray(long.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    # the label column's metadata: field 1 type BYTE_ARRAY (6), then field 2 its encodings
    at = data.index(b"\x15\x0c\x19", footer) + 3
    listed = data[at + 1 : at + 1 + (data[at] >> 4)]
    data[at + 1 + listed.index(2 * 8)] = 2 * 6  # RLE_DICTIONARY -> DELTA_LENGTH_BYTE_ARRAY
    long.write_bytes(data)
    encodings = pq.read_metadata(long).row_group(0).column(0).encodings
    assert "DELTA_LENGTH_BYTE_ARRAY" in encodings and "RLE_DICTIONARY" not in encodings
    assert _parse_peak_kb(long, tmp_path) < _parse_peak_kb(short, tmp_path) + 64 * 1024


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_parquet_label_that_is_not_utf8_names_its_row(client, settings, dictionary):
    """pyarrow reads a Parquet string column without checking it: bytes that are not UTF-8 were
    refused with Python's "'utf-8' codec can't decode byte 0xff in position 0", no row named."""
    items = [b"spam", b"ham", b"\xff\xfe", b"ham"]
    offsets = np.cumsum([0] + [len(i) for i in items]).astype(np.int32)
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(items))]
    labels = pa.Array.from_buffers(pa.string(), len(items), buffers)
    out = io.BytesIO()
    table = pa.table({"label": labels, "a": np.arange(4.0)})
    pq.write_table(table, out, use_dictionary=dictionary, row_group_size=2)
    refused = post(client, out.getvalue(), "bad.parquet")
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == "row 3: the label is not UTF-8 text"
    nothing_stored(client, settings)


def test_a_long_name_that_is_not_utf8_is_found_without_a_copy_per_row(tmp_path):
    """The row of a name that is not UTF-8 was found on the decoded column: a dictionary of one
    8,000-byte name over 65,536 rows (a 1.5 kB file) became a copy of the name per row, +1 GB
    of the parser; the dictionary's names are checked once each."""

    def one_name(size: int):
        name = b"\xff" * size
        offsets = pa.py_buffer(np.array([0, size], np.int32).tobytes())
        names = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(name)])
        n = 65_536
        labels = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), names)
        path = tmp_path / f"bad{size}.parquet"
        pq.write_table(pa.table({"label": labels, "a": np.zeros(n)}), path)
        assert path.stat().st_size < 10_000
        return _parse_peak_kb(path, tmp_path, "row 1: the label is not UTF-8 text")

    assert one_name(8000) < one_name(1) + 128 * 1024


@pytest.mark.parametrize("encoding", ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"])
def test_parquet_label_encodings(client, settings, encoding):
    """Labels read as a dictionary: pyarrow cannot read the delta encodings so (a 500, "Not yet
    implemented: DecodeArrow of DictAccumulator"); DELTA_LENGTH_BYTE_ARRAY is read as plain
    strings (its pages hold every byte), DELTA_BYTE_ARRAY, whose pages hold only what differs
    from the previous name, is refused by name."""
    labels = ["spam", "ham", "spam", "eggs"] * 10
    out = io.BytesIO()
    table = pa.table({"label": labels, "a": np.arange(40.0)})
    pq.write_table(table, out, use_dictionary=False, column_encoding={"label": encoding})
    answer = post(client, out.getvalue(), f"{encoding}.parquet")
    if encoding == "DELTA_BYTE_ARRAY":
        assert answer.status_code == 422, answer.text
        assert "DELTA_BYTE_ARRAY" in answer.json()["detail"]
        nothing_stored(client, settings)
        return
    assert answer.status_code == 201, answer.text
    counts = {c["label"]: c["count"] for c in answer.json()["labels"]["classes"]}
    assert counts == {"eggs": 10, "ham": 10, "spam": 20}
