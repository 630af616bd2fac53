"""End to end: the real `margin serve` (uvicorn, spawned worker processes, SQLite) on a loopback
port, driven over HTTP: upload a9a, train L1- and L2-loss SVMs and compare them with
`solvers.LinearSVC` trained directly, watch progress, cancel a long job, and SIGKILL a worker in
the middle of a job (re-queued once, then failed; never stuck)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from app.db import Database
from app.jobs.workers import WorkerId
from app.services.model_store import unpack_weights
from app.tables import Model
from benchmarks._service import free_port
from tests.app.pool_process import running
from tests.conftest import shared_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
TERMINAL = {"succeeded", "failed", "cancelled"}


class Server:
    """`margin serve` in a subprocess; its log goes to a file shown when a test fails."""

    def __init__(self, data_dir: Path, database_url: str | None = None, workers: int = 2, **env):
        self.port = free_port()
        self.data_dir = data_dir
        self.log_path = data_dir.parent / "serve.log"
        environment = {**os.environ, **{k.upper(): str(v) for k, v in env.items()}}
        environment.pop("DATABASE_URL", None)
        if database_url:
            environment["DATABASE_URL"] = database_url
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                "serve",
                "--data-dir",
                str(data_dir),
                "--port",
                str(self.port),
                "--workers",
                str(workers),
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=environment,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=120)

    def wait_ready(self, timeout=240) -> None:
        # a first start in a fresh clone compiles the solver kernels: minutes on a loaded machine
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_path.read_text()
            try:
                if self.http.get("/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"not ready in {timeout} s:\n{self.log_path.read_text()}")

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("e2e")
    # two solver threads per job: the parallel kernels run inside the spawned worker processes
    srv = Server(
        root / "data",
        job_retries=1,
        progress_interval_s=0.1,
        job_stall_s=60,
        solver_threads=2,
        max_predict_batch=20000,
    )
    try:
        srv.wait_ready()
        yield srv
    finally:
        srv.stop()
    assert srv.process.returncode == 0, srv.log_path.read_text()[-3000:]


@pytest.fixture(scope="module")
def a9a(server):
    path = shared_file("a9a", "a9a.bz2")
    with open(path, "rb") as handle:
        response = server.http.post("/v1/datasets", files={"file": ("a9a.bz2", handle)})
    assert response.status_code == 201, response.text
    body = response.json()
    assert (body["n_rows"], body["n_features"]) == (32561, 123)
    return body


@pytest.fixture(scope="module")
def a9a_arrays():
    """a9a's training and test sets, read once for the tests that train on them directly."""
    from solvers.io import load_libsvm

    train = load_libsvm(shared_file("a9a", "a9a.bz2"))
    return train, load_libsvm(shared_file("a9a", "a9a.t"), n_features=123)


def wait_for(server, job_id, predicate, timeout=120.0, every=0.05) -> list[dict]:
    """Poll the job until predicate(job) holds; returns every state seen."""
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = server.http.get(f"/v1/jobs/{job_id}").json()
        seen.append(job)
        if predicate(job):
            return seen
        time.sleep(every)
    raise AssertionError(f"job {job_id} stuck: {seen[-1]}")


def model_weights(server, model_id):
    db = Database(f"sqlite:///{server.data_dir / 'margin.db'}")
    try:
        with db.session() as session:
            model = session.get(Model, model_id)
            return model, *unpack_weights(model.weights)
    finally:
        db.dispose()


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_train_through_the_service_equals_direct_training(server, a9a, a9a_arrays, loss):
    from solvers import LinearSVC

    params = {"loss": loss, "C": 1.0, "tol": 0.05}
    response = server.http.post("/v1/jobs", json={"dataset_id": a9a["id"], "params": params})
    assert response.status_code == 202, response.text
    seen = wait_for(server, response.json()["id"], lambda j: j["status"] in TERMINAL)
    job = seen[-1]
    assert job["status"] == "succeeded", job
    statuses = [s["status"] for s in seen]
    assert statuses == sorted(statuses, key=["queued", "running", "succeeded"].index)
    records = server.http.get(f"/v1/jobs/{job['id']}/progress").json()["items"]
    assert records and [r["iteration"] for r in records] == sorted(r["iteration"] for r in records)
    assert records[-1]["gap"] < records[0]["gap"] and job["progress"] == records[-1]
    model, coef, intercept = model_weights(server, job["model_id"])
    # the model's gap and status are those of the last progress record
    assert model.gap == records[-1]["gap"] and model.n_iter == records[-1]["iteration"]
    assert model.status == "converged" and records[-1]["pg_range"] == records[-1]["gap"]
    train, test = a9a_arrays
    direct = LinearSVC(**params).fit(train.X, train.y)
    np.testing.assert_allclose(coef, np.atleast_2d(direct.coef_), rtol=1e-8, atol=1e-10)
    ours = np.where(test.X @ coef[0] + intercept[0] > 0, model.classes[1], model.classes[0])
    assert np.array_equal(ours, direct.predict(test.X))
    assert model.train_accuracy == pytest.approx(np.mean(direct.predict(train.X) == train.y))
    predict = server.http.post(
        f"/v1/models/{model.id}/predict",
        content=shared_file("a9a", "a9a.t").read_bytes(),
        headers={"content-type": "text/plain"},
    )
    assert predict.status_code == 200, predict.text[:500]
    assert np.array_equal(np.asarray(predict.json()["labels"], dtype=float), ours)


