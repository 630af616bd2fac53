"""Structural SVMs and LinearSVR through the service: a qid-grouped upload is recognized, batch
and online structural jobs train (progress carries the lower and upper bounds and their gap) and
store what the solvers return when called directly on the same file; a LinearSVR model predicts
real values equal to `solvers.LinearSVR` and is evaluated with scikit-learn's MSE and R²; bad
params are 422 naming the field, with nothing stored."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from app.jobs.runner import RunContext, run_job
from app.services import stored_chunks
from app.services.model_store import unpack_weights
from app.tables import Job, Model
from tests.app.conftest import HEART, upload

pytestmark = pytest.mark.timeout(120)


def context(app) -> RunContext:
    return RunContext(app.state.settings, app.state.db)


def libsvm_bytes(X, y, qid=None) -> bytes:
    buffer = io.BytesIO()
    solvers.write_libsvm(buffer, X, y, qid=qid)
    return buffer.getvalue()


def structural_problem(n_examples=120, seed=0, shuffle=False):
    """A random shared-slack problem: 2-5 constraint rows per example, margins in (0.1, 1), rows
    mostly on the right side of a random w, so that few of them are support vectors."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 6, size=n_examples)
    qid = np.repeat(np.arange(1, n_examples + 1), sizes)
    X = sp.random(len(qid), 12, density=0.4, random_state=seed, format="csr")
    X.data = rng.normal(size=X.nnz)
    side = np.where(X @ rng.normal(size=12) < 0, -3.0, 3.0)
    X = (sp.diags(side) @ X).tocsr()
    margins = rng.uniform(0.1, 1.0, size=len(qid))
    if shuffle:
        order = rng.permutation(len(qid))
        X, margins, qid = X[order], margins[order], qid[order]
    return libsvm_bytes(X, margins, qid)


def train(client, app, dataset_id, estimator, params) -> dict:
    response = client.post(
        "/v1/jobs", json={"dataset_id": dataset_id, "estimator": estimator, "params": params}
    )
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    run_job(job_id, context(app))
    return client.get(f"/v1/jobs/{job_id}").json()


def stored_model(db, model_id):
    with db.session() as session:
        model = session.get(Model, model_id)
        session.expunge(model)
    return model


def progress(client, job_id) -> list[dict]:
    """Every progress record of the job, following the pages."""
    records, cursor = [], None
    while True:
        query = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = client.get(f"/v1/jobs/{job_id}/progress", params=query).json()
        records += page["items"]
        cursor = page["next"]
        if cursor is None:
            return records


def primal(w, X, margins, qid, C):
    """½‖w‖² + C Σ_i max(0, max_j (l_ij − wᵀx_ij)), the structural objective."""
    slack = margins - X @ w
    loss = sum(max(0.0, slack[qid == q].max()) for q in np.unique(qid))
    return 0.5 * float(w @ w) + C * loss


@pytest.fixture
def qid_file() -> bytes:
    return structural_problem()


def test_qid_file_is_detected_and_batch_job_matches_fit_structural(client, app, db, qid_file):
    dataset = upload(client, qid_file, "constraints.txt").json()
    assert dataset["has_qid"] is True
    assert client.get(f"/v1/datasets/{dataset['id']}").json()["has_qid"] is True
    plain = upload(client, HEART.read_bytes(), "heart_scale").json()
    assert plain["has_qid"] is False

    params = {"C": 0.5, "tol": 1e-6, "max_iter": 20_000}
    job = train(client, app, dataset["id"], "structural", params)
    assert job["status"] == "succeeded", job["error"]
    assert job["stop_reason"] == "converged" and job["converged"] is True

    records = progress(client, job["id"])
    assert records and all(r["lower_bound"] is not None for r in records)
    exact = [r for r in records if r["upper_bound"] is not None]
    assert exact, "the exact upper bound was never reported"
    for r in exact:
        assert r["lower_bound"] <= r["upper_bound"]
        assert r["gap"] == pytest.approx(r["upper_bound"] - r["lower_bound"], abs=1e-12)
    assert job["progress"]["upper_bound"] is not None

    X, y, qid = solvers.read_libsvm(io.BytesIO(qid_file), query_id=True)
    direct = solvers.fit_structural(X, y, qid, **params)
    model = stored_model(db, job["model_id"])
    coef, intercept = unpack_weights(model.weights)
    np.testing.assert_allclose(coef, direct.w[None, :], rtol=1e-12, atol=1e-14)
    assert not intercept.any()
    assert model.estimator == "structural" and model.kind == "regressor"
    assert model.n_iter == direct.n_iter and model.gap == pytest.approx(direct.gap, abs=1e-15)


