"""Jobs over HTTP and run_job, on SQLite and PostgreSQL: parameter validation (422 naming the
field, nothing stored), creation with Idempotency-Key, progress records, percent and ETA, the SSE
stream, cancel, failures, and recovery of jobs whose worker died. A stand-in trainer plays the
solver here; the end-to-end test trains with the real one."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.jobs.queue import LocalQueue
from app.jobs.recovery import Reaper
from app.jobs.runner import RunContext, run_job
from app.services.model_store import unpack_weights
from app.tables import IdempotencyKey, Job, JobProgress, Model, utcnow
from tests.app.conftest import upload

pytestmark = pytest.mark.timeout(120)


def count(db, table) -> int:
    with db.session() as session:
        return session.scalar(select(func.count()).select_from(table))


def context(app, **kwargs) -> RunContext:
    return RunContext(app.state.settings, app.state.db, **kwargs)


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"params": {"C": -1}}, "params.C", "greater than 0 (got -1)"),
        ({"params": {"Cee": 1}}, "params.Cee", "unknown field"),
        ({"params": {"loss": "log"}}, "params.loss", "'squared_hinge', 'hinge' or 'squared_error'"),
        ({"params": {"max_iter": 0}}, "params.max_iter", "greater than or equal to 1"),
        ({"params": {"tol": "0.1"}}, "params.tol", "valid number"),
        ({"params": {"class_weight": {"a": 1}}}, "params.class_weight", "numeric class labels"),
        ({"params": {"class_weight": {"7": 1}}}, "params.class_weight", "not classes"),
        ({"params": {"multi_class": "ovo"}}, "params.multi_class", "'ovr'"),
        ({"estimator": "SVC"}, "estimator", "expected one of LinearSVC"),
        ({"extra": 1}, "extra", "unknown field"),
        ({"params": {"search": True}}, "params.search", "should be an object (got True)"),
    ],
)
def test_invalid_jobs_are_422_naming_the_field(
    client, db, heart, fake_trainer, body, field, fragment
):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], **body})
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == field
    assert fragment in problem["detail"]
    assert "Spec" not in problem["detail"]  # no class name of ours
    assert count(db, Job) == 0


def test_unknown_dataset_is_404_and_labels_must_fit(client, db, fake_trainer):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": "ds_missing"})
    assert response.status_code == 404 and "dataset_id" in response.json()["detail"]
    one_class = upload(client, b"1 1:1\n1 2:1\n1 1:2\n").json()
    response = client.post("/v1/jobs", json={"dataset_id": one_class["id"]})
    assert response.status_code == 422 and "at least two classes" in response.json()["detail"]
    real = upload(client, b"0.5 1:1\n1.5 2:1\n2.25 1:2\n").json()
    response = client.post("/v1/jobs", json={"dataset_id": real["id"]})
    assert response.status_code == 422 and "real-valued" in response.json()["detail"]
    assert count(db, Job) == 0


def test_create_fills_defaults_and_lists(client, heart, fake_trainer):
    fake_trainer()
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"C": 2}})
    assert response.status_code == 202, response.text
    job = response.json()
    assert response.headers["location"] == f"/v1/jobs/{job['id']}"
    assert job["status"] == "queued" and job["estimator"] == "LinearSVC"
    assert job["params"]["C"] == 2.0 and job["params"]["tol"] == 0.1
    assert job["params"]["loss"] == "squared_hinge" and job["params"]["multi_class"] == "ovr"
    assert job["model_id"] is None and job["progress"] is None and job["attempt"] == 0
    assert client.get(f"/v1/jobs/{job['id']}").json()["id"] == job["id"]
    assert [j["id"] for j in client.get("/v1/jobs?status=queued").json()["items"]] == [job["id"]]
    assert client.get("/v1/jobs?status=running").json()["items"] == []
    assert client.get("/v1/jobs?status=bogus").status_code == 422
    assert client.get("/v1/jobs/job_missing").status_code == 404


def test_job_idempotency_key(client, db, heart, fake_trainer):
    fake_trainer()
    body = {"dataset_id": heart["id"], "params": {"C": 3}}
    first = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 202 and again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    changed = client.post(
        "/v1/jobs", json={**body, "params": {"C": 4}}, headers={"Idempotency-Key": "k1"}
    )
    assert changed.status_code == 422 and "different request body" in changed.json()["detail"]
    assert count(db, Job) == 1


def test_an_idempotency_key_whose_job_was_deleted_is_409(client, db, heart, fake_trainer):
    """Deleting the job left its key naming nothing: the key's next request was a 500. A late
    retry must not create a second job: 409; another key creates one."""
    fake_trainer()
    body, key = {"dataset_id": heart["id"]}, {"Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json=body, headers=key).json()
    assert client.post(f"/v1/jobs/{first['id']}/cancel").status_code == 200
    assert client.delete(f"/v1/jobs/{first['id']}").status_code == 204
    again = client.post("/v1/jobs", json=body, headers=key)
    assert again.status_code == 409, again.text
    assert again.json()["title"] == "Idempotency-Key of a deleted resource"
    assert count(db, Job) == 0
    assert client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k2"}).status_code == 202


def age_keys(db, hours: float, key: str | None = None) -> None:
    """Make the Idempotency-Key records (or one of them) `hours` old."""
    aged = update(IdempotencyKey).values(created_at=utcnow() - timedelta(hours=hours))
    with db.write() as session:
        session.execute(aged if key is None else aged.where(IdempotencyKey.key == key))


def test_an_idempotency_key_is_forgotten_after_its_ttl(app, client, db, heart, fake_trainer):
    """Keys were kept forever: a key reused a year later still replayed the old job, or was a
    422 with another body. Past IDEMPOTENCY_TTL_HOURS the reuse is a fresh request, even before
    the sweep has removed the old record."""
    fake_trainer()
    body, key = {"dataset_id": heart["id"], "params": {"C": 3}}, {"Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json=body, headers=key).json()
    age_keys(db, 23)  # within the default 24 hours: replayed
    again = client.post("/v1/jobs", json=body, headers=key)
    assert again.json()["id"] == first["id"] and again.headers["idempotent-replayed"] == "true"
    app.state.settings.idempotency_ttl_hours = 22.5  # now past it: a fresh request
    other = client.post("/v1/jobs", json={**body, "params": {"C": 4}}, headers=key)
    assert other.status_code == 202, other.text
    assert other.json()["id"] != first["id"] and "idempotent-replayed" not in other.headers
    # the key now names the new job, and replays it
    retry = client.post("/v1/jobs", json={**body, "params": {"C": 4}}, headers=key)
    assert retry.json()["id"] == other.json()["id"]
    assert retry.headers["idempotent-replayed"] == "true"
    with db.session() as session:
        assert session.scalars(select(IdempotencyKey.resource_id)).all() == [other.json()["id"]]
    assert count(db, Job) == 2


def test_the_reaper_forgets_expired_idempotency_keys(app, client, db, heart, fake_trainer):
    fake_trainer()
    for name in ("old", "new"):
        headers = {"Idempotency-Key": name}
        assert client.post("/v1/jobs", json={"dataset_id": heart["id"]}, headers=headers).is_success
    age_keys(db, 25, key="old")
    age_keys(db, 23, key="new")
    Reaper(db, app.state.settings, LocalQueue(), "test").run_once()
    with db.session() as session:
        assert session.scalars(select(IdempotencyKey.key)).all() == ["new"]
    assert count(db, Job) == 2  # the jobs stay


def test_run_job_records_progress_and_stores_the_model(app, client, db, heart, fake_trainer):
    fake = fake_trainer(n_iter=6)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 2e-4}}).json()
    assert run_job(job["id"], context(app, worker_id="test:1")) == "succeeded"
    assert run_job(job["id"], context(app)) is None  # already done: not run twice
    assert fake.calls == 1
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded" and done["stop_reason"] == "converged"
    assert done["converged"] is True and done["percent"] == 100.0 and done["attempt"] == 1
    assert done["started_at"] <= done["finished_at"] and done["error"] is None
    records = client.get(f"/v1/jobs/{job['id']}/progress").json()["items"]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5]
    gaps = [r["gap"] for r in records]
    assert gaps == sorted(gaps, reverse=True) and records[0]["pg_max"] == gaps[0] / 2
    # the explicit names travel with every record, stored and served
    assert [r["pg_range"] for r in records] == gaps
    assert [r["duality_gap"] for r in records] == pytest.approx([g / 100 for g in gaps])
    assert records[0]["max_violation"] is None
    assert done["progress"] == records[-1]
    page = client.get(f"/v1/jobs/{job['id']}/progress?limit=2").json()
    assert len(page["items"]) == 2 and page["next"]
    with db.session() as session:
        model = session.get(Model, done["model_id"])
        coef, intercept = unpack_weights(model.weights)
    assert model.job_id == job["id"] and model.classes == [-1.0, 1.0] and model.kind == "classifier"
    assert (model.n_features, model.zero_based) == (13, False)
    assert coef.shape == (1, 13) and intercept.tolist() == [0.5]
    assert model.train_accuracy is not None and model.n_iter == 5


@pytest.mark.parametrize(
    "position", ["\u00b2", "\u0663", str(2**63), "9" * 30, "9" * 5000, "-1", " 1"]
)
def test_a_forged_progress_cursor_is_a_422(app, client, heart, fake_trainer, position):
    """Superscript and Arabic-Indic digits pass str.isdigit but not int; ids past the
    BIGINT column overflow the database's parameter (both were 500s)."""
    import base64

    fake_trainer(n_iter=4)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 2e-4}}).json()
    assert run_job(job["id"], context(app)) == "succeeded"
    cursor = base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")
    answer = client.get(f"/v1/jobs/{job['id']}/progress", params={"cursor": cursor})
    assert answer.status_code == 422, answer.text
    assert answer.json()["title"] == "Invalid cursor"
    largest = base64.urlsafe_b64encode(str(2**63 - 1).encode()).decode().rstrip("=")  # BIGINT's
    page = client.get(f"/v1/jobs/{job['id']}/progress", params={"cursor": largest})
    assert page.status_code == 200 and page.json()["items"] == []


