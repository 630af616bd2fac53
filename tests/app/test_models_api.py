"""The model routes over HTTP (httpx through Starlette's TestClient) on a migrated database (SQLite;
PostgreSQL too when MARGIN_TEST_POSTGRES_URL is set), with model and dataset rows written
directly, so that no training is needed."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import pytest
import scipy.sparse as sp
from sqlalchemy import event, func, select

from app.services import dataset_source, prediction_csv
from app.services.dataset_files import summarize_labels
from app.services.dataset_source import DatasetSource
from app.services.model_store import pack_weights
from app.tables import Dataset, Model, PredictionRun, new_id
from tests.app.conftest import finished_run

N_FEATURES = 30


class Service:
    """The app of the shared fixtures (migrated SQLite, or PostgreSQL when configured), its
    client, and helpers that write model and dataset rows directly."""

    def __init__(self, app, client):
        self.app, self.client = app, client
        self.settings = app.state.settings
        self.db = app.state.db

    def add_model(
        self,
        coef,
        intercept,
        classes,
        kind="classifier",
        zero_based=False,
        params=None,
        n_features=None,
        tenant="local",
    ):
        coef = np.atleast_2d(np.asarray(coef, dtype=np.float64))
        model_id = new_id("model")
        with self.db.write() as session:
            session.add(
                Model(
                    id=model_id,
                    tenant=tenant,
                    job_id=None,
                    dataset_id=None,
                    estimator="LinearSVC",
                    params=params or {"C": 1.0},
                    kind=kind,
                    classes=list(classes),
                    n_features=n_features or coef.shape[1],
                    zero_based=zero_based,
                    weights=pack_weights(coef, intercept),
                    status="converged",
                    gap=1e-3,
                    n_iter=7,
                    train_time_s=0.25,
                    train_accuracy=0.9,
                    validation_accuracy=None,
                )
            )
        return model_id

    def add_dataset(self, X, y, zero_based=False, label_kind="classes", tenant="local"):
        """Store arrays the way the upload path does (raw .npy files under datasets/<id>/)."""
        X = sp.csr_matrix(X)
        dataset_id = new_id("ds")
        directory = self.settings.data_dir / "datasets" / dataset_id
        directory.mkdir(parents=True)
        for name, array in (
            ("data", X.data),
            ("indices", X.indices),
            ("indptr", X.indptr),
            ("y", np.asarray(y, dtype=np.float64)),
        ):
            np.save(directory / f"{name}.npy", array)
        with self.db.write() as session:
            session.add(
                Dataset(
                    id=dataset_id,
                    tenant=tenant,
                    name="test",
                    filename="test.svm",
                    n_rows=X.shape[0],
                    n_features=X.shape[1],
                    nnz=X.nnz,
                    zero_based=zero_based,
                    has_qid=False,
                    label_kind=label_kind,
                    classes=summarize_labels(np.asarray(y, float))["classes"]
                    if label_kind == "classes"
                    else None,
                    target={},
                    sha256="0" * 64,
                    size_bytes=1,
                )
            )
        return dataset_id

    def count(self, table) -> int:
        with self.db.session() as session:
            return session.scalar(select(func.count()).select_from(table))


@pytest.fixture
def service(app, client):
    return Service(app, client)


def rng_problem(n=40, d=N_FEATURES, seed=0):
    X = sp.random(n, d, density=0.2, format="csr", random_state=seed)
    X.data = X.data * 4 - 2
    return X


def sparse_instances(X, base=1):
    return [
        {"indices": (X[i].indices + base).tolist(), "values": X[i].data.tolist()}
        for i in range(X.shape[0])
    ]


def libsvm_lines(X, base=1, labels=None):
    out = []
    for i in range(X.shape[0]):
        row = X[i]
        feats = " ".join(
            f"{j + base}:{float(v)!r}" for j, v in zip(row.indices, row.data, strict=True)
        )
        out.append((f"{labels[i]} " if labels is not None else "") + feats)
    return "\n".join(out) + "\n"


@pytest.fixture
def binary(service):
    rng = np.random.default_rng(1)
    coef, intercept = rng.standard_normal((1, N_FEATURES)), np.array([0.3])
    return service.add_model(coef, intercept, classes=[-1, 1]), coef, intercept


def reference(X, coef, intercept):
    return X.toarray() @ coef.T + intercept


# --------------------------------------------------------------------------------------------
# Metadata


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


# --------------------------------------------------------------------------------------------
# Predict


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


def test_cached_predictions_touch_no_database(service, binary):
    url = f"/v1/models/{binary[0]}/predict"
    doc = {"instances": [{"indices": [1, 2], "values": [1.0, 2.0]}]}
    assert service.client.post(url, json=doc).status_code == 200
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


# --------------------------------------------------------------------------------------------
# Background predictions


def test_prediction_run_writes_a_csv_equal_to_predict(service, binary):
    model_id, coef, intercept = binary
    X = rng_problem(n=50, seed=7)
    dataset_id = service.add_dataset(X, np.ones(50))
    r = service.client.post(f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id})
    assert r.status_code == 202, r.text
    location = r.headers["location"]
    assert location.startswith(f"/v1/models/{model_id}/predictions/pred_")
    status = finished_run(service.client, location)
    assert status["status"] == "succeeded" and status["n_rows"] == 50
    assert status["result"] == location
    r = service.client.get(location)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["row", "label", "decision_value"]
    D = reference(X, coef, intercept)
    assert [int(row[0]) for row in rows[1:]] == list(range(50))
    assert [int(row[1]) for row in rows[1:]] == np.where(D[:, 0] > 0, 1, -1).tolist()
    online = service.client.post(
        f"/v1/models/{model_id}/predict", json={"instances": sparse_instances(X)}
    ).json()
    assert [float(row[2]) for row in rows[1:]] == [d[0] for d in online["decision_values"]]
    listed = service.client.get(f"/v1/models/{model_id}/predictions").json()
    assert [item["id"] for item in listed["items"]] == [status["id"]]
    # Deleting the model removes its runs and their files.
    csv_file = service.settings.data_dir / "predictions" / f"{status['id']}.csv"
    assert csv_file.exists()
    assert service.client.delete(f"/v1/models/{model_id}").status_code == 204
    assert not csv_file.exists() and service.count(PredictionRun) == 0


def test_multiclass_csv_has_a_column_per_class(service):
    rng = np.random.default_rng(8)
    coef = rng.standard_normal((3, N_FEATURES))
    model_id = service.add_model(coef, np.zeros(3), classes=[4, 5, 6])
    X = rng_problem(n=10, seed=9)
    dataset_id = service.add_dataset(X, np.full(10, 4))
    location = service.client.post(
        f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    finished_run(service.client, location)
    rows = list(csv.reader(io.StringIO(service.client.get(location).text)))
    assert rows[0] == ["row", "label", "decision_value_4", "decision_value_5", "decision_value_6"]
    D = reference(X, coef, np.zeros(3))
    np.testing.assert_allclose(np.array(rows[1:], dtype=float)[:, 2:], D, rtol=1e-12)


def test_a_csv_removed_after_the_answer_began_is_still_sent_whole(service, binary):
    """The CSV was opened only when the response started: a run deleted between the route's
    check and that moment was a 500. Now the route opens it, and an open file reads to its end."""
    import asyncio

    from app.api.prediction_runs import _csv_response
    from app.storage import get_storage, prediction_key

    dataset_id = service.add_dataset(rng_problem(n=10, seed=3), np.ones(10))
    location = service.client.post(
        f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    assert finished_run(service.client, location)["status"] == "succeeded"
    expected = service.client.get(location).content
    with service.db.session() as session:
        run = session.get(PredictionRun, location.rsplit("/", 1)[1])
    response = _csv_response(service.settings, run)
    get_storage(service.settings).local_path(prediction_key(run.id)).unlink()

    async def body() -> bytes:
        return b"".join([chunk async for chunk in response.body_iterator])

    assert asyncio.run(body()) == expected
    assert int(response.headers["content-length"]) == len(expected)
    assert service.client.get(location).status_code == 410  # and now it is gone


def test_prediction_run_bad_inputs_store_nothing(service, binary):
    url = f"/v1/models/{binary[0]}/predictions"
    r = service.client.post(url, json={"dataset_id": "ds_missing"})
    assert r.status_code == 404 and "ds_missing" in r.json()["detail"]
    r = service.client.post(url, json={"dataset_id": "x", "extra": 1})
    assert r.status_code == 422 and "extra" in r.json()["detail"]
    r = service.client.post(url, json={})
    assert r.status_code == 422 and "dataset_id" in r.json()["detail"]
    # A zero-based file using index 0 cannot be read by a model trained on a one-based file.
    X = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, N_FEATURES))
    zero = service.add_dataset(X, [1.0], zero_based=True)
    r = service.client.post(url, json={"dataset_id": zero})
    assert r.status_code == 422 and "feature index 0" in r.json()["detail"]
    assert service.count(PredictionRun) == 0
    assert list((service.settings.data_dir / "predictions").iterdir()) == []


def test_a_failed_run_reports_its_error(service, binary):
    X = rng_problem(n=5)
    dataset_id = service.add_dataset(X, np.ones(5))
    (service.settings.data_dir / "datasets" / dataset_id / "data.npy").unlink()
    location = service.client.post(
        f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    finished_run(service.client, location)
    r = service.client.get(location)
    assert r.status_code == 409 and r.json()["run"]["status"] == "failed"
    assert "/work" not in r.text and str(service.settings.data_dir) not in r.text
    assert list((service.settings.data_dir / "predictions").iterdir()) == []


def test_unknown_run_is_404(service, binary):
    r = service.client.get(f"/v1/models/{binary[0]}/predictions/pred_nope")
    assert r.status_code == 404


def test_a_pending_run_answers_202(service, binary):
    with service.db.write() as session:
        session.add(
            PredictionRun(id="pred_x", model_id=binary[0], dataset_id=None, status="running")
        )
    r = service.client.get(f"/v1/models/{binary[0]}/predictions/pred_x")
    assert r.status_code == 202 and r.json()["status"] == "running"
    # A model with an active run cannot be deleted.
    assert service.client.delete(f"/v1/models/{binary[0]}").status_code == 409


def _key(service, tenant: str) -> dict[str, str]:
    """Headers of a new key of `tenant` (AUTH_MODE=auto on loopback: a key sent is used)."""
    from app.services import keys

    return {"Authorization": f"Bearer {keys.create_key(service.db, tenant, 't', ['admin'])[1]}"}


def _tenant_model(service, tenant: str, n_rows: int = 10) -> tuple[str, str]:
    """A model and a dataset of `tenant`: (model id, dataset id)."""
    coef = np.random.default_rng(2).standard_normal((1, N_FEATURES))
    model_id = service.add_model(coef, [0.0], classes=[-1, 1], tenant=tenant)
    X = rng_problem(n=n_rows, seed=5)
    return model_id, service.add_dataset(X, np.ones(n_rows), tenant=tenant)


def test_active_prediction_runs_are_bounded_per_tenant(service):
    from app.services import keys

    service.app.state.prediction_runner.stop()  # the runs stay queued
    acme, globex = _key(service, "acme"), _key(service, "globex")
    keys.set_quota(service.db, "acme", None, None, active_prediction_runs=2)
    model_id, dataset_id = _tenant_model(service, "acme")
    url = f"/v1/models/{model_id}/predictions"

    def start(headers=acme, model=model_id, dataset=dataset_id):
        body = {"dataset_id": dataset}
        return service.client.post(f"/v1/models/{model}/predictions", json=body, headers=headers)

    accepted = [start(), start()]
    assert [r.status_code for r in accepted] == [202, 202]  # at the bound
    refused = start()  # one over
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    problem = refused.json()
    assert problem["quota_active_prediction_runs"] == 2
    assert "2 queued or running prediction runs" in problem["detail"]
    assert len(service.client.get(url, headers=acme).json()["items"]) == 2  # no third row
    # the bound is per tenant: globex has the default (QUOTA_ACTIVE_PREDICTION_RUNS, 100)
    assert start(globex, *_tenant_model(service, "globex")).status_code == 202
    # a cancelled run frees its slot
    run_id = accepted[0].json()["id"]
    assert service.client.post(f"{url}/{run_id}/cancel", headers=acme).status_code == 200
    assert start().status_code == 202


def test_starting_a_run_writes_nothing_in_the_requests_read_transaction(
    service, binary, monkeypatch
):
    """The storage check of a new run locks the tenant's row, and first inserts one for a tenant
    without (the local tenant of a database from before rows were made for it). In the request's
    read transaction, on SQLite, that insert failed at once (503) when another connection had
    written since the request's first read; the check belongs to the run's write transaction."""
    from app.api import prediction_runs as api
    from app.tables import Tenant

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        session.query(Tenant).delete()
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    loaded = api.model_from_row

    def written_meanwhile(row):
        with service.db.write() as session:  # another request or a worker commits a write
            session.get(Dataset, dataset_id).name = "renamed"
        return loaded(row)

    monkeypatch.setattr(api, "model_from_row", written_meanwhile)
    r = service.client.post(f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id})
    assert r.status_code == 202, r.text
    with service.db.session() as session:
        assert session.get(Tenant, "local") is not None  # the run's transaction made the row


def test_runs_are_claimed_fairly_across_tenants(service, binary):
    """Tenant a queues five runs, then tenant b one: b's run is claimed second, not sixth."""
    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        for i, tenant in enumerate("aaaaab", start=1):  # ids are in queue order
            session.add(PredictionRun(id=f"pred_{i}", model_id=binary[0], tenant=tenant))
    claimed = [claim_next(service.db, "w:1:0").run_id for _ in range(4)]
    # a (0 running) before b (0) by age; then b (0) before a (1); then a (1) ties b (1): age
    assert claimed == ["pred_1", "pred_6", "pred_2", "pred_3"]
    with service.db.session() as session:
        statuses = {r.id: r.status for r in session.scalars(select(PredictionRun))}
    assert [statuses[f"pred_{i}"] for i in range(1, 7)] == ["running"] * 3 + ["queued"] * 2 + [
        "running"
    ]


