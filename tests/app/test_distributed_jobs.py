"""Jobs with the `distributed` option: over HTTP, through the real `margin serve` and a Dask
LocalCluster, the model equals the single-machine optimum; refused with a clear 422 where it
cannot run. The tests on the cluster share one service (each uploads its own dataset)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from benchmarks._common import synthetic_sparse
from solvers.io import write_libsvm
from tests.app.test_e2e import Server, model_weights, wait_for
from tests.shared_dask import SharedDask

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def cluster_server(tmp_path_factory):
    """One `margin serve` on the shared Dask cluster for this module's jobs. Its tests also ask
    for `dask_cluster`, so that the cluster stays up until the last of them has run."""
    address = SharedDask.get_cluster().scheduler_address
    server = Server(tmp_path_factory.mktemp("distributed") / "data", workers=1,
                    progress_interval_s=0.05, dask_scheduler_address=address)  # fmt: skip
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


def primal(X, y, w, C):
    return 0.5 * w @ w + C * float(np.sum(np.maximum(0.0, 1.0 - y * (X @ w)) ** 2))


def cluster_job(server: Server, path, params: dict, partitions: int) -> dict:
    """Upload `path` to the server, train on the Dask cluster; the finished job's document."""
    server.wait_ready()
    with open(path, "rb") as handle:
        dataset = server.http.post("/v1/datasets", files={"file": (path.name, handle)})
    assert dataset.status_code == 201, dataset.text
    body = {"dataset_id": dataset.json()["id"], "params": params,
            "distributed": {"partitions": partitions}}  # fmt: skip
    job = server.http.post("/v1/jobs", json=body)
    assert job.status_code == 202, job.text
    assert job.json()["distributed"] == {"partitions": partitions}
    done = ("succeeded", "failed", "cancelled")
    final = wait_for(server, job.json()["id"], lambda j: j["status"] in done)[-1]
    assert final["status"] == "succeeded", (final["error"], server.log_path.read_text()[-3000:])
    return final


def test_a_distributed_job_reaches_the_single_machine_optimum(
    tmp_path, dask_cluster, cluster_server
):
    X, y = synthetic_sparse(3000, 2000, 20, seed=1)
    path = tmp_path / "train.svm"
    write_libsvm(path, X, y, zero_based=True)
    server = cluster_server
    params = {"loss": "squared_hinge", "C": 0.03, "tol": 1e-6, "fit_intercept": False}
    final = cluster_job(server, path, params, partitions=3)
    assert final["converged"] is True and final["progress"]["duality_gap"] <= 1e-6
    progress = server.http.get(f"/v1/jobs/{final['id']}/progress").json()["items"]
    assert len(progress) >= 2 and all(p["duality_gap"] is not None for p in progress)
    model, coef, intercept = model_weights(server, final["model_id"])
    ref = solvers.solve_binary(X, y, C=0.03, tol=1e-9, max_iter=100_000)
    n = X.shape[1]
    w = np.zeros(n)
    w[: coef.shape[1]] = coef[0][:n]
    assert abs(primal(sp.csr_matrix(X), y, w, 0.03) - ref.primal) <= 1e-5 * ref.primal
    assert model.status == "converged" and model.train_accuracy is None


def test_without_a_cluster_the_option_is_refused(client, heart):
    body = {"dataset_id": heart["id"], "distributed": {"partitions": 2}}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert "DASK_SCHEDULER_ADDRESS" in response.json()["detail"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"estimator": "LinearSVR"}, "LinearSVC"),
        ({"params": {"loss": "squared_error"}}, "loss"),
        ({"params": {"multi_class": "crammer_singer"}}, "ovr"),
        ({"distributed": {"partitions": 100_000}}, "partitions"),
        ({"distributed": {"partitions": 2, "replicas": 3}}, "replicas"),
        ({"distributed": {"partitions": 0}}, "partitions"),
        # the cluster solves one C: a search or calibration was accepted, then silently skipped
        ({"params": {"search": {"cv": 3}}}, "params.search"),
        ({"params": {"probability": True}}, "params.probability"),
    ],
)
def test_what_a_distributed_job_cannot_be(client, heart, app, change, message):
    app.state.settings = app.state.settings.model_copy(
        update={"dask_scheduler_address": "tcp://127.0.0.1:1"}
    )
    body = {"dataset_id": heart["id"], "distributed": {"partitions": 2}, **change}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422, response.text
    assert message in response.text


def test_a_distributed_job_on_text_labels_names_its_classes(tmp_path, dask_cluster, cluster_server):
    """A CSV of three text classes trained on the cluster: the model's classes are the names,
    and it predicts the names the single-machine solver predicts."""
    # Three well-separated clusters, named out of sorted order: the solve converges in about a
    # hundred rounds (the 300 overlapping rows this test had needed thousands), and each row's
    # top class leads the next by more than 0.05 while the 1e-6 gap moves a score by under 0.01.
    rng = np.random.default_rng(2)
    codes = np.arange(60) % 3
    X = np.round(4.0 * np.eye(3, 6)[codes] + rng.standard_normal((60, 6)), 3)
    names = np.array(["ham", "eggs", "spam"])[codes]
    path = tmp_path / "train.csv"
    path.write_text(
        "label,"
        + ",".join(f"f{j}" for j in range(6))
        + "\n"
        + "".join(
            f"{n}," + ",".join(f"{v:g}" for v in row) + "\n"
            for n, row in zip(names, X, strict=True)
        )
    )
    server = cluster_server
    params = {"loss": "squared_hinge", "C": 0.05, "tol": 1e-6, "fit_intercept": False}
    final = cluster_job(server, path, params, partitions=2)
    assert final["converged"] is True
    model = server.http.get(f"/v1/models/{final['model_id']}").json()
    assert model["classes"] == ["eggs", "ham", "spam"]
    local = solvers.LinearSVC(C=0.05, tol=1e-10, fit_intercept=False, max_iter=100_000)
    local.fit(X, names)
    answer = server.http.post(f"/v1/models/{final['model_id']}/predict",
                              json={"instances": X.tolist()})  # fmt: skip
    assert answer.json()["labels"] == local.predict(X).tolist()