def test_percent_and_eta_while_running(app, client, heart, fake_trainer):
    fake_trainer(n_iter=8, delay=0.05)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-9}}).json()
    seen = []
    runner = threading.Thread(target=run_job, args=(job["id"], context(app)))
    runner.start()
    while runner.is_alive():
        seen.append(client.get(f"/v1/jobs/{job['id']}").json())
        time.sleep(0.02)
    running = [s for s in seen if s["status"] == "running" and s["progress"]]
    assert running, "never saw the job running with progress"
    percents = [s["percent"] for s in running]
    assert percents == sorted(percents) and 0 < percents[-1] < 100
    assert all(s["eta_s"] is None or s["eta_s"] >= 0 for s in running)
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded" and done["stop_reason"] == "max_iter"


def test_events_stream_progress_then_end(app, client, heart, fake_trainer):
    fake_trainer(n_iter=4)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-9}}).json()
    run_job(job["id"], context(app))
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    events = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    kinds = [
        line.split(": ", 1)[1]
        for b in events
        for line in b.split("\n")
        if line.startswith("event:")
    ]
    assert kinds == ["progress"] * 4 + ["end"]
    first = json.loads(events[0].split("data: ", 1)[1])
    assert first["pg_range"] == first["gap"] and first["pg_max"] == first["gap"] / 2
    assert first["duality_gap"] == pytest.approx(first["gap"] / 100)
    last = json.loads(events[-1].split("data: ", 1)[1])
    assert last["status"] == "succeeded"


