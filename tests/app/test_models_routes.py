"""The model routes that read and describe a model: list, show, delete's 404s, export, coefficients,
and their OpenAPI documentation. Over HTTP, with model and dataset rows written directly
(`model_rows`)."""

from __future__ import annotations

import numpy as np

from tests.app.model_rows import (
    N_FEATURES,
    rng_problem,
    sparse_instances,
)


def test_list_show_and_page_models(service):
    ids = [service.add_model(np.ones((1, 3)), [0.0], classes=[0, 1]) for _ in range(3)]
    page = service.client.get("/v1/models", params={"limit": 2}).json()
    assert [m["id"] for m in page["items"]] == ids[::-1][:2]
    rest = service.client.get("/v1/models", params={"limit": 2, "cursor": page["next"]}).json()
    assert [m["id"] for m in rest["items"]] == ids[:1] and rest["next"] is None
    one = service.client.get(f"/v1/models/{ids[0]}").json()
    assert one["classes"] == [0, 1] and one["n_features"] == 3 and one["zero_based"] is False
    assert one["status"] == "converged" and one["n_iter"] == 7 and one["train_accuracy"] == 0.9
    assert "weights" not in one


def test_reads_that_do_not_need_the_weights_never_load_them(service):
    """A model's weights (up to 2^27 float64) are a blob in its row, and every read loaded it: a
    514 kB upload trained a model of a 76 MB blob, and each GET /v1/models (any limit) cost the
    API 300 MB for it, each GET of the model 143 MB. Statements reading the column are counted."""
    from sqlalchemy import event

    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((20, 3)), np.where(rng.random(20) > 0.5, 1.0, -1.0)
    model = service.add_model(rng.standard_normal((1, 3)), [0.1], classes=[-1, 1])
    dataset = service.add_dataset(X, y)
    service.app.state.prediction_runner.stop()  # a run reads the model in its own thread
    reads = []

    def record(conn, cursor, statement, *args):
        reads.append("models.weights" in statement)

    engine = service.db.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        client = service.client
        assert client.get("/v1/models", params={"limit": 500}).status_code == 200
        assert client.get(f"/v1/models/{model}").status_code == 200
        assert client.get(f"/v1/models/{model}/lineage").status_code == 200
        assert client.post("/v1/registered-models", json={"name": "m"}).status_code == 201
        version = client.post("/v1/registered-models/m/versions", json={"model_id": model})
        assert version.status_code == 201
        alias = client.put("/v1/registered-models/m/aliases/prod", json={"version": 1})
        assert alias.status_code == 200
        assert client.get("/v1/models/m@prod").status_code == 200
        assert reads and not any(reads)
        # the routes that compute with the weights still read them
        evaluated = client.post("/v1/models/m@v1/evaluate", json={"dataset_id": dataset})
        assert evaluated.status_code == 200, evaluated.text
        assert any(reads)
        # and unpack them once, into the model cache that predict uses: each request unpacked
        # its own copy (+388 MB for 82 MB of weights, for each request at once)
        reads.clear()
        assert client.get(f"/v1/models/{model}/export", params={"format": "json"}).json()[
            "coef"
        ] is not None
        assert client.get(f"/v1/models/{model}/coefficients").status_code == 200
        assert client.post(f"/v1/models/{model}/predictions",
                           json={"dataset_id": dataset}).status_code == 202  # fmt: skip
        assert reads and not any(reads)
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_unknown_model_is_404_everywhere(service):
    for method, path, kwargs in [
        ("get", "/v1/models/nope", {}),
        ("delete", "/v1/models/nope", {}),
        ("post", "/v1/models/nope/predict", {"json": {"instances": [[1.0]]}}),
        ("post", "/v1/models/nope/predictions", {"json": {"dataset_id": "x"}}),
        ("post", "/v1/models/nope/evaluate", {"json": {"dataset_id": "x"}}),
        ("get", "/v1/models/nope/export", {}),
    ]:
        r = getattr(service.client, method)(path, **kwargs)
        assert r.status_code == 404, (method, path, r.text)
        assert r.headers["content-type"] == "application/problem+json"
        assert "nope" in r.json()["detail"]


def test_bad_list_parameters_are_422(service):
    r = service.client.get("/v1/models", params={"limit": 0})
    assert r.status_code == 422 and "limit" in r.json()["detail"]
    r = service.client.get("/v1/models", params={"limit": 100_000})
    assert r.status_code == 422 and "limit" in r.json()["detail"]