def test_concurrent_claims_never_take_a_run_twice(service, binary):
    from concurrent.futures import ThreadPoolExecutor

    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        for i in range(12):
            session.add(PredictionRun(id=f"pred_{i:02d}", model_id=binary[0], tenant="abc"[i % 3]))

    def claims(worker: int) -> list[str]:
        taken = [claim_next(service.db, f"w:{worker}:0") for _ in range(4)]
        return [c.run_id for c in taken if c is not None]

    with ThreadPoolExecutor(4) as pool:
        claimed = [run for runs in pool.map(claims, range(4)) for run in runs]
    assert sorted(claimed) == [f"pred_{i:02d}" for i in range(12)]  # each once, none left


def test_cancel_a_queued_run(service, binary):
    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    run = service.client.post(url, json={"dataset_id": dataset_id}).json()
    assert run["status"] == "queued"
    r = service.client.post(f"{url}/{run['id']}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    assert claim_next(service.db, "w:1:0") is None  # the runner never takes it
    assert [i["status"] for i in service.client.get(url).json()["items"]] == ["cancelled"]
    assert 'margin_prediction_runs{status="cancelled"} 1.0' in service.client.get("/metrics").text
    r = service.client.get(f"{url}/{run['id']}")
    assert r.status_code == 409 and r.json()["title"] == "Prediction run cancelled"
    again = service.client.post(f"{url}/{run['id']}/cancel")
    assert again.status_code == 409 and "already ended cancelled" in again.json()["detail"]


def test_cancel_a_running_run_stops_it_between_chunks(service, binary, monkeypatch):
    """The runner reads the run's status between chunks: held at its first read, the run is
    cancelled over HTTP; released, the runner stops there and removes its partial CSV."""
    import queue
    import threading

    from app.services import prediction_runs as runs
    from app.storage import get_storage, prediction_key

    monkeypatch.setattr(dataset_source, "CHUNK_ROWS", 4)  # 20 rows: five chunks
    monkeypatch.setattr(runs, "CANCEL_CHECK_S", 0.0)  # a status read after every chunk
    at_check, release, outcomes = threading.Event(), threading.Event(), queue.Queue()
    checked, executed = runs.still_running, runs.execute_run

    def held_check(db, claim):
        at_check.set()
        assert release.wait(30)
        return checked(db, claim)

    def recorded(*args):
        outcome = executed(*args)
        outcomes.put(outcome)
        return outcome

    monkeypatch.setattr(runs, "still_running", held_check)
    monkeypatch.setattr(runs, "execute_run", recorded)
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=20), np.ones(20))
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}).json()["id"]
    try:
        assert at_check.wait(30), "the runner did not write the first chunk"
        staging = prediction_csv.staging_path(service.settings.data_dir, run_id)
        part = staging.with_suffix(".csv.part")
        assert part.exists()  # the first chunk is written, the rest not
        assert service.client.get(f"{url}/{run_id}?format=json").json()["status"] == "running"
        r = service.client.post(f"{url}/{run_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    finally:
        release.set()
    assert outcomes.get(timeout=30) == "stopped"
    assert not part.exists() and not staging.exists()
    assert not get_storage(service.settings).exists(prediction_key(run_id))
    run = service.client.get(f"{url}/{run_id}?format=json").json()
    assert run["status"] == "cancelled" and run["n_rows"] is None


def test_a_run_cancelled_after_its_last_read_ends_cancelled_without_a_csv(
    service, binary, monkeypatch
):
    import queue

    from app.services import prediction_runs as runs
    from app.storage import get_storage, prediction_key

    monkeypatch.setattr(runs, "CANCEL_CHECK_S", 1e9)  # no status read during the run
    write, executed, outcomes = runs.write_csv, runs.execute_run, queue.Queue()
    model_id = binary[0]

    def write_then_cancel(path, model, chunks):
        n_rows = write(path, model, chunks)
        runs.cancel_run(service.db, model_id, path.stem)  # path: tmp/<run id>.csv
        return n_rows

    monkeypatch.setattr(runs, "write_csv", write_then_cancel)
    monkeypatch.setattr(runs, "execute_run", lambda *args: outcomes.put(executed(*args)))
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}).json()["id"]
    assert outcomes.get(timeout=30) == "lost"  # its end found the run cancelled
    assert not get_storage(service.settings).exists(prediction_key(run_id))
    run = service.client.get(f"{url}/{run_id}?format=json").json()
    assert run["status"] == "cancelled" and run["n_rows"] is None