def test_cancel_queued_and_finished(client, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    response = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 200
    assert (
        response.json()["status"] == "cancelled" and response.json()["stop_reason"] == "cancelled"
    )
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200
    assert client.post("/v1/jobs/job_missing/cancel").status_code == 404


def test_cancel_running_stops_within_an_iteration(app, client, db, heart, fake_trainer):
    fake = fake_trainer(n_iter=10_000, delay=0.01)
    job = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-300}}
    ).json()
    result = {}
    runner = threading.Thread(target=lambda: result.update(s=run_job(job["id"], context(app))))
    runner.start()
    deadline = time.monotonic() + 30
    while client.get(f"/v1/jobs/{job['id']}").json()["status"] != "running":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    response = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 202 and response.json()["cancel_requested"] is True
    asked = time.monotonic()
    runner.join(30)
    assert result["s"] == "cancelled" and time.monotonic() - asked < 2.0
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "cancelled" and done["model_id"] is None
    assert fake.calls == 1 and count(db, Model) == 0
    assert client.post(f"/v1/jobs/{job['id']}/cancel").status_code == 200


def test_finished_job_cannot_be_cancelled(app, client, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    run_job(job["id"], context(app))
    response = client.post(f"/v1/jobs/{job['id']}/cancel")
    assert response.status_code == 409 and "succeeded" in response.json()["detail"]


def test_solver_errors_fail_the_job_with_a_message(app, client, db, heart, fake_trainer):
    fake_trainer(fail=ValueError("C_i must be finite, got nan"))
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    assert run_job(job["id"], context(app)) == "failed"
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "failed" and done["error"] == "ValueError: C_i must be finite, got nan"
    assert "Traceback" not in done["error"] and count(db, Model) == 0


def test_shutdown_releases_the_running_job(app, client, db, heart, fake_trainer):
    fake_trainer(n_iter=10_000, delay=0.01)
    job = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-300}}
    ).json()
    ctx = context(app)
    runner = threading.Thread(target=run_job, args=(job["id"], ctx))
    runner.start()
    while client.get(f"/v1/jobs/{job['id']}").json()["progress"] is None:
        time.sleep(0.01)
    ctx.shutdown.set()
    runner.join(30)
    released = client.get(f"/v1/jobs/{job['id']}").json()
    assert released["status"] == "queued" and released["attempt"] == 0
    assert client.get(f"/v1/jobs/{job['id']}/progress").json()["items"] == []


