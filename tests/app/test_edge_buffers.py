"""What the edge holds before it judges a request, each bound sent just over: the JSON of an
inference request around its data array and before binary data (64 KB), the form fields of an
upload (32), and references that cannot name a model (no lookup, nothing cached). The memory
these cost a served process before is measured in tests/reliability/test_edge_attacks.py."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from app.services.predict_json import SMALL_JSON
from app.services.uploads import MAX_FIELDS
from tests.app.conftest import HEART, heart_csv
from tests.app.serving_helpers import train

pytestmark = pytest.mark.one_database

ROW = [0.5] * 13  # heart_scale's 13 features


def traced_peak(call):
    """(``call()``, the peak of Python's traced allocations during it)."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.fixture
def model(app, client, heart) -> str:
    return train(app, client, heart["id"], tol=0.1)


def infer(client, model: str, body: bytes, headers: dict | None = None):
    return client.post(
        f"/v2/models/{model}/infer",
        content=body,
        headers={"Content-Type": "application/json", **(headers or {})},
    )


def padded_infer_body(rest: int) -> bytes:
    """A body of many rows whose JSON apart from the data array is `rest` bytes long (its
    padding in the request's `id`)."""
    data = json.dumps([ROW] * 900).encode()  # over 64 KB: the data array is cut out
    tensor = b'{"name": "x", "shape": [900, 13], "datatype": "FP64", "data": '
    head, tail = b'{"id": "', b'", "inputs": [' + tensor
    fixed = len(head) + len(tail) + len(b"null") + len(b"}]}")
    return head + b"p" * (rest - fixed) + tail + data + b"}]}"


def test_infer_json_apart_from_the_data_is_at_most_64_kb(client, model):
    accepted = infer(client, model, padded_infer_body(SMALL_JSON))
    assert accepted.status_code == 200, accepted.text[:300]
    assert len(accepted.json()["outputs"][0]["data"]) == 900
    refused = infer(client, model, padded_infer_body(SMALL_JSON + 1))
    assert refused.status_code == 413, refused.text[:300]
    assert refused.json()["error"] == (
        f"a request apart from its data array is at most 64 KB, got {SMALL_JSON + 1} bytes"
    )


def binary_request(header_size: int) -> tuple[bytes, dict]:
    """A binary-data infer request of one row whose JSON part is `header_size` bytes."""
    tensor = {"name": "x", "shape": [1, 13], "datatype": "FP64",
              "parameters": {"binary_data_size": 13 * 8}}  # fmt: skip
    head = json.dumps({"id": "", "inputs": [tensor]}).encode()
    head = head.replace(b'"id": ""', b'"id": "' + b"p" * (header_size - len(head)) + b'"')
    assert len(head) == header_size
    body = head + b"\0" * (13 * 8)
    return body, {"Inference-Header-Content-Length": str(header_size)}


def test_the_json_before_binary_data_is_at_most_64_kb(client, model):
    accepted = infer(client, model, *binary_request(SMALL_JSON))
    assert accepted.status_code == 200, accepted.text[:300]
    refused = infer(client, model, *binary_request(SMALL_JSON + 1))
    assert refused.status_code == 413, refused.text[:300]
    assert "JSON part before binary data is at most 64 KB" in refused.json()["error"]


def test_a_body_of_many_data_arrays_is_refused_at_the_second(client, model):
    body = b'{"inputs": [{"data": [' + b'"data": [' * 1_000_000 + b"]}]}"
    refused, peak = traced_peak(lambda: infer(client, model, body))
    assert refused.status_code == 400
    assert "exactly one tensor 'data' array" in refused.json()["error"]
    # the body's copies only; before: a match object for each of the million arrays (+100 MB)
    assert peak < 4 * len(body), (peak / 2**20, len(body) / 2**20)


def form_upload(client, fields: int):
    files = [(f"f{i}", (None, "x")) for i in range(fields - 1)]
    files += [("name", (None, "heart")), ("file", ("heart_scale", HEART.read_bytes()))]
    return client.post("/v1/datasets", files=files)


def test_an_upload_takes_at_most_32_form_fields(client):
    accepted = form_upload(client, MAX_FIELDS)
    assert accepted.status_code == 201, accepted.text
    assert accepted.json()["name"] == "heart"
    refused = form_upload(client, MAX_FIELDS + 1)
    assert refused.status_code == 422
    assert refused.json()["detail"] == "at most 32 form fields besides 'file' may be sent"


def test_an_uploads_name_field_is_at_most_255_characters(app, client):
    # as the query's name (a 422); the form's was cut to its first 255 characters silently
    text = HEART.read_bytes()
    kept = client.post("/v1/datasets", files={"file": ("h.txt", text)}, data={"name": "é" * 255})
    assert kept.status_code == 201, kept.text
    assert kept.json()["name"] == "é" * 255
    listed = len(client.get("/v1/datasets").json()["items"])
    refused = client.post("/v1/datasets", files={"file": ("h.txt", text)},
                          data={"name": "é" * 256})  # fmt: skip
    assert refused.status_code == 422
    assert refused.json()["detail"] == "name: expected at most 255 characters"
    assert len(client.get("/v1/datasets").json()["items"]) == listed  # nothing kept


@pytest.mark.parametrize(
    "ref",
    ["a" * 129 + "@prod", "name@" + "a" * 65, "name@pr od", "-name@prod", "name@v1234567890",
     "a" * 129, "..@prod"],
)  # fmt: skip
def test_a_reference_that_names_nothing_is_not_looked_up(app, client, model, ref):
    assert client.post("/v1/registered-models", json={"name": "name"}).status_code == 201
    routes = [("POST", f"/v1/models/{ref}/predict", {"instances": [ROW]}),
              ("POST", f"/v1/models/{ref}/invocations", {"instances": [ROW]}),
              ("GET", f"/v2/models/{ref}", None)]  # fmt: skip
    for method, url, body in routes:
        answer = client.request(method, url, json=body)
        assert answer.status_code == 404, (url, answer.text)
    cache = getattr(app.state, "alias_cache", None)
    assert cache is None or not cache._items  # before: one entry per reference asked


def test_usable_references_still_resolve(client, model):
    assert client.post("/v1/registered-models", json={"name": "heart.v2_x-1"}).status_code == 201
    versions = "/v1/registered-models/heart.v2_x-1/versions"
    assert client.post(versions, json={"model_id": model}).status_code == 201
    alias = "/v1/registered-models/heart.v2_x-1/aliases/Prod.1_a-b"
    assert client.put(alias, json={"version": 1}).status_code == 200
    for ref in ("heart.v2_x-1@Prod.1_a-b", "heart.v2_x-1@v1", model):
        answer = client.post(f"/v1/models/{ref}/predict", json={"instances": [ROW]})
        assert answer.status_code == 200, (ref, answer.text)
    assert client.get("/v2/models/heart.v2_x-1").status_code == 200


@pytest.fixture
def named_model(app, client) -> str:
    text, _, _ = heart_csv()
    dataset = client.post("/v1/datasets", files={"file": ("heart.csv", text)}).json()
    return train(app, client, dataset["id"], tol=0.1)


def invocations(client, model: str, body: bytes):
    url = f"/v1/models/{model}/invocations"
    return client.post(url, content=body, headers={"Content-Type": "application/json"})


def test_invocations_count_lists_and_objects_before_parsing(client, named_model):
    bound = 3 * 10_000 + 16  # three per instance (a sparse one), MAX_PREDICT_BATCH 10,000
    at_bound = b'{"dataframe_records": [' + b",".join([b"{}"] * (bound - 2)) + b"]}"
    answer = invocations(client, named_model, at_bound)
    assert answer.status_code == 413 and "too many instances" in answer.json()["message"]
    over = b'{"dataframe_records": [' + b",".join([b"{}"] * (bound - 1)) + b"]}"
    answer = invocations(client, named_model, over)
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["message"].startswith(f"too many JSON lists and objects ({bound + 1})")
    empties = b'{"inputs": [' + b",".join([b"[]"] * 340_000) + b"]}"  # 1 MB
    answer, peak = traced_peak(lambda: invocations(client, named_model, empties))
    assert answer.status_code == 413, answer.text[:300]
    assert peak < 4 * len(empties), peak / 2**20  # before: 340,000 lists (33 MB)


def test_invocations_count_rows_before_making_records(client, named_model):
    n = 500_000  # 1 MB of zeros in one column
    body = b'{"inputs": {"age": [' + b",".join([b"0"] * n) + b"]}}"
    answer, peak = traced_peak(lambda: invocations(client, named_model, body))
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["message"].startswith(f"too many instances: {n}, at most 10000")
    # the parsed column only; before: a record of each of its 500,000 values (100 MB)
    assert peak < 32 * len(body), (peak / 2**20, len(body) / 2**20)
    split = {"dataframe_split": {"columns": ["age"], "data": [[0]] * 10_001}}
    answer = client.post(f"/v1/models/{named_model}/invocations", json=split)
    assert answer.status_code == 413, answer.text[:300]
    assert answer.json()["message"].startswith("too many instances: 10001, at most 10000")
    split["dataframe_split"]["data"].pop()
    assert client.post(f"/v1/models/{named_model}/invocations", json=split).status_code == 200


def test_an_infer_output_is_named_once(client, model):
    """Before: each named output was computed and sent as often as it was named: 2,000 names in
    a 64 KB list made the answer to 10,000 rows (1 MB of binary data) 400 MB."""
    rows = 10_000
    tensor = {"name": "x", "shape": [rows, 13], "datatype": "FP64",
              "parameters": {"binary_data_size": rows * 13 * 8}}  # fmt: skip
    outputs = [{"name": "decision_values"}] * 2_000
    head = json.dumps({"inputs": [tensor], "outputs": outputs}).encode()
    headers = {"Inference-Header-Content-Length": str(len(head))}
    answer = infer(client, model, head + b"\0" * (rows * 13 * 8), headers)
    assert answer.status_code == 400, len(answer.content)
    assert answer.json()["error"] == "outputs[1]: 'decision_values' is named twice"
    once = json.dumps({"inputs": [tensor], "outputs": outputs[:1]}).encode()
    headers = {"Inference-Header-Content-Length": str(len(once))}
    answer = infer(client, model, once + b"\0" * (rows * 13 * 8), headers)
    assert answer.status_code == 200 and len(answer.json()["outputs"]) == 1


def test_a_form_field_sent_twice_is_refused(client):
    # its parts were joined into one value: label_column 'label' then 'age' read 'labelage',
    # format 'cs' then 'v' read 'csv'
    text, _, _ = heart_csv()
    listed = len(client.get("/v1/datasets").json()["items"])
    for field, first, second in [("format", "cs", "v"), ("label_column", "lab", "el")]:
        files = [(field, (None, first)), (field, (None, second)), ("file", ("h.csv", text))]
        refused = client.post("/v1/datasets", files=files)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == f"{field}: send each form field once"
    assert len(client.get("/v1/datasets").json()["items"]) == listed  # nothing kept
    once = [("label_column", (None, "label")), ("file", ("h.csv", text))]
    assert client.post("/v1/datasets", files=once).status_code == 201


def test_an_option_sent_twice_outside_one_form_is_refused(client):
    # the query's last value was read (label_column a, then label: the column 'label'), and a
    # query value over the form's different one: each silently chose what the client sent too
    text = b"a,b,label\n1,2,1\n3,4,-1\n"
    twice = client.post("/v1/datasets?label_column=a&label_column=label",
                        files={"file": ("t.csv", text)})  # fmt: skip
    assert twice.status_code == 422, twice.text
    assert twice.json()["detail"] == "label_column: send it once in the query string"
    both = client.post("/v1/datasets?label_column=a", data={"label_column": "label"},
                       files={"file": ("t.csv", text)})  # fmt: skip
    assert both.status_code == 422, both.text
    assert both.json()["detail"].startswith("label_column: sent in the query string and as a form")
    raw = client.post("/v1/datasets?format=csv&format=tsv", content=text)
    assert raw.status_code == 422 and raw.json()["detail"].startswith("format: send it once")
    assert client.get("/v1/datasets").json()["items"] == []  # nothing kept
    same = client.post("/v1/datasets?label_column=label", data={"label_column": "label"},
                       files={"file": ("t.csv", text)})  # fmt: skip
    assert same.status_code == 201 and same.json()["feature_names"] == ["a", "b"]


def test_two_unnamed_form_parts_are_told_to_name_them(client):
    text, _, _ = heart_csv()
    files = [("", (None, "x")), ("", (None, "y")), ("file", ("h.csv", text))]
    refused = client.post("/v1/datasets", files=files)
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].startswith("two form parts have no name: name each part")
