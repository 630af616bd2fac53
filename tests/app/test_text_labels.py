"""Text class labels through the service over HTTP: the upload names the classes by their text,
a job trains on them and its model predicts the same texts as scikit-learn's LinearSVC fitted on
the same rows (same C, tight tolerances), every predict form answers the names, evaluate and the
validation accuracy match classes by name, JSON, ONNX and skops exports carry the names and
LIBLINEAR's refuses; a regression on text labels is refused. The reading of text label columns
is tests/app/test_text_labels_upload.py (CSV, TSV) and test_text_labels_parquet.py (Parquet,
npz)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from app.services.dataset_files import load_arrays
from app.services.datasets import dataset_dir
from tests.app.text_label_helpers import (
    NAMES,
    C,
    csv_text,
    flowers,
    parquet_data,
    post,
    sklearn_reference,
    train,
)

pytestmark = pytest.mark.timeout(180)


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
    model = train(app, client, train_set["id"], validation=valid["id"])
    predicted = sklearn_reference(X, labels.astype(str)).predict(X_valid)
    assert model["validation_accuracy"] == pytest.approx(np.mean(predicted == valid_labels))


def test_a_validation_table_of_the_training_columns_in_another_order_is_read_by_name(
    app, client
):
    """Its columns d, c, b, a were read as a, b, c, d: the validation accuracy scored every row
    on the wrong features. Columns partly the training set's are a 422 naming one."""
    X, labels = flowers(8)
    train_set = post(client, csv_text(X, labels), "f.csv").json()
    X_valid, valid_labels = flowers(9, n=30)
    reversed_text = csv_text(X_valid[:, ::-1], valid_labels).replace(b"a,b,c,d", b"d,c,b,a", 1)
    valid = post(client, reversed_text, "v.csv").json()
    model = train(app, client, train_set["id"], validation=valid["id"])
    predicted = sklearn_reference(X, labels.astype(str)).predict(X_valid)
    assert model["validation_accuracy"] == pytest.approx(np.mean(predicted == valid_labels))
    partly = post(client, csv_text(X_valid, valid_labels).replace(b"a,b,c,d", b"a,b,c,e", 1),
                  "p.csv").json()  # fmt: skip
    job = client.post("/v1/jobs", json={"dataset_id": train_set["id"],
                                        "validation_dataset_id": partly["id"]})  # fmt: skip
    assert job.status_code == 422 and "'e'" in job.json()["detail"], job.text


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
    model = train(app, client, train_set["id"], validation=valid["id"])
    predicted = sklearn_reference(X, numbers).predict(X_valid)
    expected = np.mean([str(int(p)) == t for p, t in zip(predicted, valid_text, strict=True)])
    assert expected > 0.5  # the reference gets most rows right: a score of 0 is the bug
    assert model["validation_accuracy"] == pytest.approx(expected)
    report = client.post(f"/v1/models/{model['id']}/evaluate", json={"dataset_id": valid["id"]})
    assert report.json()["accuracy"] == pytest.approx(expected)
