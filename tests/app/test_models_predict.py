"""`POST /v1/models/{id}/predict`: its body forms against the reference decision function, its
errors, and the cached model it serves from. Over HTTP, with model and dataset rows written directly
(`model_rows`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import event

from app.errors import error_response
from app.tables import Model, PredictionRun
from tests.app.model_rows import (
    N_FEATURES,
    libsvm_lines,
    reference,
    rng_problem,
    sparse_instances,
)

pytestmark = pytest.mark.one_database


def test_predict_forms_agree_with_the_reference(service, binary):
    model_id, coef, intercept = binary
    X = rng_problem()
    D = reference(X, coef, intercept)
    expected = np.where(D[:, 0] > 0, 1, -1).tolist()
    url = f"/v1/models/{model_id}/predict"
    sparse = service.client.post(url, json={"instances": sparse_instances(X)})
    dense = service.client.post(url, json={"instances": X.toarray().tolist()})
    text = service.client.post(
        url,
        content=libsvm_lines(X, labels=[1] * X.shape[0]),
        headers={"content-type": "text/plain"},
    )
    for r in (sparse, dense, text):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["labels"] == expected
        np.testing.assert_allclose(body["decision_values"], D, rtol=1e-12, atol=1e-12)
    assert len(set(expected)) == 2


def test_zero_based_models_read_zero_based_indices(service):
    coef = np.arange(1.0, 6.0)[None, :]
    model_id = service.add_model(coef, [0.0], classes=[0, 1], zero_based=True)
    r = service.client.post(
        f"/v1/models/{model_id}/predict",
        json={"instances": [{"indices": [0, 4], "values": [1.0, -1.0]}]},
    )
    assert r.json() == {"labels": [0], "decision_values": [[-4.0]]}


def test_multiclass_and_regression_responses(service):
    rng = np.random.default_rng(3)
    X = rng_problem(seed=4)
    coef, intercept = rng.standard_normal((4, N_FEATURES)), rng.standard_normal(4)
    multi = service.add_model(coef, intercept, classes=[1, 2, 5, 9])
    body = service.client.post(
        f"/v1/models/{multi}/predict", json={"instances": sparse_instances(X)}
    ).json()
    D = reference(X, coef, intercept)
    assert body["labels"] == [[1, 2, 5, 9][k] for k in D.argmax(axis=1)]
    np.testing.assert_allclose(body["decision_values"], D, rtol=1e-12)

    reg = service.add_model(coef[:1], intercept[:1], classes=[], kind="regressor")
    body = service.client.post(
        f"/v1/models/{reg}/predict", json={"instances": sparse_instances(X)}
    ).json()
    assert set(body) == {"values"}
    np.testing.assert_allclose(body["values"], reference(X, coef[:1], intercept[:1])[:, 0])


BAD_BODIES = [
    ({"instances": [{"indices": [1, 2], "values": [1.0]}]}, 422, "same length"),
    ({"instances": [{"indices": [0], "values": [1.0]}]}, 422, "feature index 0 is out of range"),
    ({"instances": [{"indices": [-1], "values": [1.0]}]}, 422, "feature index -1 is out of range"),
    ({"instances": [{"indices": [3, 3], "values": [1.0, 2.0]}]}, 422, "appears more than once"),
    ({"instances": [[1.0] * 5]}, 422, "needs 30 values"),
    ({"instances": []}, 422, "at least one instance"),
    ({"instances": "1:1"}, 422, "'instances' must be a list"),
    ({"rows": [[1.0]]}, 422, "expected a JSON object"),
    ({"instances": [{"indices": ["a"], "values": [1.0]}]}, 422, "must be an integer"),
]


@pytest.mark.parametrize(("doc", "status", "message"), BAD_BODIES)
def test_bad_predict_bodies(service, binary, doc, status, message):
    r = service.client.post(f"/v1/models/{binary[0]}/predict", json=doc)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    assert message in r.json()["detail"]
    assert "Traceback" not in r.text and "/work" not in r.text
    assert service.count(PredictionRun) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"instances": [{"indices": [1], "values": [NaN]}]}', "expected a finite number"),
        (b'{"instances": [{"indices": [1], "values": [Infinity]}]}', "expected a finite number"),
        (b'{"instances": [', "not valid JSON"),
        (b"", "not valid JSON"),
    ],
)
def test_non_finite_and_malformed_json(service, binary, content, message):
    r = service.client.post(
        f"/v1/models/{binary[0]}/predict",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422 and message in r.json()["detail"]


SURROGATE_ROW = b'["\\ud800"' + b", 0" * (N_FEATURES - 1) + b"]"
LARGE_ROWS = b", ".join([b"[" + b", ".join([b"0"] * N_FEATURES) + b"]"] * 1200)


@pytest.mark.parametrize(
    "content",
    [
        b'{"instances": [' + SURROGATE_ROW + b"]}",
        b'{"instances": [{"\\ud800": 1}]}',
        b'{"instances": [[0]], "\\ud800": 1}',
        b'{"instances": [{"\xed\xa0\x80": 1}]}',  # the surrogate's own UTF-8 bytes
        b'{"instances": [' + LARGE_ROWS + b", " + SURROGATE_ROW + b"]}",  # read by instance
    ],
)
def test_lone_surrogates_are_invalid_json(service, binary, content):
    """orjson refuses a lone surrogate; Python's reader, tried next for NaN and Infinity, took
    it, and the 422 that echoed it could not be written as UTF-8: a 500."""
    r = service.client.post(
        f"/v1/models/{binary[0]}/predict",
        content=content,
        headers={"content-type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert "not valid JSON" in r.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/jobs", "/v2/models/m/infer", "/v1/models/m/invocations"])
def test_an_error_echoing_a_lone_surrogate_is_still_written(path):
    response = error_response(path, 422, "Invalid request", "unexpected field '\ud800'")
    assert json.loads(response.body) in (
        {"type": "about:blank", "title": "Invalid request", "status": 422,
         "detail": "unexpected field '\ud800'"},
        {"error": "unexpected field '\ud800'"},
        {"error_code": "INVALID_PARAMETER_VALUE", "message": "unexpected field '\ud800'"},
    )  # fmt: skip


def test_bad_text_lines_name_the_line(service, binary):
    r = service.client.post(
        f"/v1/models/{binary[0]}/predict",
        content=b"1 1:1\n-1 2:nan\n",
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 422 and r.json()["detail"].startswith("line 2:")


def test_batch_limit_is_413_and_content_type_415(service):
    service.settings.max_predict_batch = 3
    model_id = service.add_model(np.ones((1, 2)), [0.0], classes=[0, 1])
    url = f"/v1/models/{model_id}/predict"
    assert service.client.post(url, json={"instances": [[1.0, 0.0]] * 3}).status_code == 200
    r = service.client.post(url, json={"instances": [[1.0, 0.0]] * 4})
    assert r.status_code == 413 and "at most 3" in r.json()["detail"]
    r = service.client.post(url, content=b"1:1\n" * 4, headers={"content-type": "text/plain"})
    assert r.status_code == 413
    r = service.client.post(url, content=b"<x/>", headers={"content-type": "application/xml"})
    assert r.status_code == 415


def test_large_bodies_are_parsed_off_the_event_loop_with_the_same_answer(service, binary):
    model_id, coef, intercept = binary
    X = rng_problem(n=2000, seed=6)
    body = json.dumps({"instances": sparse_instances(X)}).encode()
    assert len(body) > 64 * 1024
    r = service.client.post(
        f"/v1/models/{model_id}/predict", content=body, headers={"content-type": "application/json"}
    )
    np.testing.assert_allclose(
        r.json()["decision_values"], reference(X, coef, intercept), rtol=1e-12
    )


def test_a_large_body_may_ask_for_probabilities_before_or_after_its_instances(service, binary):
    """`"probabilities": true` in a body over 64 KB was a 422 ("expected only one key" after
    the instances, "must start with" before them): the same flag as in a small body."""
    model_id, _, _ = binary
    with service.db.write() as session:
        session.get(Model, model_id).calibration = {"method": "sigmoid", "A": [-2.0], "B": [0.1]}
    instances = sparse_instances(rng_problem(n=2000, seed=7))
    url = f"/v1/models/{model_id}/predict"
    small = service.client.post(url, json={"instances": instances[:5], "probabilities": True})
    expected = small.json()["probabilities"]
    many = json.dumps(instances)
    json_body = {"content-type": "application/json"}
    for body in (f'{{"instances": {many}, "probabilities": true}}',
                 f'{{ "probabilities" : true , "instances": {many}}}'):  # fmt: skip
        assert len(body) > 64 * 1024
        answer = service.client.post(url, content=body.encode(), headers=json_body)
        assert answer.status_code == 200, answer.text
        assert answer.json()["probabilities"][:5] == expected
    plain = f'{{"instances": {many}, "probabilities": false}}'.encode()
    assert "probabilities" not in service.client.post(url, content=plain, headers=json_body).json()
    twice = f'{{"probabilities": true, "instances": {many}, "probabilities": true}}'.encode()
    refused = service.client.post(url, content=twice, headers=json_body)
    assert refused.status_code == 422 and "'probabilities'" in refused.json()["detail"]


def test_the_query_and_the_body_may_not_ask_for_probabilities_differently(service, binary):
    """`?probabilities=` and the JSON body's flag were OR-ed: `?probabilities=false` with
    `"probabilities": true` answered probabilities. As an upload option sent in the query and
    the form, two different values are a 422 naming the flag; the same value twice is one."""
    model_id, _, _ = binary
    with service.db.write() as session:
        session.get(Model, model_id).calibration = {"method": "sigmoid", "A": [-2.0], "B": [0.1]}
    X = rng_problem(n=3, seed=8)
    url = f"/v1/models/{model_id}/predict"
    instances = sparse_instances(X)
    expected = service.client.post(url, json={"instances": instances, "probabilities": True})
    assert expected.status_code == 200 and len(expected.json()["probabilities"]) == 3
    many = json.dumps(sparse_instances(rng_problem(n=2000, seed=7)))
    large = f'{{"instances": {many}, "probabilities": true}}'.encode()
    assert len(large) > 64 * 1024
    json_body = {"content-type": "application/json"}
    for query, flag in (("false", True), ("true", False), ("0", True)):
        small = json.dumps({"instances": instances, "probabilities": flag}).encode()
        for body in (small, large.replace(b"true", json.dumps(flag).encode())):
            r = service.client.post(f"{url}?probabilities={query}", content=body, headers=json_body)
            assert r.status_code == 422, r.text[:200]
            assert r.json()["detail"].startswith("probabilities: sent in the query string and in "
                                                 "the body with different values")  # fmt: skip
    same = service.client.post(f"{url}?probabilities=true",
                               json={"instances": instances, "probabilities": True})  # fmt: skip
    assert same.status_code == 200 and same.json() == expected.json()
    neither = service.client.post(f"{url}?probabilities=false", json={"instances": instances})
    assert neither.status_code == 200 and "probabilities" not in neither.json()
    text = service.client.post(f"{url}?probabilities=true", content=libsvm_lines(X),
                               headers={"content-type": "text/plain"})  # fmt: skip
    assert text.status_code == 200 and text.json() == expected.json()


def test_a_large_bodys_trailing_flag_is_read_or_refused_never_ignored(service, binary):
    """The flag after a large body's instances is read from its last 512 bytes: 513 bytes from
    the comma to the end (padding after the closing brace) answered 200 without probabilities
    (the instances' reader took the flag, the flag's reader missed it)."""
    from app.services.predict_json import _TAIL_BYTES

    model_id, _, _ = binary
    with service.db.write() as session:
        session.get(Model, model_id).calibration = {"method": "sigmoid", "A": [-2.0], "B": [0.1]}
    many = json.dumps(sparse_instances(rng_problem(n=2000, seed=7)))
    url, json_body = f"/v1/models/{model_id}/predict", {"content-type": "application/json"}
    tail = ', "probabilities": true}'
    for pad in (_TAIL_BYTES - len(tail), _TAIL_BYTES - len(tail) + 1):
        body = f'{{"instances": {many}{tail}{" " * pad}'.encode()
        answer = service.client.post(url, content=body, headers=json_body)
        if len(tail) + pad <= _TAIL_BYTES:
            assert answer.status_code == 200 and len(answer.json()["probabilities"]) == 2000
        else:
            assert answer.status_code == 422, answer.text[:200]
            assert "'probabilities'" in answer.json()["detail"]


def test_cached_predictions_touch_no_database(service, binary):
    url = f"/v1/models/{binary[0]}/predict"
    doc = {"instances": [{"indices": [1, 2], "values": [1.0, 2.0]}]}
    assert service.client.post(url, json=doc).status_code == 200
    service.app.state.prediction_runner.stop()  # it polls its queue on its own schedule
    statements = []
    listener = lambda *args: statements.append(args[2])  # noqa: E731
    event.listen(service.db.engine, "before_cursor_execute", listener)
    try:
        for _ in range(20):
            assert service.client.post(url, json=doc).status_code == 200
    finally:
        event.remove(service.db.engine, "before_cursor_execute", listener)
    assert statements == []


def test_delete_evicts_the_cached_model(service, binary):
    url = f"/v1/models/{binary[0]}/predict"
    doc = {"instances": [[0.0] * N_FEATURES]}
    assert service.client.post(url, json=doc).status_code == 200
    assert service.client.delete(f"/v1/models/{binary[0]}").status_code == 204
    assert service.client.post(url, json=doc).status_code == 404
    assert service.client.get(f"/v1/models/{binary[0]}").status_code == 404
    assert service.count(Model) == 0


def test_a_model_deleted_by_another_process_stops_being_served(service, binary):
    """Another API process deleting the model is seen at the entry's revalidation."""
    url = f"/v1/models/{binary[0]}/predict"
    doc = {"instances": [[0.0] * N_FEATURES]}
    assert service.client.post(url, json=doc).status_code == 200
    with service.db.write() as session:
        session.delete(session.get(Model, binary[0]))
    cache = service.app.state.model_cache
    assert service.client.post(url, json=doc).status_code == 200  # still within the bound
    cache.revalidate_s = 0.0
    assert service.client.post(url, json=doc).status_code == 404
    assert binary[0] not in cache


