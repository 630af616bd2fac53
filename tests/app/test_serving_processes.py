"""Serving over real HTTP from `margin api` processes on a real PostgreSQL: a Triton client
(`tritonclient.http`, the protocol's own client) against the v2 routes, MLflow-shaped
invocations through ``name@production``, and an alias move seen by two API processes within
ALIAS_CACHE_S."""

from __future__ import annotations

import time

import numpy as np
import pytest

from app import migrate
from app.db import Database
from app.services.model_store import pack_weights
from app.tables import Model, new_id
from tests.app.conftest import ScratchDatabase, postgres_url_or_skip
from tests.reliability.helpers import Margin, free_port

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(240)]
N_FEATURES = 6


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    scratch = ScratchDatabase(postgres_url_or_skip())
    migrate.upgrade(scratch.url)
    root = tmp_path_factory.mktemp("serving")
    margin = Margin(root, database_url=scratch.url, data_dir=root / "data", alias_cache_s=1.0)
    try:
        apis = [margin.api(free_port())[1] for _ in range(2)]
        yield scratch.url, apis
    finally:
        margin.close()
        scratch.drop()


def add_model(url: str, coef, intercept) -> str:
    db = Database(url)
    model_id = new_id("mdl")
    with db.write() as session:
        session.add(Model(
            id=model_id, estimator="LinearSVC", params={"C": 1.0}, kind="classifier",
            classes=[-1.0, 1.0], n_features=N_FEATURES, zero_based=True,
            weights=pack_weights(np.atleast_2d(coef), [intercept]), status="converged",
            gap=1e-3, n_iter=3, train_time_s=0.1,
            feature_names=[f"f{j}" for j in range(N_FEATURES)],
        ))  # fmt: skip
    db.dispose()
    return model_id


def test_an_alias_move_is_seen_by_two_api_processes(stack):
    url, (a, b) = stack
    up = add_model(url, np.ones(N_FEATURES), 0.0)
    down = add_model(url, -np.ones(N_FEATURES), 0.0)
    assert a.post("/v1/registered-models", json={"name": "flip"}).status_code == 201
    for model_id in (up, down):
        a.post("/v1/registered-models/flip/versions", json={"model_id": model_id})
    a.put("/v1/registered-models/flip/aliases/production", json={"version": 1})
    body = {"inputs": [[1.0] * N_FEATURES]}
    for api in (a, b):
        assert api.post("/v1/models/flip@production/invocations", json=body).json() == {
            "predictions": [1.0]
        }
    cached = time.monotonic()  # b's cache entry for the alias was made before this
    moved = a.put("/v1/registered-models/flip/aliases/production", json={"version": 2})
    assert moved.status_code == 200
    # The old version may be served only by requests sent while b's entry is younger than
    # ALIAS_CACHE_S (1 s). Timed by when each request is sent, not by when its answer comes back,
    # so a slow answer on a loaded machine is no failure (a 1.5 s deadline on the answers was).
    while True:
        sent = time.monotonic()
        predictions = b.post("/v1/models/flip@production/invocations", json=body).json()
        if predictions["predictions"] == [-1.0]:
            break
        assert sent - cached < 1.0, "process b served the old version past ALIAS_CACHE_S"
        time.sleep(0.05)
    infer = {"inputs": [{"name": "x", "shape": [1, N_FEATURES], "datatype": "FP64",
                         "data": [1.0] * N_FEATURES}]}  # fmt: skip
    for api in (a, b):
        out = api.post("/v2/models/flip@production/infer", json=infer).json()["outputs"]
        assert out[0]["data"] == [-1]
    assert a.delete(f"/v1/models/{down}").status_code == 409


def test_a_triton_client_speaks_to_the_v2_routes(stack):
    import tritonclient.http as triton

    url, (a, _) = stack
    coef = np.arange(N_FEATURES, dtype=np.float64) - 2.5
    model_id = add_model(url, coef, 0.25)
    a.post("/v1/registered-models", json={"name": "ranker"})
    a.post("/v1/registered-models/ranker/versions", json={"model_id": model_id})
    client = triton.InferenceServerClient(url=str(a.base_url).removeprefix("http://"))
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("ranker") and client.is_model_ready("ranker", "1")
    meta = client.get_model_metadata("ranker")
    assert meta["inputs"][0]["shape"] == [-1, N_FEATURES]
    X = np.random.default_rng(0).standard_normal((7, N_FEATURES))
    expected = X @ coef + 0.25
    for binary, dtype in ((False, "FP64"), (True, "FP64"), (True, "FP32")):
        tensor = triton.InferInput("input", list(X.shape), dtype)
        tensor.set_data_from_numpy(X.astype(np.float64 if dtype == "FP64" else np.float32),
                                   binary_data=binary)  # fmt: skip
        outputs = [triton.InferRequestedOutput(n, binary_data=False)
                   for n in ("label", "decision_values")]  # fmt: skip
        result = client.infer("ranker", [tensor], outputs=outputs, request_id="r1")
        tol = 1e-12 if dtype == "FP64" else 1e-5
        np.testing.assert_allclose(result.as_numpy("decision_values")[:, 0], expected, atol=tol)
        assert result.as_numpy("label").tolist() == np.where(expected > 0, 1, -1).tolist()
    with pytest.raises(triton.InferenceServerException, match="no model"):
        client.get_model_metadata("absent")
    client.close()
    assert a.get("/v2/health/ready").status_code == 200