def test_cancel_a_finished_run_is_409(service, binary):
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    location = service.client.post(url, json={"dataset_id": dataset_id}).headers["location"]
    assert finished_run(service.client, location)["status"] == "succeeded"
    r = service.client.post(f"{location}/cancel")
    assert r.status_code == 409 and "already ended succeeded" in r.json()["detail"]
    assert service.client.get(location).status_code == 200  # its CSV is untouched


def test_cancel_another_tenants_run_is_404(service):
    service.app.state.prediction_runner.stop()
    acme, globex = _key(service, "acme"), _key(service, "globex")
    model_id, dataset_id = _tenant_model(service, "acme")
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}, headers=acme).json()["id"]
    r = service.client.post(f"{url}/{run_id}/cancel", headers=globex)
    assert r.status_code == 404, r.text
    # nor through a model of its own
    own, _ = _tenant_model(service, "globex")
    r = service.client.post(f"/v1/models/{own}/predictions/{run_id}/cancel", headers=globex)
    assert r.status_code == 404 and "Prediction run not found" == r.json()["title"]
    run = service.client.get(f"{url}/{run_id}?format=json", headers=acme).json()
    assert run["status"] == "queued"


def test_the_python_client_starts_lists_and_cancels_runs(service, binary, tmp_path):
    from margin_client import Client, MarginError

    service.app.state.prediction_runner.stop()
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    with Client("http://testserver", transport=service.client._transport) as client:
        run = client.runs.start(model_id, dataset_id)
        assert client.runs.get(model_id, run["id"])["status"] == "queued"
        assert client.runs.cancel(model_id, run["id"])["status"] == "cancelled"
        assert [r["status"] for r in client.runs.list(model_id)] == ["cancelled"]
        with pytest.raises(MarginError) as ended:
            client.runs.cancel(model_id, run["id"])
        assert ended.value.status == 409
        with pytest.raises(MarginError) as cancelled:
            client.runs.download(model_id, run["id"], tmp_path / "out.csv")
        assert cancelled.value.status == 409 and not (tmp_path / "out.csv").exists()