OVERFLOWING = [[1.0, 0.0, 0.0], [1e308, -1.7e308, 0.0]]  # the second: 1e308 + 1.7e308 = inf


def _overflow_requests(model_id: str) -> dict:
    """The same two dense instances through each protocol: (url, request keywords)."""
    libsvm = "1:1\n1:1e308 2:-1.7e308\n"
    csv = "a,b,c\n1,0,0\n1e308,-1.7e308,0\n"
    infer = {"inputs": [{"name": "x", "shape": [2, 3], "datatype": "FP64",
                         "data": [v for row in OVERFLOWING for v in row]}]}  # fmt: skip
    predict, invocations = f"/v1/models/{model_id}/predict", f"/v1/models/{model_id}/invocations"
    return {
        "predict json": (predict, {"json": {"instances": OVERFLOWING}}),
        "predict text": (predict, {"content": libsvm, "headers": {"content-type": "text/plain"}}),
        "invocations json": (invocations, {"json": {"instances": OVERFLOWING}}),
        "invocations csv": (invocations, {"content": csv, "headers": {"content-type": "text/csv"}}),
        "v2 infer": (f"/v2/models/{model_id}/infer", {"json": infer}),
    }


@pytest.mark.parametrize("kind", ["classifier", "regressor"])
def test_an_instance_whose_decision_value_overflows_is_refused(service, kind):
    # Each value is a finite float, but 1e308 - (-1.7e308) is inf (and inf - inf is nan): a
    # classifier answered label 1 with a null decision value, a regressor a null value.
    classes = [-1, 1] if kind == "classifier" else []
    model_id = service.add_model([[1.0, -1.0, 0.5]], [0.0], classes=classes, kind=kind)
    for name, (url, request) in _overflow_requests(model_id).items():
        response = service.client.post(url, **request)
        assert response.status_code == (422 if "predict" in name else 400), (name, response.text)
        assert "instance 1 (counting from 0)" in response.text, (name, response.text)
        assert "overflows" in response.text, name
        # the first instance alone is answered
        if name == "predict json":
            alone = service.client.post(url, json={"instances": OVERFLOWING[:1]}).json()
            assert alone == ({"labels": [1], "decision_values": [[1.0]]} if classes
                             else {"values": [1.0]})  # fmt: skip