def test_online_job_streams_in_chunks_and_reaches_the_batch_optimum(
    client, app, db, qid_file, tmp_path
):
    dataset = upload(client, qid_file, "constraints.txt").json()
    # a cache of 0.03 MiB makes chunks of under a quarter of the file's rows: the data streams
    params = {"C": 0.5, "tol": 1e-6, "online": True, "cache_size": 0.03, "passes": 20}
    X, y, qid = solvers.read_libsvm(io.BytesIO(qid_file), query_id=True)
    mapped = stored_chunks.map_arrays(
        app.state.settings.data_dir / "datasets" / dataset["id"], dataset["n_features"]
    )
    chunk_rows = stored_chunks.chunk_rows_for(mapped[0], mapped[2], params["cache_size"])
    assert chunk_rows * 4 <= X.shape[0]

    job = train(client, app, dataset["id"], "structural", params)
    assert job["status"] == "succeeded", job["error"]
    assert job["stop_reason"] == "converged"
    records = progress(client, job["id"])
    last = records[-1]
    assert last["upper_bound"] is not None and last["lower_bound"] <= last["upper_bound"]
    assert last["gap"] == pytest.approx(last["upper_bound"] - last["lower_bound"], abs=1e-12)
    assert last["gap"] <= 1e-6 * max(1, abs(last["upper_bound"]))

    coef, _ = unpack_weights(stored_model(db, job["model_id"]).weights)
    # the same stream read from the file itself, in chunks of the same size
    path = tmp_path / "constraints.txt"
    path.write_bytes(qid_file)
    direct = solvers.fit_structural_stream(
        str(path), chunk_rows=chunk_rows, n_features=X.shape[1], **{
            k: v for k, v in params.items() if k != "online"
        }
    )  # fmt: skip
    np.testing.assert_allclose(coef[0], direct.w, rtol=1e-10, atol=1e-12)
    assert direct.extra["evicted_support_vectors"] == 0
    # the batch optimum: ‖w − w*‖² ≤ 2 (P(w) − P(w*)) ≤ 2 (UB − LB)
    batch = solvers.fit_structural(X, y, qid, C=0.5, tol=1e-9, max_iter=20_000)
    assert batch.converged
    optimum = primal(batch.w, X, y, qid, 0.5)
    assert optimum <= primal(coef[0], X, y, qid, 0.5) <= optimum + last["gap"] + 1e-9
    assert np.linalg.norm(coef[0] - batch.w) <= np.sqrt(2 * last["gap"]) + 1e-6


def test_an_online_job_on_a_split_example_is_refused_and_batch_trains(client, app, db):
    # a split example is valid input for the batch solver (it groups rows by qid) and the
    # upload is kept; the online solver reads runs of equal qid, and its job failed at start
    split = structural_problem(n_examples=10, seed=1, shuffle=True)
    dataset = upload(client, split, "shuffled.txt").json()
    refused = client.post("/v1/jobs", json={
        "dataset_id": dataset["id"], "estimator": "structural", "params": {"online": True},
    })  # fmt: skip
    assert refused.status_code == 422, refused.text
    detail = refused.json()["detail"]
    assert detail.startswith("params.online: ") and "two separate runs (rows " in detail
    assert "online: false" in detail
    with db.session() as session:
        assert session.query(Job).count() == 0
    batch = train(client, app, dataset["id"], "structural", {})
    assert batch["status"] == "succeeded", batch["error"]


def test_the_split_example_check_reads_only_the_qid_from_an_object_store(
    s3_client, s3_settings
):
    # the check ran on the whole dataset downloaded into the API's copy (data, indices, y:
    # many times the qid, and the online mode is for sets larger than memory)
    split = structural_problem(n_examples=10, seed=1, shuffle=True)
    dataset = upload(s3_client, split, "shuffled.txt").json()
    refused = s3_client.post("/v1/jobs", json={
        "dataset_id": dataset["id"], "estimator": "structural", "params": {"online": True},
    })  # fmt: skip
    assert refused.status_code == 422, refused.text
    assert "two separate runs (rows " in refused.json()["detail"]
    fetched = sorted(p.name for p in s3_settings.cache_path.rglob("*.npy"))
    assert fetched == ["qid.npy"], fetched