@pytest.mark.parametrize("retries", [0, 1])
def test_jobs_of_a_dead_worker_fail_or_are_requeued(app, client, db, heart, fake_trainer, retries):
    fake_trainer()
    settings = app.state.settings.model_copy(update={"job_retries": retries})
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    with db.write() as session:  # as if a worker on this host claimed it and was then killed
        row = session.get(Job, job["id"])
        row.status, row.attempt = "running", 1
        import socket

        row.worker = f"{socket.gethostname()}:999999999"
    outcome = Reaper(db, settings, LocalQueue(), "test").run_once()
    after = client.get(f"/v1/jobs/{job['id']}").json()
    if retries:
        assert outcome == {job["id"]: "queued"} and after["status"] == "queued"
        assert run_job(job["id"], context(app)) == "succeeded"
        assert client.get(f"/v1/jobs/{job['id']}").json()["attempt"] == 2
    else:
        assert outcome == {job["id"]: "failed"} and after["status"] == "failed"
        assert "worker process" in after["error"] and after["finished_at"]


def test_stalled_heartbeat_is_recovered(app, client, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    from datetime import timedelta

    from app.tables import utcnow

    with db.write() as session:
        row = session.get(Job, job["id"])
        row.status, row.attempt, row.worker = "running", 1, "elsewhere:12"
        row.heartbeat_at = utcnow() - timedelta(seconds=600)
    reaper = Reaper(db, app.state.settings, LocalQueue(), "test")
    # a reaper judges heartbeats only once it has itself reached the database for JOB_STALL_S
    assert reaper.run_once() == {}
    reaper.connected_since -= app.state.settings.job_stall_s
    assert reaper.run_once() == {job["id"]: "failed"}
    assert "no heartbeat" in client.get(f"/v1/jobs/{job['id']}").json()["error"]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(JobProgress)) == 0