# --------------------------------------------------------------------------------------------
# Evaluate and export


def test_evaluate_classifier_and_regressor(service):
    from sklearn.metrics import confusion_matrix, mean_squared_error, r2_score

    rng = np.random.default_rng(10)
    X = rng_problem(n=200, seed=11)
    coef = rng.standard_normal((3, N_FEATURES))
    model_id = service.add_model(coef, np.zeros(3), classes=[0, 1, 2])
    y = rng.integers(0, 3, size=200).astype(float)
    dataset_id = service.add_dataset(X, y)
    r = service.client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": dataset_id})
    assert r.status_code == 200, r.text
    report = r.json()
    predicted = reference(X, coef, np.zeros(3)).argmax(axis=1)
    assert report["accuracy"] == pytest.approx(np.mean(predicted == y))
    assert report["confusion_matrix"] == confusion_matrix(y, predicted).tolist()
    assert report["labels"] == [0, 1, 2] and report["n"] == 200

    reg = service.add_model(coef[:1], [0.5], classes=[], kind="regressor")
    target = reference(X, coef[:1], [0.5])[:, 0] + rng.standard_normal(200) * 0.1
    real = service.add_dataset(X, target, label_kind="real")
    report = service.client.post(f"/v1/models/{reg}/evaluate", json={"dataset_id": real}).json()
    pred = reference(X, coef[:1], [0.5])[:, 0]
    assert report["mse"] == pytest.approx(mean_squared_error(target, pred), rel=1e-10)
    assert report["r2"] == pytest.approx(r2_score(target, pred), rel=1e-10)

    r = service.client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": real})
    assert r.status_code == 422 and "real-valued targets" in r.json()["detail"]