@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer"])
def test_multiclass_on_dna(server, multi_class):
    from solvers import LinearSVC
    from solvers.io import load_libsvm

    path = shared_file("dna", "dna.scale")
    with open(path, "rb") as handle:
        dataset = server.http.post("/v1/datasets", files={"file": ("dna.scale", handle)}).json()
    assert [c["label"] for c in dataset["labels"]["classes"]] == [1, 2, 3]
    params = {"multi_class": multi_class, "C": 0.1}
    job = server.http.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": params}).json()
    job = wait_for(server, job["id"], lambda j: j["status"] in TERMINAL)[-1]
    assert job["status"] == "succeeded", job
    model, coef, intercept = model_weights(server, job["model_id"])
    assert model.classes == [1.0, 2.0, 3.0] and coef.shape == (3, 180)
    train = load_libsvm(path)
    direct = LinearSVC(**params, n_jobs=2).fit(train.X, train.y)
    np.testing.assert_allclose(coef, direct.coef_, rtol=1e-8, atol=1e-10)
    test = load_libsvm(shared_file("dna", "dna.scale.t"), n_features=180)
    ours = np.asarray(model.classes)[np.argmax(test.X @ coef.T + intercept, axis=1)]
    assert np.array_equal(ours, direct.predict(test.X))


def long_job(server, dataset_id) -> str:
    # the hinge loss: a stalled squared hinge would be finished by primal Newton in moments
    params = {"loss": "hinge", "C": 1000.0, "tol": 1e-12, "max_iter": 10**7}
    body = {"estimator": "LinearSVC", "params": params}
    response = server.http.post("/v1/jobs", json={"dataset_id": dataset_id, **body})
    assert response.status_code == 202, response.text
    return response.json()["id"]


def test_cancel_a_long_job(server, a9a):
    job_id = long_job(server, a9a["id"])
    wait_for(server, job_id, lambda j: j["status"] == "running" and j["progress"] is not None)
    response = server.http.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202
    asked = time.monotonic()
    job = wait_for(server, job_id, lambda j: j["status"] in TERMINAL, timeout=30)[-1]
    assert job["status"] == "cancelled" and job["stop_reason"] == "cancelled"
    assert job["model_id"] is None and time.monotonic() - asked < 10


def test_a_killed_worker_requeues_then_fails_the_job(server, a9a):
    job_id = long_job(server, a9a["id"])
    killed = []
    for attempt in (1, 2):
        job = wait_for(
            server,
            job_id,
            lambda j, a=attempt: j["status"] == "running" and j["attempt"] == a and j["progress"],
        )[-1]
        with Database(f"sqlite:///{server.data_dir / 'margin.db'}").session() as session:
            from app.tables import Job

            worker = session.get(Job, job_id).worker
        pid = WorkerId.parse(worker).pid
        assert pid not in killed
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
    job = wait_for(server, job_id, lambda j: j["status"] in TERMINAL, timeout=30)[-1]
    assert job["status"] == "failed" and job["attempt"] == 2
    assert "died (signal 9)" in job["error"] and "attempt 2 of 2" in job["error"]
    # the pool replaced both processes and goes on with other work
    deadline = time.monotonic() + 60
    while server.http.get("/readyz").json().get("workers") != 2:
        assert time.monotonic() < deadline, "the pool did not replace its workers"
        time.sleep(0.5)
    quick = server.http.post(
        "/v1/jobs",
        json={
            "dataset_id": a9a["id"],
            "estimator": "LinearSVC",
            "params": {"max_iter": 3},
        },
    ).json()
    assert (
        wait_for(server, quick["id"], lambda j: j["status"] in TERMINAL)[-1]["status"]
        == "succeeded"
    )


