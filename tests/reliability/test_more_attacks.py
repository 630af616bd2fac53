"""More attacks, against a real `margin serve` on a real PostgreSQL (AUTH_MODE=required, two
tenants): one tenant must not take a shared resource from the others, and a retried request
must not meet a 500. No worker runs (WORKER_BACKEND=procrastinate without `margin worker`), so a
job stays queued and its event stream stays open. RELIABILITY.md lists them with their limits."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest
from sqlalchemy import insert

from app.db import Database
from app.services import keys
from app.tables import JobProgress
from tests.app.conftest import HEART, postgres_url_or_skip
from tests.reliability.attack_service import Service
from tests.reliability.helpers import ROOT, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
STREAMS = 12  # MAX_EVENT_STREAMS of the service
TENANT_STREAMS = 4  # MAX_EVENT_STREAMS_PER_TENANT


@pytest.fixture(scope="module")
def service(tmp_path_factory, request):
    postgres_url_or_skip()
    scratch = request.getfixturevalue("postgres_scratch")
    srv = Service(
        tmp_path_factory.mktemp("shared"),
        scratch,
        WORKER_BACKEND="procrastinate",
        MAX_EVENT_STREAMS=str(STREAMS),
        MAX_EVENT_STREAMS_PER_TENANT=str(TENANT_STREAMS),
        EVENT_SEND_TIMEOUT_S="5",
    )
    try:
        db = Database(scratch)
        _, other = keys.create_key(db, "other", "other", ["admin"])
        db.dispose()
        srv.other = {"Authorization": f"Bearer {other}"}
        yield srv
    finally:
        srv.stop()


def queued_job(service: Service, headers: dict) -> str:
    """A job of the tenant of `headers` on its own upload of heart_scale (queued: no worker)."""
    dataset = service.http.post("/v1/datasets", files={"file": HEART.open("rb")}, headers=headers)
    assert dataset.status_code in (200, 201), dataset.text
    job = service.http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"]}, headers=headers)
    assert job.status_code == 202, job.text
    return job.json()["id"]


class Watcher(threading.Thread):
    """Opens a job's event stream and reads it to its end; `status` once the answer is in."""

    def __init__(self, service: Service, job_id: str, headers: dict):
        super().__init__(daemon=True)
        self.args_ = (service.url, job_id, headers)
        self.answered = threading.Event()
        self.status: int | None = None
        self.ended = False

    def run(self) -> None:
        url, job_id, headers = self.args_
        with httpx.Client(base_url=url, timeout=60, headers=headers) as http:
            with http.stream("GET", f"/v1/jobs/{job_id}/events") as events:
                self.status = events.status_code
                self.answered.set()
                self.ended = any(line == "event: end" for line in events.iter_lines())


def watch(service: Service, job_id: str, headers: dict) -> Watcher:
    watcher = Watcher(service, job_id, headers)
    watcher.start()
    assert watcher.answered.wait(30), "no answer to the event stream"
    return watcher


def test_one_tenant_cannot_take_every_event_stream(service):
    mine, theirs = queued_job(service, service.auth), queued_job(service, service.other)
    # before: the first tenant's STREAMS watchers held every stream of the process, and the other
    # tenant's watcher got 503 for as long as they stayed open
    greedy = [watch(service, mine, service.auth) for _ in range(STREAMS)]
    statuses = [w.status for w in greedy]
    assert statuses == [200] * TENANT_STREAMS + [429] * (STREAMS - TENANT_STREAMS), statuses
    refused = service.http.get(f"/v1/jobs/{mine}/events")
    assert refused.status_code == 429 and refused.headers["Retry-After"]
    assert "MAX_EVENT_STREAMS_PER_TENANT" in refused.json()["detail"]
    other = watch(service, theirs, service.other)
    assert other.status == 200
    # the streams end with their jobs, and the tenant's room comes back
    for job_id, headers in ((mine, service.auth), (theirs, service.other)):
        assert service.http.post(f"/v1/jobs/{job_id}/cancel", headers=headers).status_code == 200
    for watcher in [*greedy, other]:
        watcher.join(30)
        assert not watcher.is_alive()
    assert all(w.ended for w in [*greedy[:TENANT_STREAMS], other])
    again = service.http.get(f"/v1/jobs/{mine}/events")
    assert again.status_code == 200 and "event: end" in again.text