def test_evaluate_maps_a_zero_based_dataset_onto_a_one_based_model(service):
    coef = np.arange(1.0, 4.0)[None, :]
    model_id = service.add_model(coef, [0.0], classes=[-1, 1], zero_based=False)
    # Raw indices 1 and 3 of a file read as zero-based are columns 1 and 3 there.
    X = sp.csr_matrix(([1.0, -1.0], ([0, 1], [1, 3])), shape=(2, 4))
    dataset_id = service.add_dataset(X, [1.0, -1.0], zero_based=True)
    report = service.client.post(
        f"/v1/models/{model_id}/evaluate", json={"dataset_id": dataset_id}
    ).json()
    assert report["accuracy"] == 1.0  # 1*1 > 0 -> 1; -1*3 < 0 -> -1


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


@pytest.mark.parametrize("retries", [0, 1])
def test_interrupted_runs_are_recovered_like_jobs(service, binary, retries):
    import socket
    from datetime import timedelta

    from app.services.prediction_runs import recover_runs
    from app.tables import utcnow

    # the app's own runner would claim the queued and re-queued rows while the test reads them
    service.app.state.prediction_runner.stop()
    dead = f"{socket.gethostname()}:999999999:0"  # a process of this host that is gone
    old = utcnow() - timedelta(minutes=10)
    with service.db.write() as session:
        for run_id, status, worker, beat in [
            ("pred_a", "running", dead, utcnow()),
            ("pred_b", "queued", None, None),
            ("pred_c", "running", "elsewhere:1:0", utcnow()),  # alive on another host
            ("pred_d", "running", "elsewhere:2:0", old),  # silent on another host
            ("pred_e", "succeeded", dead, old),
        ]:
            session.add(
                PredictionRun(
                    id=run_id,
                    model_id=binary[0],
                    status=status,
                    worker=worker,
                    attempt=1,
                    heartbeat_at=beat,
                )
            )
    ended = "queued" if retries else "failed"
    assert recover_runs(service.db, retries) == {"pred_a": ended}
    assert recover_runs(service.db, retries, stale_before=utcnow() - timedelta(minutes=1)) == {
        "pred_d": ended
    }
    with service.db.session() as session:
        a = session.get(PredictionRun, "pred_a")
    assert "interrupted" in a.error and a.attempt == 1
    assert (a.worker is None) if retries else (a.finished_at is not None)