def test_export_predicts_like_the_endpoint(service, tmp_path):
    from liblinear import liblinearutil

    rng = np.random.default_rng(12)
    X = rng_problem(n=60, seed=13)
    for coef, intercept, classes in [
        (rng.standard_normal((1, N_FEATURES)), [0.2], [-1, 1]),
        (rng.standard_normal((1, N_FEATURES)), [0.0], [0, 1]),
        (rng.standard_normal((3, N_FEATURES)), [0.1, 0.0, -0.1], [1, 2, 3]),
    ]:
        model_id = service.add_model(coef, intercept, classes=classes)
        r = service.client.get(f"/v1/models/{model_id}/export")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        path = tmp_path / f"{model_id}.model"
        path.write_text(r.text)
        labels, _, _ = liblinearutil.predict([], X, liblinearutil.load_model(str(path)), "-q")
        ours = service.client.post(
            f"/v1/models/{model_id}/predict", json={"instances": sparse_instances(X)}
        ).json()["labels"]
        assert labels == [float(v) for v in ours]

        doc = service.client.get(f"/v1/models/{model_id}/export", params={"format": "json"}).json()
        assert doc["coef"] == coef.tolist() and doc["classes"] == classes


def test_export_errors(service):
    model_id = service.add_model(np.ones((1, 2)), [0.0], classes=[0.5, 1.5])
    r = service.client.get(f"/v1/models/{model_id}/export")
    assert r.status_code == 422 and "integers" in r.json()["detail"]
    r = service.client.get(f"/v1/models/{model_id}/export", params={"format": "pickle"})
    assert r.status_code == 422 and "format" in r.json()["detail"]
    beyond = service.add_model(np.array([[1e39, 1.0]]), [0.0], classes=[-1, 1])
    r = service.client.get(f"/v1/models/{beyond}/export", params={"format": "onnx",
                                                                 "dtype": "float32"})  # fmt: skip
    assert r.status_code == 422 and "beyond float32's range" in r.json()["detail"]
    r = service.client.get(f"/v1/models/{beyond}/export", params={"format": "onnx"})
    assert r.status_code == 200  # float64 holds it


def test_openapi_documents_predict_and_the_model_routes(service):
    doc = service.client.get("/openapi.json").json()
    predict = doc["paths"]["/v1/models/{model_id}/predict"]["post"]
    assert set(predict["requestBody"]["content"]) == {"application/json", "text/plain"}
    for path in [
        "/v1/models",
        "/v1/models/{model_id}",
        "/v1/models/{model_id}/predictions",
        "/v1/models/{model_id}/predictions/{run_id}",
        "/v1/models/{model_id}/predictions/{run_id}/cancel",
        "/v1/models/{model_id}/evaluate",
        "/v1/models/{model_id}/export",
    ]:
        assert path in doc["paths"], path
    assert service.client.get("/v1/models/m/predict").status_code == 405


def test_coefficients_of_a_sparse_model_name_their_features(service):
    # stored sparsely (3 of 100 columns non-zero): its coef holds only those columns, and the
    # top features were their positions among them (2, 3, 1), not the features
    coef = np.zeros((1, 100))
    coef[0, [4, 50, 99]] = [0.5, -3.0, 2.0]
    model_id = service.add_model(coef, np.array([0.1]), classes=[-1, 1])
    top = service.client.get(f"/v1/models/{model_id}/coefficients", params={"top": 3}).json()
    assert [(i["feature"], i["weight"]) for i in top["items"]] == [(51, -3.0), (100, 2.0), (5, 0.5)]
    assert top["n_features"] == 100


def test_coefficients_name_the_columns_of_a_table(service):
    # before: a model trained on a CSV upload showed its weights by index only ("feature 3"),
    # though it knows its columns' names; a sparse model's names are those of its columns
    names = [f"c{j}" for j in range(10)]
    for columns in (4, 10):  # stored densely; sparsely (2 of 10 columns hold a weight)
        coef = np.zeros((2, columns))
        coef[0, 3], coef[1, 1] = -2.0, 1.0
        named = service.add_model(coef, [0.0, 0.0], classes=[0, 1], zero_based=True,
                                  feature_names=names[:columns])  # fmt: skip
        top = service.client.get(f"/v1/models/{named}/coefficients", params={"top": 2}).json()
        assert [(i["feature"], i["name"], i["output"]) for i in top["items"]] == [
            (3, "c3", 0), (1, "c1", 1)]  # fmt: skip
    plain = service.add_model(coef, [0.0, 0.0], classes=[0, 1])
    top = service.client.get(f"/v1/models/{plain}/coefficients", params={"top": 1}).json()
    assert top["items"] == [{"feature": 4, "name": None, "output": 0, "weight": -2.0}]


def test_the_largest_weights_are_found_a_block_at_a_time():
    """The magnitudes, their negation and argpartition's positions of a whole model took three
    copies of its weights for each coefficients request (+234 MB for 82 MB of weights)."""
    import tracemalloc

    from app.api.summaries import BLOCK, _largest

    weights = np.random.default_rng(5).standard_normal(8 * BLOCK)  # 64 MB, no ties
    expected = np.argsort(-np.abs(weights))[:1000]
    tracemalloc.start()
    try:
        found = _largest(weights, 1000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert np.array_equal(found, expected)
    assert peak < weights.nbytes / 2, peak  # about two blocks (16 MB); before: 192 MB
