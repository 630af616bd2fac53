"""GET /v1/solvers describes each estimator from the same schemas that validate jobs, and those
schemas mirror the estimators' constructors (names and defaults)."""

from __future__ import annotations

import importlib
import inspect

import pytest

from app.schemas.params import ESTIMATORS

# constructor arguments the service sets itself rather than taking from the request
SERVICE_OWNED = {"callback", "warm_start", "n_jobs"}
CONSTRUCTORS = {
    "LinearSVC": ("solvers.estimators.linear_svc", "LinearSVC"),
    "LinearSVR": ("solvers.estimators.linear_svr", "LinearSVR"),
    "structural": ("solvers.structural", "fit_structural"),
}


@pytest.mark.parametrize("name", sorted(CONSTRUCTORS))
def test_param_schemas_mirror_the_constructors(name):
    module, attr = CONSTRUCTORS[name]
    target = getattr(importlib.import_module(module), attr)
    signature = inspect.signature(target.__init__ if inspect.isclass(target) else target)
    expected = {
        p.name: p.default
        for p in signature.parameters.values()
        if p.kind is p.KEYWORD_ONLY
        or (p.kind is p.POSITIONAL_OR_KEYWORD and p.default is not p.empty)
    }
    expected = {k: v for k, v in expected.items() if k not in SERVICE_OWNED}
    schema = ESTIMATORS[name].params
    fields = {k: f.default for k, f in schema.model_fields.items()}
    extra_service_fields = {
        "structural": {"online", "cache_size", "passes"},
        "LinearSVC": {"search"},  # solvers.LinearSVCCV's
    }.get(name, set())
    unexposed = {"w0", "reg_scale"} if name == "structural" else set()
    assert set(fields) - extra_service_fields == set(expected) - unexposed
    for key in set(fields) - extra_service_fields:
        assert fields[key] == expected[key], key


def test_solvers_endpoint_lists_estimators_with_params(client):
    body = client.get("/v1/solvers").json()
    by_name = {item["name"]: item for item in body["items"]}
    assert set(by_name) == {"LinearSVC", "LinearSVR", "structural"}
    svc = {p["name"]: p for p in by_name["LinearSVC"]["params"]}
    assert svc["C"] == {
        "name": "C",
        "default": 1.0,
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "inverse regularization strength",
    }
    assert svc["multi_class"]["enum"] == ["ovr", "crammer_singer", "weston_watkins"]
    assert svc["class_weight"]["type"] == ["string", "object", "null"]
    assert by_name["LinearSVC"]["formulations"]["multi_class"] == svc["multi_class"]["enum"]
    assert by_name["LinearSVR"]["kind"] == "regressor"
    assert set(by_name["LinearSVR"]["schema"]["properties"]) == {
        p["name"] for p in by_name["LinearSVR"]["params"]
    }


def test_malformed_json_body_is_a_problem_naming_the_location(client):
    response = client.post(
        "/v1/jobs", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.headers["content-type"].startswith("application/problem+json")
    response = client.post("/v1/jobs", json={})
    assert response.status_code == 422
    assert response.json()["errors"][0] == {"field": "dataset_id", "message": "Field required"}


def test_health_and_readiness(client, db):
    assert client.get("/healthz").json() == {"status": "ok"}
    response = client.get("/readyz")
    assert response.status_code == 503 and "no worker" in response.json()["detail"]
    from app.jobs import workers

    workers.register(db, "test:1", "local")
    assert client.get("/readyz").json() == {"status": "ready", "database": "ok", "workers": 1}


def test_openapi_document_is_served(client):
    paths = client.get("/openapi.json").json()["paths"]
    for path in ("/v1/datasets", "/v1/jobs", "/v1/jobs/{job_id}/events", "/v1/solvers", "/readyz"):
        assert path in paths
    upload = paths["/v1/datasets"]["post"]["requestBody"]["content"]
    assert "multipart/form-data" in upload
    assert client.get("/docs").status_code == 200


def test_unexpected_errors_are_500_without_internals(client, monkeypatch):
    from app.api import solvers

    def explode(model):
        raise RuntimeError("secret at /srv/margin/app/internal.py line 3")

    monkeypatch.setattr(solvers, "describe_params", explode)
    response = client.get("/v1/solvers")
    assert response.status_code == 500
    assert response.json() == {
        "type": "about:blank",
        "title": "Internal Server Error",
        "status": 500,
        "detail": "an unexpected error occurred",
    }