def test_a_requeued_runs_error_is_not_its_outcome(service, binary):
    """A run put back in the queue notes why ("interrupted ...; re-queued"). Cancelled next, its
    409 said it was interrupted, not cancelled; run again, it succeeded with that error."""
    import socket

    from app.services.prediction_runs import claim_next, execute_run, recover_runs

    service.app.state.prediction_runner.stop()
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    dead = f"{socket.gethostname()}:999999999:0"  # a process of this host that is gone
    with service.db.write() as session:
        for run_id in ("pred_a", "pred_b"):
            session.add(
                PredictionRun(id=run_id, model_id=binary[0], dataset_id=dataset_id,
                              status="running", worker=dead, attempt=1)
            )  # fmt: skip
    assert recover_runs(service.db, 1) == {"pred_a": "queued", "pred_b": "queued"}
    url = f"/v1/models/{binary[0]}/predictions"
    assert service.client.post(f"{url}/pred_a/cancel").status_code == 200
    cancelled = service.client.get(f"{url}/pred_a")
    assert cancelled.status_code == 409
    assert "interrupted" not in cancelled.json()["detail"], cancelled.text
    claim = claim_next(service.db, "w:1:0")
    assert execute_run(service.db, service.settings, claim) == "succeeded"
    assert service.client.get(f"{url}/pred_b?format=json").json()["error"] is None


