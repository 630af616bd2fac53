"""The Open Inference Protocol (v2): server and model metadata, inference in its published
request and response shapes, and its errors."""

from __future__ import annotations

import numpy as np
import pytest

from tests.app.serving_helpers import predict

pytestmark = pytest.mark.one_database


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


def test_an_inference_header_length_sent_twice_is_refused(client, served):
    """The binary extension's Inference-Header-Content-Length is read by hand (the infer route
    skips the routers' dependencies and their check): sent twice with different lengths, the
    first was taken without a word, where a header a route reads sent twice is refused."""
    import json

    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": served["model"]})
    tensor = {"name": "input", "shape": [1, 13], "datatype": "FP64", "data": [0.0] * 13}
    body = json.dumps({"inputs": [tensor]}).encode()
    name = "Inference-Header-Content-Length"
    once = client.post("/v2/models/heart/infer", content=body, headers={name: str(len(body))})
    assert once.status_code == 200, once.text
    twice = [(name, str(len(body))), (name, "7")]
    response = client.post("/v2/models/heart/infer", content=body, headers=twice)
    assert response.status_code == 400, response.text  # before: 200, the first length read
    assert f"{name}: send it once" in response.json()["error"]
