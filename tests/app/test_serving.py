"""Serving a model trained on a CSV upload the ways users' tools expect: predict by feature name,
the registry (names, versions, aliases, references wherever v1 takes a model id), lineage, ONNX
(onnxruntime) and skops (scikit-learn) exports that agree with the service, the Open Inference
Protocol's published request and response shapes, and MLflow's scoring shapes."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest
import skops.io

from app.jobs.runner import RunContext, run_job
from solvers.io import read_libsvm
from tests.app.conftest import HEART

NAMES = ["age", "sex", "cp", "bps", "chol", "fbs", "ecg", "hr", "angina", "op", "slope", "ca",
         "thal"]  # fmt: skip


def heart_csv() -> tuple[bytes, np.ndarray, np.ndarray]:
    X, y = read_libsvm(str(HEART))
    X = X.toarray()
    lines = ["label," + ",".join(NAMES)]
    lines += [f"{t:g}," + ",".join(f"{v:.17g}" for v in row) for row, t in zip(X, y, strict=True)]
    return ("\n".join(lines) + "\n").encode(), X, y


def train(app, client, dataset_id: str, **params) -> str:
    body = {"dataset_id": dataset_id, "params": {"tol": 1e-4, **params}}
    job = client.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    return client.get(f"/v1/jobs/{job.json()['id']}").json()["model_id"]


@pytest.fixture
def served(app, client):
    text, X, y = heart_csv()
    dataset = client.post("/v1/datasets", files={"file": ("heart.csv", text)}).json()
    model_id = train(app, client, dataset["id"])
    return {"X": X, "y": y, "model": model_id, "dataset": dataset}


def predict(client, ref, body):
    response = client.post(f"/v1/models/{ref}/predict", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_predict_by_records_matches_dense_rows(client, served):
    X, model = served["X"], served["model"]
    assert client.get(f"/v1/models/{model}").json()["feature_names"] == NAMES
    dense = predict(client, model, {"instances": X[:20].tolist()})
    records = [{n: v for n, v in zip(NAMES, row, strict=True) if v != 0} for row in X[:20]]
    by_name = predict(client, model, {"records": records})  # a missing name is 0
    assert by_name["labels"] == dense["labels"]
    np.testing.assert_allclose(by_name["decision_values"], dense["decision_values"], atol=1e-12)
    unknown = client.post(f"/v1/models/{model}/predict", json={"records": [{"agee": 1.0}]})
    assert unknown.status_code == 422 and "'agee'" in unknown.json()["detail"]
    text = client.post(f"/v1/models/{model}/predict", json={"records": [{"age": "old"}]})
    assert text.status_code == 422 and "'age' must be a finite number" in text.json()["detail"]


def test_lineage(client, served):
    lineage = client.get(f"/v1/models/{served['model']}/lineage").json()
    assert lineage["dataset"]["sha256"] == served["dataset"]["sha256"]
    assert lineage["dataset"]["format"] == "csv" and lineage["params"]["tol"] == 1e-4
    assert lineage["solver"]["status"] == "converged" and lineage["package_version"] == "0.1.0"
    assert lineage["commit"] is None or len(lineage["commit"]) == 40
    assert lineage["metrics"]["train_accuracy"] > 0.8


def test_registry_names_versions_and_aliases(app, client, served):
    first = served["model"]
    second = train(app, client, served["dataset"]["id"], C=0.01)
    created = {"name": "heart", "description": "d", "tags": {"team": "cardio"}}
    assert client.post("/v1/registered-models", json=created).status_code == 201
    assert client.post("/v1/registered-models", json={"name": "heart"}).status_code == 409
    for bad in ("mdl_x", "a@b", "a/b", ""):
        assert client.post("/v1/registered-models", json={"name": bad}).status_code == 422
    v1 = client.post("/v1/registered-models/heart/versions", json={"model_id": first})
    v2 = client.post("/v1/registered-models/heart/versions", json={"model_id": second})
    assert (v1.json()["version"], v2.json()["version"]) == (1, 2)
    put = client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    assert put.status_code == 200 and put.json()["model_id"] == first
    aliases = "/v1/registered-models/heart/aliases"
    assert client.put(f"{aliases}/v3", json={"version": 1}).status_code == 422
    assert client.put(f"{aliases}/v1000000000", json={"version": 1}).status_code == 422  # was 200
    assert client.put(f"{aliases}/x", json={"version": 9}).status_code == 404
    X = served["X"][:5].tolist()
    by_id = predict(client, first, {"instances": X})
    assert predict(client, "heart@production", {"instances": X}) == by_id
    assert predict(client, "heart@v1", {"instances": X}) == by_id
    assert client.get("/v1/models/heart@production").json()["id"] == first
    assert client.get("/v1/models/heart@v2/lineage").json()["model_id"] == second
    assert client.get("/v1/models/heart@v2/export?format=json").status_code == 200
    assert client.post("/v1/models/heart@nope/predict", json={"instances": X}).status_code == 404
    # the alias moves in one step; a model an alias points at cannot be deleted
    client.put("/v1/registered-models/heart/aliases/production", json={"version": 2})
    app.state.alias_cache.clear()
    moved = predict(client, "heart@production", {"instances": X})
    assert moved == predict(client, second, {"instances": X})
    blocked = client.delete(f"/v1/models/{second}")
    assert blocked.status_code == 409 and "heart@production" in blocked.json()["detail"]
    assert client.delete("/v1/registered-models/heart/versions/2").status_code == 409
    info = client.get("/v1/registered-models/heart").json()
    assert info["aliases"] == {"production": 2} and info["latest_version"] == 2
    assert info["tags"] == {"team": "cardio"}
    patched = client.patch("/v1/registered-models/heart/versions/1", json={"tags": {"a": "b"}})
    assert patched.json()["tags"] == {"a": "b"}
    lineage = client.get(f"/v1/models/{second}/lineage").json()
    assert lineage["registered"] == [{"name": "heart", "version": 2, "aliases": ["production"]}]
    assert client.delete(f"/v1/models/{first}").status_code == 204  # its version goes with it
    versions = client.get("/v1/registered-models/heart/versions").json()["items"]
    assert [v["version"] for v in versions] == [2]


def test_latest_version_is_the_newest_version_that_exists(app, client, served):
    """A version goes with its model's deletion (or its own): the name's latest_version said 2
    for a version 2 that was gone (the dashboard linked to it, a 404), while the protocol's
    bare name served version 1. Numbers are still never reused."""
    first = served["model"]
    second = train(app, client, served["dataset"]["id"], C=0.01)
    client.post("/v1/registered-models", json={"name": "heart"})
    for model in (first, second):
        client.post("/v1/registered-models/heart/versions", json={"model_id": model})
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 2
    assert client.delete(f"/v1/models/{second}").status_code == 204
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 1
    assert client.get("/v1/registered-models").json()["items"][0]["latest_version"] == 1
    assert client.get("/v2/models/heart").json()["versions"] == [first]
    assert client.delete("/v1/registered-models/heart/versions/1").status_code == 204
    assert client.get("/v1/registered-models/heart").json()["latest_version"] is None
    again = client.post("/v1/registered-models/heart/versions", json={"model_id": first})
    assert again.json()["version"] == 3
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 3


def test_onnx_and_skops_exports_agree_with_the_service(client, served):
    X, model = served["X"], served["model"]
    service = predict(client, model, {"instances": X.tolist()})
    onnx_file = client.get(f"/v1/models/{model}/export", params={"format": "onnx"})
    assert onnx_file.status_code == 200
    session = ort.InferenceSession(onnx_file.content, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["label", "decision_values"]
    labels, decision = session.run(None, {"input": X})
    np.testing.assert_allclose(decision, service["decision_values"], atol=1e-6, rtol=0)
    assert labels.tolist() == service["labels"]
    skops_file = client.get(f"/v1/models/{model}/export", params={"format": "skops"}).content
    estimator = skops.io.loads(skops_file, trusted=skops.io.get_untrusted_types(data=skops_file))
    assert estimator.predict(X).tolist() == service["labels"]
    np.testing.assert_allclose(
        estimator.decision_function(X), np.ravel(service["decision_values"]), atol=1e-9
    )


def _skops_estimator(client, model: str):
    exported = client.get(f"/v1/models/{model}/export", params={"format": "skops"})
    assert exported.status_code == 200, exported.text
    data = exported.content
    return skops.io.loads(data, trusted=skops.io.get_untrusted_types(data=data))


def test_the_skops_export_knows_the_feature_names(client, served, binary):
    """The estimator of a model trained on named columns had no `feature_names_in_`: a table
    with its columns in another order was predicted without a word. scikit-learn now checks
    them, and predicts a table by name as the service predicts its rows."""
    X, model = served["X"], served["model"]
    service = predict(client, model, {"instances": X.tolist()})
    estimator = _skops_estimator(client, model)
    assert estimator.feature_names_in_.tolist() == NAMES
    assert estimator.n_features_in_ == len(NAMES) == X.shape[1]
    table = pa.table({name: X[:, j] for j, name in enumerate(NAMES)})
    assert estimator.predict(table).tolist() == service["labels"]
    np.testing.assert_allclose(
        estimator.decision_function(table), np.ravel(service["decision_values"]), atol=1e-9
    )
    with pytest.raises(ValueError, match="same order"):
        estimator.predict(table.select(NAMES[::-1]))
    unnamed = _skops_estimator(client, binary[0])  # rows written without names (as LIBSVM)
    assert not hasattr(unnamed, "feature_names_in_")
    assert unnamed.n_features_in_ == binary[1].shape[1]


def test_a_calibrated_model_serves_probabilities_through_onnx_and_v2(app, client, served):
    X = served["X"]
    model = train(app, client, served["dataset"]["id"], probability=True)
    service = predict(client, model, {"instances": X.tolist(), "probabilities": True})
    onnx_file = client.get(f"/v1/models/{model}/export", params={"format": "onnx"}).content
    session = ort.InferenceSession(onnx_file, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["label", "decision_values", "probabilities"]
    labels, _, probabilities = session.run(None, {"input": X})
    assert labels.tolist() == service["labels"]
    np.testing.assert_allclose(probabilities, service["probabilities"], atol=1e-9)
    client.post("/v1/registered-models", json={"name": "sure"})
    client.post("/v1/registered-models/sure/versions", json={"model_id": model})
    meta = client.get("/v2/models/sure").json()
    assert meta["outputs"][2] == {"name": "probabilities", "datatype": "FP64", "shape": [-1, 2]}
    request = {"inputs": [{"name": "x", "shape": list(X.shape), "datatype": "FP64",
                           "data": X.ravel().tolist()}],
               "outputs": [{"name": "probabilities"}]}  # fmt: skip
    body = client.post("/v2/models/sure/infer", json=request).json()
    (output,) = body["outputs"]
    assert output["name"] == "probabilities" and output["shape"] == [X.shape[0], 2]
    np.testing.assert_allclose(np.reshape(output["data"], (-1, 2)), service["probabilities"],
                               atol=1e-12)  # fmt: skip
    plain = client.post(f"/v2/models/{served['model']}/infer", json=request)
    assert plain.status_code == 400 and "unknown output 'probabilities'" in plain.json()["error"]
    # valid instances for a model without calibration: before, titled "Invalid instances"
    refused = client.post(f"/v1/models/{served['model']}/predict",
                          json={"instances": X[:1].tolist(), "probabilities": True})
    assert refused.status_code == 422
    assert refused.json()["title"] == "No probability calibration"


def test_a_calibration_cut_short_by_the_time_limit_says_so(app, client, served):
    # probability=true, but the folds never finish: the model serves labels, and a request for
    # probabilities is told why there are none
    model = train(app, client, served["dataset"]["id"], probability=True, time_limit=1e-6)
    record = client.get(f"/v1/models/{model}").json()
    assert record["status"] == "time_limit"
    assert len(predict(client, model, {"instances": served["X"][:2].tolist()})["labels"]) == 2
    refused = client.post(f"/v1/models/{model}/predict",
                          json={"instances": served["X"][:1].tolist(), "probabilities": True})
    assert refused.status_code == 422, refused.text
    assert "ran out of time" in refused.json()["detail"]


# ------------------------------------------------------------------------------------------
# The Open Inference Protocol


def test_v2_server_and_model_metadata(client, served):
    assert client.get("/v2").json()["name"] == "margin"
    assert client.get("/v2/health/live").json() == {"live": True}
    assert client.get("/v2/health/ready").status_code == 200
    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": served["model"]})
    meta = client.get("/v2/models/heart").json()
    assert meta["inputs"] == [{"name": "input", "datatype": "FP64", "shape": [-1, 13]}]
    assert [o["name"] for o in meta["outputs"]] == ["label", "decision_values"]
    assert meta["outputs"][1]["shape"] == [-1, 1]
    assert client.get("/v2/models/heart/versions/1/ready").json()["ready"] is True
    missing = client.get("/v2/models/nothing")
    assert missing.status_code == 404 and list(missing.json()) == ["error"]
    assert client.get("/v2/models/heart/versions/7").status_code == 404


def test_v2_infer_in_the_published_shapes(client, served):
    X, model = served["X"], served["model"]
    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": model})
    client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    expected = predict(client, model, {"instances": X[:3].tolist()})
    # the protocol's example request: a named input, its shape, datatype and flat data
    request = {"id": "42", "inputs": [{"name": "input0", "shape": [3, 13], "datatype": "FP32",
                                      "data": X[:3].ravel().tolist()}]}  # fmt: skip
    for path in ("heart", "heart@production", "heart/versions/1", model):
        response = client.post(f"/v2/models/{path}/infer", json=request)
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["id"] == "42" and body["model_name"] == path.split("/")[0]
        label, decision = body["outputs"]
        assert label == {"name": "label", "datatype": "INT64", "shape": [3],
                         "data": expected["labels"]}  # fmt: skip
        assert decision["shape"] == [3, 1] and decision["datatype"] == "FP64"
        np.testing.assert_allclose(decision["data"], np.ravel(expected["decision_values"]),
                                   atol=1e-5)  # fmt: skip
    nested = {"inputs": [{"name": "x", "shape": [3, 13], "datatype": "FP64",
                          "data": X[:3].tolist()}], "outputs": [{"name": "decision_values"}]}
    only = client.post("/v2/models/heart/infer", json=nested).json()["outputs"]
    assert [o["name"] for o in only] == ["decision_values"]
    sparse = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP64",
                          "parameters": {"sparse": True},
                          "data": [{"indices": [1, 3], "values": [0.5, -1.0]}]}]}
    assert client.post("/v2/models/heart/infer", json=sparse).status_code == 200
    sparse["inputs"][0]["shape"] = [1, 13]  # the shape the model's metadata advertises
    assert client.post("/v2/models/heart/infer", json=sparse).status_code == 200


@pytest.mark.parametrize(
    ("change", "status", "fragment"),
    [
        ({"shape": [1, 12]}, 400, "expected [N, 13]"),
        ({"datatype": "BYTES"}, 400, "datatype"),
        ({"data": [1.0] * 12}, 400, "expected 13 numbers"),
        ({"data": ["a"] * 13}, 400, "expected a number"),
        ({"shape": [20000, 13]}, 413, "instances"),
        ({"datatype": "INT8", "data": [128] + [0] * 12}, 400, "128.0 is not a INT8 value"),
        ({"datatype": "UINT64", "data": [-1] + [0] * 12}, 400, "is not a UINT64 value"),
        ({"datatype": "INT32", "data": [0] * 12 + [0.5]}, 400, "data[12]: 0.5 is not a INT32"),
        ({"datatype": "FP32", "data": [3.41e38] + [0] * 12}, 400, "is not a FP32 value"),
        ({"shape": [2], "parameters": {"sparse": True}, "data": [{"indices": [1], "values": [1]}]},
         400, "a sparse tensor's shape is [N] or [N, 13]"),
    ],
)
def test_v2_errors_are_the_protocols(client, served, change, status, fragment):
    tensor = {"name": "input", "shape": [1, 13], "datatype": "FP64", "data": [0.0] * 13, **change}
    response = client.post(f"/v2/models/{served['model']}/infer", json={"inputs": [tensor]})
    assert response.status_code == status
    assert list(response.json()) == ["error"] and fragment in response.json()["error"]


@pytest.mark.parametrize("number", ["\u00b2", "\u0663", "9" * 30, "9" * 5000])
def test_numbers_in_digits_other_than_ascii_or_beyond_range_are_refused(client, served, number):
    """'²' and '٣' pass str.isdigit but not int, and int refuses 5000 digits: each was a 500 as
    a v2 model version, a registry versions cursor or an Inference-Header-Content-Length."""
    import base64

    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": served["model"]})
    tensor = {"name": "input", "shape": [1, 13], "datatype": "FP64", "data": [0.0] * 13}
    infer = client.post(f"/v2/models/heart/versions/{number}/infer", json={"inputs": [tensor]})
    assert infer.status_code == 404 and "has no version" in infer.json()["error"]
    assert client.get(f"/v2/models/heart/versions/{number}").status_code == 404
    cursor = base64.urlsafe_b64encode(number.encode()).decode().rstrip("=")
    page = client.get("/v1/registered-models/heart/versions", params={"cursor": cursor})
    assert page.status_code == 422 and page.json()["title"] == "Invalid cursor"
    if number != "\u0663":  # a header carries latin-1 ('²' is one of its bytes), not '٣'
        header = {"Inference-Header-Content-Length": number.encode("latin-1")}
        binary = client.post("/v2/models/heart/infer", json={"inputs": [tensor]}, headers=header)
        assert binary.status_code == 400 and "Inference-Header" in binary.json()["error"]
    # the largest version and a length within the body are still numbers
    assert client.get("/v2/models/heart/versions/1000000000").status_code == 404
    assert client.get("/v2/models/heart/versions/1").status_code == 200


def test_a_large_v2_body_is_read_without_python_objects(client, served):
    rows = np.tile(served["X"], (20, 1))[:5000]
    request = {"inputs": [{"name": "input", "shape": list(rows.shape), "datatype": "FP64",
                           "data": rows.tolist()}]}  # fmt: skip
    response = client.post(f"/v2/models/{served['model']}/infer", json=request)
    assert response.status_code == 200, response.text
    expected = predict(client, served["model"], {"instances": rows[:10].tolist()})
    assert response.json()["outputs"][0]["data"][:10] == expected["labels"]


# ------------------------------------------------------------------------------------------
# MLflow's scoring protocol


def test_invocations_in_mlflow_shapes(client, served):
    X, model = served["X"][:4], served["model"]
    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": model})
    client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    labels = predict(client, model, {"instances": X.tolist()})["labels"]
    records = [dict(zip(NAMES, row, strict=True)) for row in X.tolist()]
    bodies = [
        {"inputs": X.tolist()},
        {"instances": X.tolist()},
        {"instances": records},
        {"dataframe_records": records},
        {"dataframe_split": {"columns": NAMES, "data": X.tolist()}},
        {"dataframe_split": {"columns": NAMES[::-1], "data": X[:, ::-1].tolist()}},
        {"inputs": {n: X[:, j].tolist() for j, n in enumerate(NAMES)}},
    ]
    for body in bodies:
        response = client.post("/v1/models/heart@production/invocations", json=body)
        assert response.status_code == 200, (body, response.text)
        assert response.json() == {"predictions": labels}
    csv_text = ",".join(NAMES) + "\n" + "\n".join(",".join(map(repr, r)) for r in X.tolist())
    response = client.post(
        f"/v1/models/{model}/invocations", content=csv_text, headers={"content-type": "text/csv"}
    )
    assert response.json() == {"predictions": labels}


def test_invocations_errors_are_mlflows(client, served):
    url = f"/v1/models/{served['model']}/invocations"
    bad = client.post(url, json={"dataframe_records": [{"nope": 1}]})
    assert bad.status_code == 400
    assert bad.json()["error_code"] == "BAD_REQUEST" and "'nope'" in bad.json()["message"]
    missing = client.post("/v1/models/nothing@production/invocations", json={"inputs": [[1]]})
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    media = client.post(url, content=b"x", headers={"content-type": "image/png"})
    assert media.status_code == 415 and "message" in media.json()


def test_invocations_csv_one_column_or_value_over_is_400(client, served):
    url = f"/v1/models/{served['model']}/invocations"
    row = ",".join(map(repr, served["X"][0].tolist()))

    def post(text: str):
        return client.post(url, content=text, headers={"content-type": "text/csv"})

    assert post(",".join(NAMES) + "\n" + row).status_code == 200
    wide = post(",".join([*NAMES, "extra"]) + "\n" + row + ",0")
    assert wide.status_code == 400 and "more columns" in wide.json()["message"]
    long_row = post(",".join(NAMES) + "\n" + row + ",0")
    assert long_row.status_code == 400 and "more values" in long_row.json()["message"]


def test_invocations_csv_skips_empty_lines_and_reads_quoted_numbers(client, served):
    """RFC 4180 allows any field quoted: `"0.5"` was refused ("could not convert"); empty lines,
    LF or CRLF, are skipped."""
    X, model = served["X"][:3], served["model"]
    labels = predict(client, model, {"instances": X.tolist()})["labels"]
    rows = [[repr(v) for v in row] for row in X.tolist()]
    quoted = [",".join(f'"{v}"' for v in row) for row in rows]
    bodies = [
        ",".join(f'"{n}"' for n in NAMES) + "\n" + "\n".join(quoted) + "\n",
        ",".join(NAMES) + "\n\n" + "\n\n\n".join(",".join(r) for r in rows) + "\n\n",
        ",".join(NAMES) + "\r\n\r\n" + "\r\n\r\n".join(quoted) + "\r\n\r\n",
    ]
    for body in bodies:
        response = client.post(
            f"/v1/models/{model}/invocations", content=body, headers={"content-type": "text/csv"}
        )
        assert response.status_code == 200, (body, response.text)
        assert response.json() == {"predictions": labels}


def test_invocations_csv_rows_not_lines_meet_the_batch_bound(app, client, served, monkeypatch):
    """MAX_PREDICT_BATCH counts the rows: 3 rows among empty lines were 413 at a bound of 3 (every
    line counted), and a 4th row without a final newline was let through."""
    monkeypatch.setattr(app.state.settings, "max_predict_batch", 3)
    rows = [",".join(map(repr, row)) for row in served["X"][:4].tolist()]

    def post(text: str):
        return client.post(
            f"/v1/models/{served['model']}/invocations",
            content=",".join(NAMES) + "\n" + text,
            headers={"content-type": "text/csv"},
        )

    at_bound = post("\n" * 10 + "\n\n\n".join(rows[:3]) + "\n" * 10)
    assert at_bound.status_code == 200 and len(at_bound.json()["predictions"]) == 3
    for over in ("\n".join(rows), "\n".join(rows) + "\n", "\r\n\r\n".join(rows)):
        answer = post(over)
        assert answer.status_code == 413 and "at most 3" in answer.json()["message"], answer.text


def test_invocations_csv_header_may_quote_a_name_holding_a_comma(app, client):
    """A CSV upload's quoted header name "a,b" is a feature name; the same header sent to
    /invocations was refused as "more columns than the model's 2 features" (its commas were
    counted as columns)."""
    body = 'label,"a,b",c\n1,1,2\n-1,-1,-2\n1,2,1\n-1,-2,-1\n'
    dataset = client.post("/v1/datasets", files={"file": ("q.csv", body)}).json()
    assert dataset["feature_names"] == ["a,b", "c"]
    model = train(app, client, dataset["id"])
    expected = predict(client, model, {"records": [{"a,b": 1.0, "c": 2.0}]})["labels"]
    url = f"/v1/models/{model}/invocations"
    for text in ('"a,b",c\n1,2\n', 'c,"a,b"\n2,1\n'):
        answer = client.post(url, content=text, headers={"content-type": "text/csv"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": expected}
    for wide in ('"a,b",c,d\n1,2,3\n', "a,b,c,d\n1,2,3,4\n"):  # one comma over is refused
        answer = client.post(url, content=wide, headers={"content-type": "text/csv"})
        assert answer.status_code == 400 and "more columns" in answer.json()["message"]