def test_validation_dataset_is_scored_in_the_training_numbering(app, client, db, fake_trainer):
    fake_trainer()
    train = upload(client, b"1 1:1 2:1\n-1 3:1\n1 1:2\n-1 3:2\n").json()
    # zero-based ids of the same features would be a 422; a wider one-based file is cut to size
    zero = upload(client, b"1 0:1\n-1 2:1\n").json()
    response = client.post(
        "/v1/jobs", json={"dataset_id": train["id"], "validation_dataset_id": zero["id"]}
    )
    assert response.status_code == 422 and "index 0" in response.json()["detail"]
    wide = upload(client, b"1 1:1 9:5\n-1 3:1\n").json()
    job = client.post(
        "/v1/jobs", json={"dataset_id": train["id"], "validation_dataset_id": wide["id"]}
    ).json()
    assert run_job(job["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job['id']}").json()
    with db.session() as session:
        model = session.get(Model, done["model_id"])
    # fake weights w = (0, 0.1, 0.2) and intercept 0.5: both validation rows score > 0 -> label 1
    assert model.validation_accuracy == 0.5 and model.train_accuracy == 0.5


def test_deleting_a_dataset_keeps_finished_jobs_and_models(app, client, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    run_job(job["id"], context(app))
    assert client.delete(f"/v1/datasets/{heart['id']}").status_code == 204
    kept = client.get(f"/v1/jobs/{job['id']}").json()
    assert kept["dataset_id"] is None and kept["model_id"] is not None
    assert count(db, Model) == 1


def test_align_columns_renumbers_between_index_bases():
    import numpy as np
    import scipy.sparse as sp

    from app.services.dataset_files import align_columns

    # raw indices 1 and 3 in a one-based file are columns 0 and 2
    X = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 2]), np.array([0, 2])), shape=(1, 3))
    as_zero = align_columns(X, zero_based=False, to_zero_based=True, to_n_features=4)
    assert as_zero.toarray().tolist() == [[0.0, 1.0, 0.0, 2.0]]
    cut = align_columns(X, zero_based=False, to_zero_based=False, to_n_features=2)
    assert cut.toarray().tolist() == [[1.0, 0.0]]
    Z = sp.csr_matrix(np.array([[5.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="index 0"):
        align_columns(Z, zero_based=True, to_zero_based=False, to_n_features=3)


def test_concurrent_requests_with_one_key_create_one_job(app, client, db, heart, fake_trainer):
    from app.schemas.jobs import JobCreate
    from app.services import jobs as service

    fake_trainer()
    body = JobCreate(dataset_id=heart["id"], params={"C": 5})
    barrier = threading.Barrier(4)
    results = []

    def create():
        barrier.wait()
        results.append(service.create_job(db, app.state.queue, body, "same-key"))

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len({job.id for job, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert count(db, Job) == 1


STRUCTURAL = b"1 qid:1 1:1 2:0.5\n0.5 qid:1 2:1\n1 qid:2 1:-1 3:1\n2 qid:2 3:0.5\n1 qid:3 2:1 3:1\n"


@pytest.mark.parametrize(
    ("estimator", "params", "content"),
    [
        ("LinearSVC", {"C": 0.5, "loss": "hinge"}, None),
        (
            "LinearSVC",
            {"multi_class": "crammer_singer"},
            b"1 1:1\n2 2:1\n3 3:1\n1 1:0.9\n2 2:1.1\n3 3:0.8\n",
        ),
        ("LinearSVR", {"epsilon": 0.1}, None),
        ("structural", {"C": 2.0}, STRUCTURAL),
    ],
    ids=["svc-binary", "svc-crammer-singer", "svr", "structural"],
)
def test_real_trainers_store_what_the_solver_returns(
    app, client, db, heart, estimator, params, content
):
    """run_job with the real solvers: the stored weights equal a direct call's."""
    import numpy as np

    import solvers
    from app.services.datasets import load_dataset
    from app.tables import Dataset

    dataset = heart if content is None else upload(client, content).json()
    job = client.post(
        "/v1/jobs", json={"dataset_id": dataset["id"], "estimator": estimator, "params": params}
    )
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    with db.session() as session:
        model = session.get(Model, done["model_id"])
        X, y, qid = load_dataset(app.state.settings, session.get(Dataset, dataset["id"]))
    coef, intercept = unpack_weights(model.weights)
    if estimator == "structural":
        expected = solvers.fit_structural(X, y, qid, **params).w
        kind = "regressor"
    else:
        direct = getattr(solvers, estimator)(**params).fit(X, y)
        expected = direct.coef_
        kind = "classifier" if estimator == "LinearSVC" else "regressor"
        np.testing.assert_allclose(intercept, np.ravel(direct.intercept_), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(coef, np.atleast_2d(expected), rtol=1e-10, atol=1e-12)
    assert model.kind == kind and model.estimator == estimator
    assert done["progress"] is not None and model.n_iter >= 1


def test_structural_online_mode_is_accepted(client, db):
    """The online mode is trained in tests/app/test_structural_service.py."""
    dataset = upload(client, STRUCTURAL).json()
    response = client.post(
        "/v1/jobs",
        json={"dataset_id": dataset["id"], "estimator": "structural", "params": {"online": True}},
    )
    assert response.status_code == 202, response.text
    assert response.json()["params"]["cache_size"] == 256.0
    assert count(db, Job) == 1


def test_a_misspelt_parameter_gets_a_suggestion(client, heart):
    response = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"c": 1}})
    assert response.status_code == 422
    assert "params.c: unknown field; did you mean 'C'?" in response.json()["detail"]
    response = client.post(
        "/v1/jobs", json={"dataset_id": heart["id"], "params": {"shrinkng": False}}
    )
    assert "did you mean 'shrinking'?" in response.json()["detail"]
    response = client.post("/v1/jobs", json={"dataset": heart["id"]})
    assert "dataset: unknown field; did you mean 'dataset_id'?" in response.json()["detail"]


def test_an_unrelated_validation_set_is_refused(client, heart):
    other = upload(client, b"2 1:1\n3 2:1\n2 3:1\n3 1:1\n", "other.svm")
    assert other.status_code == 201, other.text
    body = {"dataset_id": heart["id"], "validation_dataset_id": other.json()["id"]}
    response = client.post("/v1/jobs", json=body)
    assert response.status_code == 422
    assert "none of the validation set's labels" in response.json()["detail"]


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [({"search": {"cv": 6}}, "params.search.cv", "6 folds need at least 6 rows"),
     ({"search": {"cv": 4}}, "params.search.cv", "largest class has 3"),
     ({"probability": True}, "params.probability", "largest class has 3"),
     ({"search": {"cv": 3, "scoring": "roc_auc"}}, "params.search.scoring", "smallest has 2")],
)  # fmt: skip
def test_folds_that_cannot_split_the_dataset_are_422_at_creation(client, params, field, words):
    rows = b"1 1:1\n1 1:2\n1 2:1\n-1 2:2\n-1 1:3\n"  # 5 rows: classes of 3 and 2
    dataset = upload(client, rows).json()
    response = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": params})
    # before: accepted (202), then failed in the worker with scikit-learn's own words
    assert response.status_code == 422, response.text
    assert field in response.text and words in response.text
    assert client.get("/v1/jobs").json()["items"] == []
    fits = client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                          "params": {"search": {"cv": 3}}})  # fmt: skip
    assert fits.status_code == 202
    no_folds = {"probability": True, "calibration": "none"}  # runs no folds: nothing to split
    assert client.post("/v1/jobs", json={"dataset_id": dataset["id"],
                                         "params": no_folds}).status_code == 202  # fmt: skip