def test_a_retry_of_an_online_job_replays_after_its_dataset_is_removed(client, app):
    # before: the check of the examples read the dataset before the key was looked up, so
    # the retry of a job that had finished, its dataset removed since, was a 404
    dataset = upload(client, structural_problem(n_examples=10), "grouped.txt").json()
    body = {"dataset_id": dataset["id"], "estimator": "structural", "params": {"online": True}}
    key = {"Idempotency-Key": "online-1"}
    first = client.post("/v1/jobs", json=body, headers=key)
    assert first.status_code == 202, first.text
    run_job(first.json()["id"], context(app))
    assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204
    again = client.post("/v1/jobs", json=body, headers=key)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"


@pytest.mark.parametrize("cut", [1, 3, 7, 1000])
def test_chunk_source_yields_the_stored_rows(tmp_path, cut):
    X = sp.random(20, 6, density=0.5, random_state=3, format="csr", dtype=np.float32)
    y = np.arange(20.0)
    qid = np.repeat(np.arange(5), 4)
    for name, array in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr)):
        np.save(tmp_path / f"{name}.npy", array)
    np.save(tmp_path / "y.npy", y)
    np.save(tmp_path / "qid.npy", qid)
    mapped, margins, q = stored_chunks.map_arrays(tmp_path, 6)
    assert isinstance(mapped.data, np.memmap)
    parts = list(stored_chunks.chunk_source(mapped, margins, q, cut)())
    assert all(p[0].shape[0] <= cut for p in parts)
    assert abs(sp.vstack([p[0] for p in parts]) - X).max() == 0
    assert parts[0][0].dtype == np.float32
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), y)
    np.testing.assert_array_equal(np.concatenate([p[2] for p in parts]), qid)


@pytest.mark.parametrize(
    ("qid", "split"),
    [
        ([1, 1, 2, 2, 3], None),
        ([5, 5, 2, 2, 9, 1], None),
        ([1, 2, 1], (1, 3)),
        ([3, 3, 1, 1, 3, 2], (1, 5)),
    ],
)
@pytest.mark.parametrize("scan_rows", [1, 2, 100])
def test_contiguity_check_finds_a_split_example(qid, split, scan_rows):
    qid = np.array(qid)
    if split is None:
        stored_chunks.check_contiguous(qid, scan_rows)
        return
    with pytest.raises(ValueError, match=rf"rows {split[0]} and {split[1]}\)"):
        stored_chunks.check_contiguous(qid, scan_rows)


@pytest.fixture(scope="module")
def regression_file() -> tuple[bytes, sp.csr_matrix, np.ndarray]:
    """heart_scale's features with a known linear target plus noise."""
    X, _ = solvers.read_libsvm(str(HEART))
    rng = np.random.default_rng(7)
    w = rng.normal(size=X.shape[1])
    y = X @ w + 0.5 + 0.1 * rng.normal(size=X.shape[0])
    return libsvm_bytes(X, y), X, y


