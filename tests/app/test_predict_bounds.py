"""Predict bodies are counted and bounded while they are read: instances, values per row, blank
lines; the parse's peak memory stays within a small multiple of the body (traced by tracemalloc,
which numpy reports its buffers to). The bodies are the reproductions of the review, scaled down."""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import orjson
import pytest
import scipy.sparse as sp

from app.services import predict_input
from app.services.prediction import InvalidInstances, LinearModel, decision_function, predict_body


def model(n_features=22, n_outputs=1, columns=None):
    coef = np.arange(1.0, n_outputs * (n_features if columns is None else columns.size) + 1)
    classes = [-1, 1] if n_outputs == 1 else list(range(n_outputs))
    return LinearModel(
        id="m",
        kind="classifier",
        classes=classes,
        n_features=n_features,
        zero_based=False,
        coef=coef.reshape(n_outputs, -1),
        intercept=np.zeros(n_outputs),
        columns=columns,
    )


def traced(body: bytes, content_type: str, m: LinearModel, max_batch=10_000):
    """(outcome, peak bytes allocated, seconds) of predicting `body`."""
    tracemalloc.start()
    start = time.perf_counter()
    try:
        outcome = predict_body(body, content_type, m, max_batch)
    except InvalidInstances as exc:
        outcome = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return outcome, peak, time.perf_counter() - start


def test_blank_lines_cost_no_memory_per_line():
    body = b"\n" * (4 << 20)  # 4 MiB of newlines: before, +678 MiB per 2 MiB
    outcome, peak, _ = traced(body, "text/plain", model())
    assert isinstance(outcome, InvalidInstances) and "at least one instance" in str(outcome)
    assert peak < 0.5 * len(body)


def test_too_many_text_lines_stop_at_the_limit():
    body = b"1:1\n" * 1_000_000
    outcome, peak, seconds = traced(body, "text/plain", model(), max_batch=10_000)
    assert isinstance(outcome, InvalidInstances) and outcome.status == 413
    assert "at most 10000" in str(outcome)
    assert peak < len(body)


def test_a_million_json_instances_are_refused_early():
    body = b'{"instances": [' + b",".join([b'{"indices":[1],"values":[1]}'] * 1_000_000) + b"]}"
    outcome, peak, seconds = traced(body, "application/json", model())
    assert isinstance(outcome, InvalidInstances) and outcome.status == 413
    assert peak < len(body)


def test_a_dense_row_of_millions_of_values_is_refused_before_parsing():
    body = b'{"instances": [[' + b",".join([b"0.5"] * 3_000_000) + b"]]}"
    outcome, peak, _ = traced(body, "application/json", model(n_features=22))
    assert isinstance(outcome, InvalidInstances) and outcome.status == 422
    assert "a dense instance needs 22 values" in str(outcome)
    assert peak < 0.1 * len(body)


@pytest.mark.parametrize("kind", ["text", "json"])
def test_a_sparse_row_over_the_row_limit_is_refused_before_parsing(kind):
    n = predict_input.MIN_ROW_LIMIT * 50
    if kind == "text":
        body = b"1 " + b" ".join(b"%d:1" % i for i in range(1, n + 1)) + b"\n"
        content_type = "text/plain"
    else:
        idx = b",".join(b"%d" % i for i in range(1, n + 1))
        body = b'{"instances": [{"indices": [' + idx + b'], "values": [' + idx + b"]}]}"
        content_type = "application/json"
    outcome, peak, _ = traced(body, content_type, model())
    assert isinstance(outcome, InvalidInstances) and "more than 1024 entries" in str(outcome)
    assert peak < 0.2 * len(body)


@pytest.mark.parametrize("kind", ["text", "json-dense", "json-sparse"])
def test_accepted_large_bodies_parse_within_a_few_times_their_size(kind):
    rng = np.random.default_rng(0)
    n_features = 200
    X = sp.random(1000, n_features, density=0.3, format="csr", random_state=1)
    if kind == "text":
        lines = (
            " ".join(f"{j + 1}:{v!r}" for j, v in zip(r.indices, r.data.tolist(), strict=True))
            for r in X
        )
        body, content_type = ("\n".join(lines) + "\n").encode(), "text/plain"
    elif kind == "json-dense":
        body = orjson.dumps({"instances": X.toarray().tolist()})
        content_type = "application/json"
    else:
        inst = [{"indices": (r.indices + 1).tolist(), "values": r.data.tolist()} for r in X]
        body, content_type = orjson.dumps({"instances": inst}), "application/json"
    m = model(n_features=n_features, n_outputs=3)
    m.coef[:] = rng.standard_normal(m.coef.shape)
    outcome, peak, _ = traced(body, content_type, m)
    assert not isinstance(outcome, InvalidInstances), outcome
    np.testing.assert_allclose(outcome["decision_values"], X.toarray() @ m.coef.T)
    assert peak < 3 * len(body), (peak, len(body))


def test_models_with_many_outputs_take_fewer_instances():
    m = model(n_features=2, n_outputs=1000)
    assert predict_input.batch_limit(m, 10_000) == predict_input.MAX_DECISION_VALUES // 1000
    outcome, _, _ = traced(b"1:1\n" * 1001, "text/plain", m)
    assert isinstance(outcome, InvalidInstances) and outcome.status == 413
    assert "at most 1000 per request" in str(outcome)


def test_a_sparse_model_predicts_like_its_dense_form():
    rng = np.random.default_rng(3)
    columns = np.array([0, 7, 19, 20])
    sparse = model(n_features=22, n_outputs=3, columns=columns)
    sparse.coef[:] = rng.standard_normal(sparse.coef.shape)
    dense = model(n_features=22, n_outputs=3)
    dense.coef[:] = sparse.dense_coef()
    X = sp.random(40, 22, density=0.3, format="csr", random_state=4)
    np.testing.assert_allclose(decision_function(sparse, X), decision_function(dense, X))
    for i in range(3):
        np.testing.assert_allclose(decision_function(sparse, X[i]), decision_function(dense, X[i]))