@pytest.mark.parametrize(("n_classes", "status"), [(9, 422), (8, 202)])
def test_a_model_beyond_the_weight_limit_is_422(client, db, n_classes, status):
    """A few hundred bytes declaring 2^24 features and 40 classes made a Crammer-Singer job
    allocate 5 GiB of weights in the worker. 2^24 features x 8 classes is the limit (2^27)."""
    lines = [f"{c} {1 + c}:1" for c in range(n_classes) for _ in range(2)] + ["0 16777216:1"]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    assert dataset["n_features"] == 2**24 and len(dataset["labels"]["classes"]) == n_classes
    body = {"dataset_id": dataset["id"], "params": {"multi_class": "crammer_singer"}}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == status, answer.text
    if status == 422:
        assert "134217728" in answer.json()["detail"]
        assert count(db, Job) == 0


@pytest.mark.parametrize(("n_labels", "fragment"), [(1001, "at most 1000"), (1000, "not classes")])
def test_class_weight_holds_at_most_as_many_labels_as_a_dataset_has_classes(
    client, heart, n_labels, fragment
):
    """85,000 labels in a 1 MB body took 14 s of the API's CPU (each label was looked up in a
    set of the dataset's classes built anew for it) and answered 1.5 MB listing them."""
    weights = {str(label): 1.0 for label in range(2, 2 + n_labels)}
    body = {"dataset_id": heart["id"], "params": {"class_weight": weights}}
    answer = client.post("/v1/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert fragment in answer.json()["detail"] and "params.class_weight" in answer.text


def test_the_weight_limit_is_a_setting(app, client):
    """MAX_MODEL_WEIGHTS: a deployment with the memory for larger models raises it."""
    lines = [f"{c} {1 + c}:1" for c in range(3) for _ in range(2)] + ["0 1000:1"]
    dataset = upload(client, "\n".join(lines).encode() + b"\n").json()
    app.state.settings.max_model_weights = 2999  # 1000 features x 3 classes = 3000: one over
    answer = client.post("/v1/jobs", json={"dataset_id": dataset["id"]})
    assert answer.status_code == 422 and "more than the 2999" in answer.json()["detail"]
    app.state.settings.max_model_weights = 3000
    assert client.post("/v1/jobs", json={"dataset_id": dataset["id"]}).status_code == 202