def test_an_idempotency_key_of_a_deleted_dataset_or_job_is_409(service):
    key, upload = {"Idempotency-Key": "retried-upload"}, {"file": ("two.svm", b"1 1:1\n-1 2:1\n")}
    first = service.http.post("/v1/datasets", files=upload, headers=key)
    assert first.status_code == 201, first.text
    assert service.http.delete(f"/v1/datasets/{first.json()['id']}").status_code == 204
    # before: the key led to no row, the upload was parsed and its key stored again: 500
    again = service.http.post("/v1/datasets", files=upload, headers=key)
    assert again.status_code == 409 and "was deleted" in again.json()["detail"], again.text
    dataset = service.http.post("/v1/datasets", files={"file": HEART.open("rb")}).json()["id"]
    body, key = {"dataset_id": dataset}, {"Idempotency-Key": "retried-job"}
    job = service.http.post("/v1/jobs", json=body, headers=key).json()["id"]
    assert service.http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    assert service.http.delete(f"/v1/jobs/{job}").status_code == 204
    jobs = lambda: service.http.get("/v1/jobs", params={"dataset_id": dataset}).json()["items"]  # noqa: E731
    left = jobs()
    # before: the replay returned no job: 500
    again = service.http.post("/v1/jobs", json=body, headers=key)
    assert again.status_code == 409 and job in again.json()["detail"], again.text
    assert jobs() == left  # no job made


