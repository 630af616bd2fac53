"""Probabilities served by a calibrated model through v1, ONNX and the Open Inference Protocol,
and the reason there are none where calibration was not asked for or was cut short."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from tests.app.serving_helpers import predict, train


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
