"""Authentication runs before a request's body is read, and each key's request rate is limited
(429 with Retry-After), by the service-wide RATE_LIMIT or the tenant's own."""

from __future__ import annotations

import pytest

from app.services import keys
from tests.security.conftest import new_key, room_in_window


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/jobs"),
        ("POST", "/v1/models/mdl_x/predict"),
        ("POST", "/v1/models/mdl_x/evaluate"),
        ("POST", "/v1/datasets"),
    ],
)
def test_a_malformed_body_without_a_key_is_401(make_service, method, path):
    client, _ = make_service(auth_mode="required")
    response = client.request(
        method, path, content=b'{"dataset_id": ', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert response.headers["content-type"].startswith("application/problem+json")


def test_a_key_without_the_scope_is_403_before_the_body(make_service):
    client, app = make_service(auth_mode="required")
    reader = new_key(app, "acme", "read")
    response = client.post("/v1/jobs", content=b"{not json", headers=reader)
    assert response.status_code == 403


def test_requests_over_the_rate_are_429_per_key(make_service):
    client, app = make_service(auth_mode="required", rate_limit="3/minute")
    acme, other = new_key(app, "acme", "read"), new_key(app, "globex", "read")
    room_in_window(60)
    codes = [client.get("/v1/datasets", headers=acme).status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    refused = client.get("/v1/datasets", headers=acme)
    assert refused.status_code == 429
    assert 0 < int(refused.headers["Retry-After"]) <= 60
    assert "at most 3 requests per 60 s" in refused.json()["detail"]
    assert client.get("/v1/datasets", headers=other).status_code == 200  # its own count
    assert client.get("/healthz").status_code == 200  # health is never limited


def test_a_tenants_own_rate_overrides_the_default(make_service):
    client, app = make_service(auth_mode="required", rate_limit="100/minute")
    keys.set_quota(app.state.db, "acme", None, None, rate_limit="2/minute")
    acme, other = new_key(app, "acme", "read"), new_key(app, "globex", "read")
    room_in_window(60)
    assert [client.get("/v1/solvers", headers=acme).status_code for _ in range(3)] == [
        200,
        200,
        429,
    ]
    assert all(client.get("/v1/solvers", headers=other).status_code == 200 for _ in range(5))
    with pytest.raises(keys.KeyRequestError, match="cannot read the rate"):
        keys.set_quota(app.state.db, "acme", None, None, rate_limit="often")


def test_predict_counts_against_the_rate_too(make_service):
    client, app = make_service(auth_mode="required", rate_limit="2/minute")
    acme = new_key(app, "acme", "predict")
    room_in_window(60)
    body = {"instances": [[0.0]]}
    codes = [
        client.post("/v1/models/mdl_x/predict", json=body, headers=acme).status_code
        for _ in range(3)
    ]
    assert codes == [404, 404, 429]
