"""Idempotency-Key on job creation, on SQLite and PostgreSQL: a replay returns the same job, another
body is a 422, the key of a deleted job a 409, concurrent requests with one key create one job,
and a key is forgotten after IDEMPOTENCY_TTL_HOURS (the reaper sweeps it). A stand-in trainer
plays the solver here. A body is fingerprinted as the job it makes (its params validated, defaults
filled in), so {"C": 1} and {"C": 1.0} are one body."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import select, update

from app.jobs.queue import LocalQueue
from app.jobs.recovery import Reaper
from app.services import idempotency
from app.tables import IdempotencyKey, Job, utcnow
from tests.app.job_helpers import count

pytestmark = pytest.mark.timeout(120)


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


def test_a_key_matches_the_job_as_validated_not_as_spelled(client, db, heart, fake_trainer):
    """The fingerprint was the raw body's: a retry sending {"C": 1.0} for {"C": 1} (one job) was
    a 422. It is the validated params' now, defaults filled in; another job is still a 422."""
    fake_trainer()
    key = {"Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"C": 1}},
                        headers=key)  # fmt: skip
    assert first.status_code == 202, first.text
    for params in ({"C": 1.0}, {"C": 1e0, "loss": "squared_hinge"}, {}):
        again = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": params},
                            headers=key)  # fmt: skip
        assert again.status_code == 202, (params, again.text)
        assert again.json()["id"] == first.json()["id"]
        assert again.headers["idempotent-replayed"] == "true"
    for params in ({"C": 1.5}, {"C": 1, "loss": "hinge"}):
        other = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": params},
                            headers=key)  # fmt: skip
        assert other.status_code == 422 and "different request body" in other.json()["detail"]
    assert count(db, Job) == 1


def test_a_key_stored_with_the_raw_body_fingerprint_still_replays(client, db, heart, fake_trainer):
    """Keys stored before the validated-params fingerprint hold the raw body's hash: a retry
    within the TTL after an upgrade was a 422 'reused'. It replays; another job is still 422."""
    fake_trainer()
    body = {"dataset_id": heart["id"], "params": {"C": 1}}
    key = {"Idempotency-Key": "k1"}
    first = client.post("/v1/jobs", json=body, headers=key)
    assert first.status_code == 202, first.text
    # the fingerprint the earlier release stored: the body as parsed, params as sent
    raw = {"dataset_id": heart["id"], "validation_dataset_id": None, "estimator": "LinearSVC",
           "params": {"C": 1}, "distributed": None}  # fmt: skip
    legacy = idempotency.request_hash(raw)
    with db.write() as session:
        session.execute(update(IdempotencyKey).values(request_hash=legacy))
    again = client.post("/v1/jobs", json=body, headers=key)
    assert again.status_code == 202, again.text
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    other = client.post("/v1/jobs", json={**body, "params": {"C": 2}}, headers=key)
    assert other.status_code == 422 and "different request body" in other.json()["detail"]
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


def test_concurrent_requests_with_one_key_create_one_job(app, client, db, heart, fake_trainer):
    from app.schemas.jobs import JobCreate
    from app.services import jobs as service

    fake_trainer()
    body = JobCreate(dataset_id=heart["id"], params={"C": 5})
    barrier = threading.Barrier(4)
    results = []

    def create():
        barrier.wait()
        settings = app.state.settings
        results.append(service.create_job(db, app.state.queue, body, "same-key", settings))

    threads = [threading.Thread(target=create) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len({job.id for job, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]
    assert count(db, Job) == 1


def test_a_key_of_255_characters_is_kept_and_256_refused(client, db, heart, fake_trainer):
    fake_trainer()
    body = {"dataset_id": heart["id"]}
    first = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k" * 255})
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k" * 255})
    assert first.status_code == 202 and again.json()["id"] == first.json()["id"]
    over = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k" * 256})
    assert over.status_code == 422 and "got 256" in over.json()["detail"]
    assert count(db, Job) == 1