def test_starting_the_api_recovers_runs_a_previous_process_left_active(service, binary, settings):
    import socket

    from fastapi.testclient import TestClient

    from app.main import create_app

    dataset_id = service.add_dataset(rng_problem(n=20, seed=3), np.ones(20))
    with service.db.write() as session:
        session.add(
            PredictionRun(
                id="pred_left",
                model_id=binary[0],
                dataset_id=dataset_id,
                status="running",
                worker=f"{socket.gethostname()}:999999999:0",
                attempt=1,
            )
        )
        queued = PredictionRun(id="pred_wait", model_id=binary[0], dataset_id=dataset_id)
        session.add(queued)
    with TestClient(create_app(settings)) as restarted:
        base = f"/v1/models/{binary[0]}/predictions"
        left = finished_run(restarted, f"{base}/pred_left")
        waiting = finished_run(restarted, f"{base}/pred_wait")
    assert left["status"] == "failed" and "interrupted" in left["error"]  # JOB_RETRIES=0
    assert waiting["status"] == "succeeded" and waiting["n_rows"] == 20


def test_datasets_are_read_in_chunks_with_the_same_result(service, binary, tmp_path):
    from app.services.model_cache import ModelCache, fetch_model

    model_id, coef, intercept = binary
    X = rng_problem(n=50, seed=14)
    y = np.where(np.arange(50) % 3 == 0, 1.0, -1.0)
    dataset_id = service.add_dataset(X, y)
    with service.db.session() as session:
        source = DatasetSource.of(service.settings, session.get(Dataset, dataset_id))
    model = fetch_model(service.db, ModelCache(1), model_id)
    chunks = list(source.chunks(model, rows=7))
    assert [start for start, _, _ in chunks] == list(range(0, 50, 7))
    stacked = sp.vstack([c for _, c, _ in chunks]).toarray()
    np.testing.assert_array_equal(stacked, X.toarray())
    np.testing.assert_array_equal(np.concatenate([t for _, _, t in chunks]), y)
    n = prediction_csv.write_csv(tmp_path / "out.csv", model, source.chunks(model, rows=7))
    rows = list(csv.reader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert n == 50 and len(rows) == 51
    np.testing.assert_allclose(
        [float(r[2]) for r in rows[1:]], reference(X, coef, intercept)[:, 0], rtol=1e-12
    )


def test_evaluate_bad_inputs(service, binary):
    url = f"/v1/models/{binary[0]}/evaluate"
    r = service.client.post(url, json={"dataset_id": "ds_missing"})
    assert r.status_code == 404 and "ds_missing" in r.json()["detail"]
    r = service.client.post(url, json={"dataset_id": "x", "limit": 3})
    assert r.status_code == 422 and "limit" in r.json()["detail"]
    r = service.client.post(url, content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 422
    X = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, N_FEATURES))
    zero = service.add_dataset(X, [1.0], zero_based=True)
    r = service.client.post(url, json={"dataset_id": zero})
    assert r.status_code == 422 and "feature index 0" in r.json()["detail"]
    assert service.count(PredictionRun) == 0