def race(service: Service, requests: dict[str, tuple]) -> dict[str, httpx.Response]:
    """Send the requests ({name: (method, url, kwargs)}) at once, each on its own connection."""
    start, answers = threading.Barrier(len(requests)), {}

    def send(name, method, url, kwargs):
        with httpx.Client(base_url=service.url, timeout=60, headers=service.auth) as http:
            start.wait()
            answers[name] = http.request(method, url, **kwargs)

    threads = [threading.Thread(target=send, args=(n, *r)) for n, r in requests.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return answers


def test_a_job_racing_the_deletion_of_its_dataset_is_404_or_409(service):
    """Each round: a fresh dataset, then at once a job on it and its deletion. Either the job
    comes first (202, the deletion 409) or the deletion (204, the job 404); never a 500."""
    for round_ in range(40):
        content = f"1 1:{round_}\n-1 2:{round_}\n".encode()  # new bytes: a new dataset each round
        dataset = service.http.post("/v1/datasets", files={"file": ("r.svm", content)})
        assert dataset.status_code == 201, dataset.text
        dataset_id = dataset.json()["id"]
        answers = race(service, {
            "job": ("POST", "/v1/jobs", {"json": {"dataset_id": dataset_id}}),
            "delete": ("DELETE", f"/v1/datasets/{dataset_id}", {}),
        })  # fmt: skip
        job, delete = answers["job"], answers["delete"]
        # before: the job's insert met the deleted row's foreign key on PostgreSQL: 500
        outcome = (job.status_code, delete.status_code)
        assert outcome in ((202, 409), (404, 204)), (outcome, job.text, delete.text)
        if job.status_code == 202:
            service.http.post(f"/v1/jobs/{job.json()['id']}/cancel")
            assert service.http.delete(f"/v1/datasets/{dataset_id}").status_code == 204


@pytest.fixture
def worker(service):
    """A `margin worker` for the service while the test runs."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "worker", "--workers", "1"],
        env=service.env, cwd=ROOT, stdout=service.log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    yield proc
    os.killpg(proc.pid, signal.SIGTERM)
    proc.wait(30)


def trained_model(service: Service, dataset_id: str, tol: float) -> str:
    job = service.http.post("/v1/jobs", json={"dataset_id": dataset_id, "params": {"tol": tol}})
    job_id = job.json()["id"]
    view = lambda: service.http.get(f"/v1/jobs/{job_id}").json()  # noqa: E731
    wait_for(lambda: view()["status"] not in ("queued", "running"), 120, "a training job")
    assert view()["status"] == "succeeded", view()
    return view()["model_id"]


def stalled_stream(service: Service, job_id: str, headers: dict) -> socket.socket:
    """A connection asking for the job's events that reads nothing (its receive window tiny)."""
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", service.port))
    auth = headers["Authorization"]
    conn.sendall(f"GET /v1/jobs/{job_id}/events HTTP/1.1\r\nHost: x\r\n"
                 f"Authorization: {auth}\r\n\r\n".encode())  # fmt: skip
    return conn


def test_a_client_that_reads_nothing_loses_its_event_stream(service, postgres_scratch):  # noqa: F811
    job = queued_job(service, service.other)
    assert service.http.post(f"/v1/jobs/{job}/cancel", headers=service.other).status_code == 200
    # an ended job with 20,000 progress records: 7 MB of events, more than the socket buffers
    # hold (a training job writes them as fast as the database takes them)
    measures = ("gap", "pg_max", "pg_min", "pg_range", "max_violation", "primal", "dual",
                "duality_gap", "lower_bound", "upper_bound")  # fmt: skip
    record = dict.fromkeys(measures, 1 / 3)
    db = Database(postgres_scratch)
    with db.write() as session:
        session.execute(insert(JobProgress), [
            {"job_id": job, "attempt": 1, "iteration": i, "elapsed_s": i / 7, "active": i, **record}
            for i in range(1, 20_001)
        ])  # fmt: skip
    db.dispose()
    stalled = [stalled_stream(service, job, service.other) for _ in range(TENANT_STREAMS)]

    def answer() -> int:  # the status of another stream of the tenant, closed unread
        with service.http.stream("GET", f"/v1/jobs/{job}/events", headers=service.other) as r:
            return r.status_code

    try:
        for conn in stalled:  # each served: its stream holds one of the tenant's places
            conn.settimeout(30)
            assert conn.recv(15, socket.MSG_PEEK) == b"HTTP/1.1 200 OK"
        # before: each stalled stream held its place for as long as its connection was open,
        # and the tenant's share stayed full (429)
        wait_for(lambda: answer() == 200, 60, "the stalled streams to be closed")
    finally:
        for conn in stalled:
            conn.close()


def test_registry_and_prediction_runs_racing_a_model_deletion(service, worker):
    """Each round: a fresh model with a registered version, then at once its deletion, a new
    version of it, an alias moved onto it and a background prediction run of it. Each gets its
    answer (never a 500), and a deleted model leaves no alias, version or run behind."""
    dataset = service.http.post("/v1/datasets", files={"file": HEART.open("rb")}).json()["id"]
    for round_ in range(25):
        model = trained_model(service, dataset, 0.1 + round_ / 100)
        name = f"race-{round_}"
        assert service.http.post("/v1/registered-models", json={"name": name}).status_code == 201
        versions = f"/v1/registered-models/{name}/versions"
        assert service.http.post(versions, json={"model_id": model}).status_code == 201
        answers = race(service, {
            "delete": ("DELETE", f"/v1/models/{model}", {}),
            "version": ("POST", versions, {"json": {"model_id": model}}),
            "alias": ("PUT", f"{versions[:-9]}/aliases/prod", {"json": {"version": 1}}),
            "run": ("POST", f"/v1/models/{model}/predictions", {"json": {"dataset_id": dataset}}),
        })  # fmt: skip
        statuses = {name: r.status_code for name, r in answers.items()}
        # before: a version's or a run's insert met the deleted model's foreign key (500), or
        # the alias was moved onto a version the deletion took with it (an alias to nothing)
        assert statuses["delete"] in (204, 409), (statuses, answers["delete"].text)
        expected = {"version": (201, 404), "alias": (200, 404), "run": (202, 404)}
        for request, allowed in expected.items():
            assert statuses[request] in allowed, (statuses, answers[request].text)
        if statuses["delete"] == 204:
            assert service.http.get(f"/v1/models/{model}").status_code == 404
            alias = service.http.get(f"/v1/registered-models/{name}/aliases/prod")
            assert alias.status_code == 404, (statuses, alias.text)
            assert service.http.get(versions).json()["items"] == [], statuses
