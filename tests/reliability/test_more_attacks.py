"""More attacks, against a real `margin serve` on a real PostgreSQL (AUTH_MODE=required, two
tenants): one tenant must not take a shared resource from the others, and a retried request
must not meet a 500. No worker runs (WORKER_BACKEND=procrastinate without `margin worker`), so a
job stays queued and its event stream stays open. RELIABILITY.md lists them with their limits."""

from __future__ import annotations

import threading

import httpx
import pytest

from app.db import Database
from app.services import keys
from tests.app.conftest import HEART, postgres_url_or_skip
from tests.reliability.test_attacks import Service, postgres_scratch  # noqa: F401

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