def test_evaluate_refuses_an_unrelated_dataset_and_reports_ignored_features(service):
    coef = np.arange(1.0, 5.0)[None, :]
    model_id = service.add_model(coef, [0.0], classes=[-1, 1])
    url = f"/v1/models/{model_id}/evaluate"
    # a 26-class set whose labels the binary model never saw: before, accuracy 0.0 and no word
    X = sp.random(52, 6, density=0.5, format="csr", random_state=5)
    unrelated = service.add_dataset(X, np.repeat(np.arange(2.0, 28.0), 2))
    r = service.client.post(url, json={"dataset_id": unrelated})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "none of dataset" in detail and "is a class of the model" in detail
    # fewer features than the model: valid; more: the extra ones ignored, and counted
    fewer = service.add_dataset(sp.random(4, 3, density=1.0, format="csr"), [1, -1, 1, -1])
    r = service.client.post(url, json={"dataset_id": fewer})
    assert r.status_code == 200 and r.json()["ignored_features"] == 0
    more = service.add_dataset(sp.random(4, 9, density=1.0, format="csr"), [1, -1, 1, 1])
    r = service.client.post(url, json={"dataset_id": more})
    assert r.status_code == 200 and r.json()["ignored_features"] == 5


def test_a_dataset_deleted_while_it_is_read_is_404(service, binary, monkeypatch):
    """Evaluate and background predictions read a dataset after their request gave its
    connection back; a delete in between answered 500 (a missing file, a foreign key)."""
    import shutil

    from app.services import prediction_runs as runs

    model_id = binary[0]
    X = rng_problem(n=30, seed=4)
    gone_files = service.add_dataset(X, np.where(np.arange(30) % 2, 1.0, -1.0))
    gone_row = service.add_dataset(X, np.where(np.arange(30) % 2, 1.0, -1.0))
    of, create_run = DatasetSource.of, runs.create_run

    def files_deleted_meanwhile(settings, dataset):
        if dataset.id == gone_files:
            shutil.rmtree(settings.data_dir / "datasets" / dataset.id)
        return of(settings, dataset)

    def row_deleted_meanwhile(db, model, dataset_id, *size):
        with db.write() as session:
            session.delete(session.get(Dataset, dataset_id))
        return create_run(db, model, dataset_id, *size)

    monkeypatch.setattr(DatasetSource, "of", staticmethod(files_deleted_meanwhile))
    monkeypatch.setattr(runs, "create_run", row_deleted_meanwhile)
    for path, dataset_id in (("evaluate", gone_files), ("predictions", gone_row)):
        response = service.client.post(f"/v1/models/{model_id}/{path}",
                                       json={"dataset_id": dataset_id})  # fmt: skip
        assert response.status_code == 404, (path, response.text)
        assert "deleted while it was being read" in response.json()["detail"]


def test_coefficients_of_a_sparse_model_name_their_features(service):
    # stored sparsely (3 of 100 columns non-zero): its coef holds only those columns, and the
    # top features were their positions among them (2, 3, 1), not the features
    coef = np.zeros((1, 100))
    coef[0, [4, 50, 99]] = [0.5, -3.0, 2.0]
    model_id = service.add_model(coef, np.array([0.1]), classes=[-1, 1])
    top = service.client.get(f"/v1/models/{model_id}/coefficients", params={"top": 3}).json()
    assert [(i["feature"], i["weight"]) for i in top["items"]] == [(51, -3.0), (100, 2.0), (5, 0.5)]
    assert top["n_features"] == 100