@pytest.mark.parametrize("loss", ["epsilon_insensitive", "squared_epsilon_insensitive"])
def test_linear_svr_predicts_values_and_evaluates_like_sklearn_metrics(
    client, app, regression_file, loss
):
    from sklearn.metrics import mean_squared_error, r2_score

    content, X, y = regression_file
    dataset = upload(client, content, "regression.txt").json()
    assert dataset["labels"]["kind"] == "real"
    params = {"C": 0.5, "epsilon": 0.05, "tol": 1e-4, "loss": loss, "max_iter": 20_000}
    job = train(client, app, dataset["id"], "LinearSVR", params)
    assert job["status"] == "succeeded", job["error"]
    direct = solvers.LinearSVR(**params).fit(X, y)
    expected = direct.predict(X)

    lines = b"\n".join(line.split(b" ", 1)[1] for line in content.splitlines())
    response = client.post(
        f"/v1/models/{job['model_id']}/predict",
        content=lines,
        headers={"content-type": "text/plain"},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "labels" not in body
    np.testing.assert_allclose(body["values"], expected, rtol=1e-9, atol=1e-9)

    first = X[:2].tocoo()
    instances = [
        {"indices": (first.col[first.row == r] + 1).tolist(), "values": first.data[first.row == r]
         .tolist()}
        for r in range(2)
    ]  # fmt: skip
    response = client.post(f"/v1/models/{job['model_id']}/predict", json={"instances": instances})
    np.testing.assert_allclose(response.json()["values"], expected[:2], rtol=1e-9, atol=1e-9)

    report = client.post(
        f"/v1/models/{job['model_id']}/evaluate", json={"dataset_id": dataset["id"]}
    )
    assert report.status_code == 200, report.text
    report = report.json()
    assert report["n"] == X.shape[0]
    assert report["mse"] == pytest.approx(mean_squared_error(y, expected), rel=1e-9)
    assert report["r2"] == pytest.approx(r2_score(y, expected), rel=1e-9)
    assert 0.9 < report["r2"] <= 1.0


def _count(db, table) -> int:
    from sqlalchemy import func, select

    with db.session() as session:
        return session.scalar(select(func.count()).select_from(table))


@pytest.mark.parametrize(
    ("estimator", "params", "field", "fragment"),
    [
        ("structural", {"cache_size": 0}, "params.cache_size", "greater than 0"),
        ("structural", {"cache_size": "big"}, "params.cache_size", "number"),
        ("structural", {"cache_size": 1e9}, "params.cache_size", "less than or equal to 65536"),
        ("structural", {"passes": 0}, "params.passes", "greater than or equal to 1"),
        ("structural", {"online": "yes"}, "params.online", "boolean"),
        ("structural", {"tol": -1e-3}, "params.tol", "greater than 0"),
        ("structural", {"chunk_rows": 10}, "params.chunk_rows", "unknown field"),
        ("structural", {"w0": [1.0]}, "params.w0", "unknown field"),
        ("LinearSVR", {"epsilon": -0.1}, "params.epsilon", "greater than or equal to 0"),
        ("LinearSVR", {"loss": "hinge"}, "params.loss", "epsilon_insensitive"),
        ("LinearSVR", {"C": 0}, "params.C", "greater than 0"),
        ("LinearSVR", {"multi_class": "ovr"}, "params.multi_class", "unknown field"),
    ],
)
def test_bad_params_are_422_naming_the_field(
    client, db, qid_file, estimator, params, field, fragment
):
    dataset = upload(client, qid_file, "constraints.txt").json()
    response = client.post(
        "/v1/jobs", json={"dataset_id": dataset["id"], "estimator": estimator, "params": params}
    )
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == field
    assert fragment in problem["detail"]
    assert _count(db, Job) == 0


@pytest.mark.parametrize(("cache_size", "status"), [(1024.001, 422), (1024, 202)])
def test_an_online_cache_beyond_max_cache_mb_is_422(client, db, qid_file, cache_size, status):
    """cache_size 65536 on a 30-row dataset was accepted, then failed in the worker with numpy's
    "Unable to allocate 32.0 GiB" (the cache is allocated whole before any row is read). The
    bound is MAX_CACHE_MB (1024); a batch job ignores cache_size, so it is not bounded."""
    dataset = upload(client, qid_file, "constraints.txt").json()
    params = {"online": True, "cache_size": cache_size}
    body = {"dataset_id": dataset["id"], "estimator": "structural", "params": params}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == status, response.text
    if status == 422:
        problem = response.json()
        assert problem["errors"][0]["field"] == "params.cache_size"
        assert "1024.001 MiB is more than the 1024 MiB" in problem["detail"]
        assert "MAX_CACHE_MB" in problem["detail"]
        assert _count(db, Job) == 0
        params["online"] = False
        assert client.post("/v1/jobs", json=body).status_code == 202


def test_max_cache_mb_is_a_setting(app, client, qid_file):
    dataset = upload(client, qid_file, "constraints.txt").json()
    app.state.settings.max_cache_mb = 8
    params = {"online": True, "cache_size": 9}
    body = {"dataset_id": dataset["id"], "estimator": "structural", "params": params}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422 and "the 8 MiB" in answer.json()["detail"]
    params["cache_size"] = 8
    assert client.post("/v1/jobs", json=body).status_code == 202


def test_structural_needs_a_qid_dataset(client, db, heart):
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": heart["id"], "estimator": "structural", "params": {"online": True}},
    )
    assert response.status_code == 422
    assert response.json()["errors"][0]["field"] == "dataset_id"
    assert _count(db, Job) == 0


def test_solvers_endpoint_describes_the_online_params(client):
    items = {item["name"]: item for item in client.get("/v1/solvers").json()["items"]}
    params = {p["name"]: p for p in items["structural"]["params"]}
    assert params["cache_size"]["default"] == 256.0
    assert "MiB" in params["cache_size"]["description"]
    assert params["cache_size"]["exclusiveMinimum"] == 0
    assert params["online"]["default"] is False and params["passes"]["default"] == 3


def test_online_params_mirror_fit_structural_stream():
    import inspect

    from app.schemas.params import StructuralParams

    signature = inspect.signature(solvers.fit_structural_stream).parameters
    for name in ("cache_size", "passes"):
        assert StructuralParams.model_fields[name].default == signature[name].default, name