@pytest.mark.postgres
def test_local_pool_on_postgresql(tmp_path):
    """`margin serve` on PostgreSQL: two workers claim concurrent jobs exactly once each, and a
    killed worker's job is re-queued, then cancelled."""
    from sqlalchemy import select

    from app.tables import Job
    from tests.app.conftest import HEART, ScratchDatabase, postgres_url_or_skip

    scratch = ScratchDatabase(postgres_url_or_skip())
    srv = Server(tmp_path / "data", scratch.url, job_retries=1, progress_interval_s=0.1)
    try:
        srv.wait_ready()
        dataset = srv.http.post("/v1/datasets", files={"file": ("h", HEART.read_bytes())}).json()
        quick = [
            srv.http.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": {"C": c}}).json()
            for c in (0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
        ]
        for job in quick:
            done = wait_for(srv, job["id"], lambda j: j["status"] in TERMINAL)[-1]
            assert done["status"] == "succeeded" and done["attempt"] == 1, done
        db = Database(scratch.url)
        with db.session() as session:
            assert len(set(session.scalars(select(Model.job_id)))) == len(quick)
        job_id = long_job(srv, dataset["id"])
        wait_for(srv, job_id, lambda j: j["status"] == "running" and j["progress"])
        with db.session() as session:
            pid = WorkerId.parse(session.get(Job, job_id).worker).pid
        os.kill(pid, signal.SIGKILL)
        wait_for(srv, job_id, lambda j: j["attempt"] == 2 and j["status"] == "running")
        assert srv.http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        done = wait_for(srv, job_id, lambda j: j["status"] in TERMINAL, timeout=30)[-1]
        assert done["status"] == "cancelled"
        db.dispose()
    finally:
        srv.stop()
        scratch.drop()
    assert srv.process.returncode == 0, srv.log_path.read_text()[-3000:]


def descendants(pid: int) -> set[int]:
    out = set()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            children = [int(p) for p in handle.read().split()]
    except FileNotFoundError:
        return out
    for child in children:
        out |= {child} | descendants(child)
    return out


def test_a_killed_service_releases_its_jobs_and_a_restart_runs_them(tmp_path):
    """SIGKILL `margin serve` itself mid-job: its worker and parser processes notice and exit
    (the worker puts its job back in the queue first); the next `margin serve` on the same data
    directory runs the job."""
    from app.tables import Job
    from tests.app.conftest import HEART

    data = tmp_path / "data"
    first = Server(data, workers=1, progress_interval_s=0.1)
    try:
        first.wait_ready()
        dataset = first.http.post("/v1/datasets", files={"file": ("h", HEART.read_bytes())}).json()
        job_id = long_job(first, dataset["id"])
        wait_for(first, job_id, lambda j: j["status"] == "running" and j["progress"])
        db = Database(f"sqlite:///{data / 'margin.db'}")
        with db.session() as session:
            pid = WorkerId.parse(session.get(Job, job_id).worker).pid
        family = descendants(first.process.pid)  # workers, parsers, multiprocessing's tracker
        assert pid in family and len(family) >= 3
        first.process.kill()
        first.process.wait()
        deadline = time.monotonic() + 30
        while True:
            with db.session() as session:
                job = session.get(Job, job_id)
            alive = [p for p in family if running(p)]
            if not alive and job.status == "queued":
                break
            assert time.monotonic() < deadline, (alive, job.status)
            time.sleep(0.2)
        assert job.attempt == 0 and job.worker is None
        db.dispose()
    finally:
        first.stop()
    second = Server(data, workers=1, progress_interval_s=0.1)
    try:
        second.wait_ready()
        assert second.http.get(f"/v1/datasets/{dataset['id']}").status_code == 200
        wait_for(second, job_id, lambda j: j["status"] == "running" and j["attempt"] == 1)
        assert second.http.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
        done = wait_for(second, job_id, lambda j: j["status"] in TERMINAL, timeout=30)[-1]
        assert done["status"] == "cancelled"
    finally:
        second.stop()


def test_a_search_job_reports_its_path_stores_its_table_and_predicts_probabilities(
    server, a9a, a9a_arrays
):
    """A search job over HTTP: live progress along the path, the CV table and chosen C on the
    model, calibrated probabilities at predict (JSON and text), log loss at evaluate, the
    calibration in the JSON export, and a 422 for probabilities of an uncalibrated model."""
    from solvers import LinearSVCCV

    search = {"Cs": [0.01, 0.1, 1.0], "cv": 3, "scoring": "accuracy"}
    params = {"tol": 0.01, "search": search}
    response = server.http.post("/v1/jobs", json={"dataset_id": a9a["id"], "params": params})
    assert response.status_code == 202, response.text
    seen = wait_for(server, response.json()["id"], lambda j: j["status"] in TERMINAL)
    job = seen[-1]
    assert job["status"] == "succeeded", job
    running = [s for s in seen if s["status"] == "running" and s["progress"]]
    assert running, "no progress while the search ran"
    for state in running:
        record = state["progress"]
        assert record["stage"] in ("path", "refit") and record["solves_total"] == 10
        assert record["gap"] is not None
        if record["stage"] == "path":
            assert 0 <= record["fold"] < 3 and 0 <= record["c_index"] < 3
        assert state["percent"] == pytest.approx(100 * record["solves_done"] / 10)
    percents = [s["percent"] for s in running]
    assert percents == sorted(percents)

    model = server.http.get(f"/v1/models/{job['model_id']}").json()
    selection = model["selection"]
    assert [row["C"] for row in selection["table"]] == [0.01, 0.1, 1.0]
    (X, y), (Xt, yt) = ((data.X, data.y) for data in a9a_arrays)
    direct = LinearSVCCV(Cs=[0.01, 0.1, 1.0], cv=3, tol=0.01).fit(X, y)
    assert selection["C"] == direct.C_
    np.testing.assert_allclose([r["mean_score"] for r in selection["table"]],
                               direct.cv_results_["mean_test_score"], atol=2e-3)  # fmt: skip
    assert model["calibration"]["method"] == "sigmoid"

    lines = "".join(
        "1 " + " ".join(f"{j + 1}:{v:g}" for j, v in zip(row.indices, row.data, strict=True))
        + "\n" for row in Xt[:50]
    )  # fmt: skip
    url = f"/v1/models/{job['model_id']}/predict"
    text = server.http.post(url + "?probabilities=true", content=lines.encode(),
                            headers={"content-type": "text/plain"})  # fmt: skip
    assert text.status_code == 200, text.text
    body = text.json()
    P = np.asarray(body["probabilities"])
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    np.testing.assert_allclose(P, direct.predict_proba(Xt[:50]), atol=0.02)
    assert body["labels"] == [model["classes"][j] for j in P.argmax(axis=1)]
    instances = [{"indices": (row.indices + 1).tolist(), "values": row.data.tolist()}
                 for row in Xt[:5]]  # fmt: skip
    as_json = server.http.post(url, json={"instances": instances, "probabilities": True})
    assert as_json.status_code == 200, as_json.text
    np.testing.assert_allclose(as_json.json()["probabilities"], P[:5])
    assert "probabilities" not in server.http.post(url, json={"instances": instances}).json()

    export = server.http.get(f"/v1/models/{job['model_id']}/export?format=json").json()
    assert export["calibration"] == model["calibration"]
    assert export["params"]["C"] == selection["C"]  # the chosen C, not the ignored one
    # ... and so say the model's own view and its lineage (they showed the job's C = 1)
    assert model["params"]["C"] == selection["C"] != 1.0
    lineage = server.http.get(f"/v1/models/{job['model_id']}/lineage").json()
    assert lineage["params"]["C"] == selection["C"]

    from sklearn.metrics import log_loss

    scores = server.http.post(f"/v1/models/{job['model_id']}/evaluate",
                              json={"dataset_id": a9a["id"]})  # fmt: skip
    assert scores.status_code == 200, scores.text
    expected = log_loss(y, direct.predict_proba(X), labels=direct.classes_)
    assert scores.json()["log_loss"] == pytest.approx(expected, rel=0.02)
    assert 0 < scores.json()["brier_score"] < 0.5

    plain = server.http.post("/v1/jobs", json={"dataset_id": a9a["id"], "params": {"C": 0.1}})
    done = wait_for(server, plain.json()["id"], lambda j: j["status"] in TERMINAL)[-1]
    refused = server.http.post(f"/v1/models/{done['model_id']}/predict?probabilities=true",
                               json={"instances": instances})  # fmt: skip
    assert refused.status_code == 422 and "calibration" in refused.text
