"""Tenant isolation: another tenant's datasets, jobs, models and prediction runs answer 404
(not 403) on every route and never appear in lists; rows made for a tenant (by workers too)
carry it."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from app.jobs.runner import RunContext, run_job
from tests.security.conftest import HEART, new_key, upload


@pytest.fixture
def two_tenants(make_service, fake_trainer):
    """acme owns a dataset, a finished job with its model, a queued job and a prediction run."""
    fake_trainer()
    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    other = new_key(app, "globex", "admin")
    dataset = upload(client, HEART.read_bytes(), headers=acme).json()
    job = client.post(
        "/v1/jobs", json={"dataset_id": dataset["id"], "params": {"tol": 1e-3}}, headers=acme
    ).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    job = client.get(f"/v1/jobs/{job['id']}", headers=acme).json()
    queued = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}, headers=acme).json()
    run = client.post(
        f"/v1/models/{job['model_id']}/predictions",
        json={"dataset_id": dataset["id"]},
        headers=acme,
    )
    assert run.status_code == 202, run.text
    return {
        "client": client,
        "app": app,
        "acme": acme,
        "other": other,
        "dataset": dataset["id"],
        "job": job["id"],
        "queued": queued["id"],
        "model": job["model_id"],
        "run": run.json()["id"],
    }


def test_rows_carry_their_tenant_including_the_workers_model(two_tenants):
    with two_tenants["app"].state.db.session() as session:
        for table in ("datasets", "jobs", "models", "prediction_runs"):
            tenants = session.execute(text(f"SELECT DISTINCT tenant FROM {table}")).scalars()
            assert list(tenants) == ["acme"], table


def test_other_tenant_gets_404_everywhere(two_tenants):
    t = two_tenants
    client, other = t["client"], t["other"]
    ds, job, queued, model, run = t["dataset"], t["job"], t["queued"], t["model"], t["run"]
    heart = HEART.read_text().splitlines()[0].split(" ", 1)[1]
    requests = [
        ("GET", f"/v1/datasets/{ds}", None),
        ("DELETE", f"/v1/datasets/{ds}", None),
        ("GET", f"/v1/jobs/{job}", None),
        ("GET", f"/v1/jobs/{job}/progress", None),
        ("GET", f"/v1/jobs/{job}/events", None),
        ("GET", f"/v1/jobs/{job}/history", None),
        ("POST", f"/v1/jobs/{queued}/cancel", None),
        ("GET", f"/v1/models/{model}", None),
        ("GET", f"/v1/models/{model}/export", None),
        ("GET", f"/v1/models/{model}/predictions", None),
        ("GET", f"/v1/models/{model}/predictions/{run}", None),
        ("POST", f"/v1/models/{model}/predict", {"instances": [{"indices": [1], "values": [1]}]}),
        ("POST", f"/v1/models/{model}/evaluate", {"dataset_id": ds}),
        ("POST", f"/v1/models/{model}/predictions", {"dataset_id": ds}),
        ("POST", f"/v1/models/{model}/predictions/{run}/cancel", None),
        ("DELETE", f"/v1/models/{model}", None),
        ("POST", "/v1/jobs", {"dataset_id": ds}),
    ]
    for method, path, body in requests:
        response = client.request(method, path, json=body, headers=other)
        assert response.status_code == 404, (method, path, response.status_code, response.text)
        assert response.headers["content-type"] == "application/problem+json"
    # text/plain predict goes through the same check
    response = client.post(
        f"/v1/models/{model}/predict",
        content=heart,
        headers={**other, "Content-Type": "text/plain"},
    )
    assert response.status_code == 404
    # and nothing was changed by those attempts
    acme = t["acme"]
    assert client.get(f"/v1/datasets/{ds}", headers=acme).status_code == 200
    assert client.get(f"/v1/models/{model}", headers=acme).status_code == 200
    assert client.get(f"/v1/jobs/{queued}", headers=acme).json()["status"] == "queued"


def test_lists_show_only_the_tenants_own(two_tenants):
    t = two_tenants
    client = t["client"]
    for path in ("/v1/datasets", "/v1/jobs", "/v1/models", f"/v1/jobs?dataset_id={t['dataset']}"):
        assert client.get(path, headers=t["other"]).json() == {"items": [], "next": None}, path
        assert client.get(path, headers=t["acme"]).json()["items"], path
    own = upload(client, HEART.read_bytes(), headers=t["other"]).json()
    items = client.get("/v1/datasets", headers=t["other"]).json()["items"]
    assert [d["id"] for d in items] == [own["id"]]


def test_predict_is_isolated_even_when_the_model_is_cached(two_tenants):
    t = two_tenants
    client, model = t["client"], t["model"]
    body = {"instances": [{"indices": [1], "values": [1.0]}]}
    assert (
        client.post(f"/v1/models/{model}/predict", json=body, headers=t["acme"]).status_code == 200
    )
    for _ in range(3):  # the model is now in the cache: still absent for the other tenant
        response = client.post(f"/v1/models/{model}/predict", json=body, headers=t["other"])
        assert response.status_code == 404
    assert (
        client.post(f"/v1/models/{model}/predict", json=body, headers=t["acme"]).status_code == 200
    )


def test_idempotency_keys_are_per_tenant(two_tenants):
    t = two_tenants
    client = t["client"]
    key = {"Idempotency-Key": "same-key"}
    content = HEART.read_bytes() + b"# a copy\n"
    first = upload(client, content, headers={**t["acme"], **key})
    second = upload(client, content, headers={**t["other"], **key})
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    again = upload(client, content, headers={**t["other"], **key})
    assert again.json()["id"] == second.json()["id"]
    assert again.headers.get("Idempotent-Replayed") == "true"


def test_repeated_uploads_are_stored_once_per_tenant_never_across(two_tenants):
    t = two_tenants
    client = t["client"]
    content = HEART.read_bytes() + b"# another copy\n"
    first = upload(client, content, headers=t["acme"])
    again = upload(client, content, headers=t["acme"])
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["Location"] == f"/v1/datasets/{first.json()['id']}"
    # the other tenant's identical upload is its own dataset: nothing says acme has it
    theirs = upload(client, content, headers=t["other"])
    assert theirs.status_code == 201 and theirs.json()["id"] != first.json()["id"]
