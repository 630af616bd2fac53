"""Who may do what: AUTH_MODE, 401 for missing or unknown keys, 403 for a missing scope, open
health and docs paths, and the key itself (random, prefixed, stored only as its SHA-256)."""

from __future__ import annotations

import hashlib
import logging
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, select, text

from app.auth import KEY_PREFIX, effective_mode, is_loopback, required_scope
from app.config import Settings
from app.rate_limits import InvalidRate, client_of
from app.services import keys
from app.tables import ApiKey
from tests.deploy.cluster import wait_for
from tests.security.conftest import HEART, new_key, room_in_window, upload

OPEN_PATHS = ["/healthz", "/docs", "/openapi.json"]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.org", False),
    ],
)
def test_loopback_detection(host, loopback):
    assert is_loopback(host) is loopback
    mode = effective_mode(Settings(host=host, auth_mode="auto"))
    assert mode == ("optional" if loopback else "required")


def test_explicit_modes_win_over_the_address():
    assert effective_mode(Settings(host="127.0.0.1", auth_mode="required")) == "required"
    assert effective_mode(Settings(host="0.0.0.0", auth_mode="off")) == "off"


@pytest.mark.parametrize(
    ("method", "path", "scope"),
    [
        ("GET", "/v1/datasets", "read"),
        ("GET", "/v1/models/mdl_1/predictions/run_1", "read"),
        ("POST", "/v1/datasets", "train"),
        ("POST", "/v1/jobs", "train"),
        ("POST", "/v1/jobs/job_1/cancel", "train"),
        ("DELETE", "/v1/models/mdl_1", "train"),
        ("POST", "/v1/models/mdl_1/predict", "predict"),
        ("POST", "/v1/models/mdl_1/predictions", "predict"),
        ("POST", "/v1/models/mdl_1/predictions/run_1/cancel", "predict"),
        ("POST", "/v1/models/mdl_1/evaluate", "predict"),
    ],
)
def test_scope_of_each_route(method, path, scope):
    assert required_scope(method, path) == scope


def test_keys_are_random_prefixed_and_stored_only_as_hashes(make_service):
    _, app = make_service()
    made = [keys.create_key(app.state.db, "acme", "k", ["read"]) for _ in range(20)]
    tokens = [key for _, key in made]
    assert len(set(tokens)) == len(tokens)
    for token in tokens:
        assert token.startswith(KEY_PREFIX)
        assert len(token) - len(KEY_PREFIX) >= 43  # 32 random bytes, base64url
    with app.state.db.session() as session:
        rows = session.scalars(select(ApiKey)).all()
        dump = "\n".join(
            str(tuple(r)) for r in session.execute(text("SELECT * FROM api_keys")).all()
        )
    assert {r.key_hash for r in rows} == {hashlib.sha256(t.encode()).hexdigest() for t in tokens}
    for token in tokens:
        assert token not in dump
        assert token[len(KEY_PREFIX) + 8 :] not in dump  # nothing past the display prefix


def test_required_mode_needs_a_valid_key_on_every_v1_route(make_service):
    client, app = make_service(auth_mode="required")
    for path in OPEN_PATHS:
        assert client.get(path).status_code == 200, path
    assert client.get("/readyz").status_code in (200, 503)  # open: no workers here, but no 401
    for method, path in [
        ("GET", "/v1/datasets"),
        ("GET", "/v1/jobs"),
        ("GET", "/v1/models"),
        ("GET", "/v1/solvers"),
        ("POST", "/v1/jobs"),
        ("POST", "/v1/models/mdl_x/predict"),
        ("DELETE", "/v1/datasets/ds_x"),
    ]:
        response = client.request(method, path)
        assert response.status_code == 401, (method, path, response.text)
        assert response.headers["www-authenticate"].startswith("Bearer")
        assert response.headers["content-type"] == "application/problem+json"
        assert "API key" in response.json()["detail"]
    for header in ["Bearer mgn_unknown", "Bearer ", "Basic dXNlcjpwYXNz", "mgn_no_scheme"]:
        response = client.get("/v1/datasets", headers={"Authorization": header})
        assert response.status_code == 401, header
    ok = client.get("/v1/datasets", headers=new_key(app, "acme", "read"))
    assert ok.status_code == 200


def test_missing_scope_is_403_and_admin_may_do_everything(make_service, fake_trainer):
    client, app = make_service(auth_mode="required")
    reader, trainer = new_key(app, "acme", "read"), new_key(app, "acme", "train")
    predictor, admin = new_key(app, "acme", "predict"), new_key(app, "acme", "admin")

    denied = upload(client, HEART.read_bytes(), headers=reader)
    assert denied.status_code == 403
    assert "'train'" in denied.json()["detail"]
    assert upload(client, HEART.read_bytes(), headers=predictor).status_code == 403
    dataset = upload(client, HEART.read_bytes(), headers=trainer).json()
    job = {"dataset_id": dataset["id"], "params": {"tol": 1e-3}}
    assert client.post("/v1/jobs", json=job, headers=reader).status_code == 403
    assert client.post("/v1/jobs", json=job, headers=trainer).status_code == 202
    assert client.post("/v1/jobs", json=job, headers=admin).status_code == 202
    assert client.get("/v1/datasets", headers=predictor).status_code == 403
    assert client.get("/v1/datasets", headers=reader).status_code == 200
    assert client.get("/v1/datasets", headers=admin).status_code == 200
    body = {"instances": [[0.0]]}
    assert client.post("/v1/models/mdl_x/predict", json=body, headers=trainer).status_code == 403
    assert client.post("/v1/models/mdl_x/predict", json=body, headers=predictor).status_code == 404
    assert client.post("/v1/models/mdl_x/predict", json=body, headers=admin).status_code == 404


def test_auto_on_loopback_serves_without_keys_but_checks_a_sent_key(make_service, caplog):
    with caplog.at_level(logging.WARNING, logger="margin.auth"):
        client, app = make_service(auth_mode="auto", host="127.0.0.1")
    assert any("WITHOUT API keys" in r.getMessage() for r in caplog.records)
    assert client.get("/v1/datasets").status_code == 200
    assert client.get("/v1/datasets", headers={"Authorization": "Bearer nope"}).status_code == 401
    acme = new_key(app, "acme", "train", "read")
    mine = upload(client, HEART.read_bytes(), headers=acme).json()
    local = upload(client, HEART.read_bytes()).json()
    assert [d["id"] for d in client.get("/v1/datasets", headers=acme).json()["items"]] == [
        mine["id"]
    ]
    assert [d["id"] for d in client.get("/v1/datasets").json()["items"]] == [local["id"]]


def test_auto_on_a_public_address_requires_keys(make_service, caplog):
    with caplog.at_level(logging.INFO, logger="margin.auth"):
        client, _ = make_service(auth_mode="auto", host="0.0.0.0")
    assert not any("WITHOUT API keys" in r.getMessage() for r in caplog.records)
    assert client.get("/v1/datasets").status_code == 401
    assert client.get("/healthz").status_code == 200


def test_off_ignores_keys_and_everything_is_local(make_service):
    client, app = make_service(auth_mode="off", host="0.0.0.0")
    assert client.get("/v1/datasets", headers={"Authorization": "Bearer junk"}).status_code == 200
    created = upload(client, HEART.read_bytes()).json()
    with app.state.db.session() as session:
        tenant = session.execute(text("SELECT tenant FROM datasets")).scalar_one()
    assert tenant == "local"
    assert client.get(f"/v1/datasets/{created['id']}").status_code == 200


def test_revoked_key_stops_working(make_service):
    client, app = make_service(auth_mode="required", auth_cache_s=0)
    row, key = keys.create_key(app.state.db, "acme", "k", ["read"])
    headers = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/datasets", headers=headers).status_code == 200
    keys.revoke_key(app.state.db, row.prefix)
    assert client.get("/v1/datasets", headers=headers).status_code == 401


def test_an_open_event_stream_ends_once_its_key_is_revoked(make_service):
    import threading

    client, app = make_service(auth_mode="required", auth_cache_s=1)
    row, key = keys.create_key(app.state.db, "acme", "k", ["read", "train"])
    headers = {"Authorization": f"Bearer {key}"}
    dataset = upload(client, HEART.read_bytes(), headers=headers).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}, headers=headers).json()
    answered, lines = threading.Event(), []

    def watch():  # the job stays queued (no worker): its stream has nothing to end it
        with client.stream("GET", f"/v1/jobs/{job['id']}/events", headers=headers) as events:
            lines.append(events.status_code)
            answered.set()
            lines.extend(events.iter_lines())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert answered.wait(30) and lines[0] == 200
    keys.revoke_key(app.state.db, row.prefix)
    revoked = time.monotonic()
    # before: the stream went on for as long as the job, for ever while it was queued
    watcher.join(15)
    assert not watcher.is_alive(), "the stream of a revoked key is still open"
    assert time.monotonic() - revoked < 2 * 1 + 5  # AUTH_CACHE_S twice, and a loaded machine
    assert not any(line.startswith("event: end") for line in lines[1:])
    assert client.get(f"/v1/jobs/{job['id']}", headers=headers).status_code == 401


def test_key_requests_are_validated(make_service):
    _, app = make_service()
    db = app.state.db
    with pytest.raises(keys.KeyRequestError, match="tenant"):
        keys.create_key(db, "../etc", "k", ["read"])
    with pytest.raises(keys.KeyRequestError, match="scope"):
        keys.create_key(db, "acme", "k", ["root"])
    with pytest.raises(keys.KeyRequestError, match="no key"):
        keys.revoke_key(db, "key_missing")


def test_made_up_keys_do_not_push_live_ones_out_of_the_cache(make_service, monkeypatch):
    """Unknown keys were cached in the same LRU as live ones: a flood of made-up keys evicted
    every live key, whose next request then cost a database lookup again."""
    from app import auth

    monkeypatch.setattr(auth, "KNOWN_KEYS_CACHED", 4)
    monkeypatch.setattr(auth, "UNKNOWN_KEYS_CACHED", 4)
    client, app = make_service(auth_mode="required", auth_cache_s=60)
    _, key = keys.create_key(app.state.db, "acme", "k", ["read"])
    live = {"Authorization": f"Bearer {key}"}
    assert client.get("/v1/datasets", headers=live).status_code == 200  # looked up, cached
    for i in range(5):  # one more than either cache holds
        made_up = {"Authorization": f"Bearer mk_made_up_{i}"}
        assert client.get("/v1/datasets", headers=made_up).status_code == 401
    lookups = []
    lookup = app.state.auth.lookup
    monkeypatch.setattr(app.state.auth, "lookup", lambda h: lookups.append(h) or lookup(h))
    assert client.get("/v1/datasets", headers=live).status_code == 200
    assert lookups == []  # still cached
    assert client.get("/v1/datasets", headers={"Authorization": "Bearer mk_made_up_0"}
                      ).status_code == 401  # fmt: skip
    assert len(lookups) == 1  # the oldest made-up key left its own cache


def key_queries(db) -> list[str]:
    """The statements on the api_keys table from now on (an engine event listener)."""
    statements: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if "api_keys" in statement:
            statements.append(statement)

    event.listen(db.engine, "before_cursor_execute", seen)
    return statements


def test_failed_key_lookups_are_bounded_per_address_before_the_database(make_service):
    """Every made-up key cost a database lookup, without a bound: a flood of distinct keys was
    a flood of queries. Beyond AUTH_FAILURE_RATE the address gets 429 without a lookup; a live
    key from the same address still works, and the window's end gives room again."""
    client, app = make_service(
        auth_mode="required", auth_failure_rate="3 per 4 seconds", auth_cache_s=60
    )
    live = new_key(app, "acme", "read")
    assert client.get("/v1/datasets", headers=live).status_code == 200  # looked up, cached
    queries = key_queries(app.state.db)

    def made_up(i):
        return client.get("/v1/datasets", headers={"Authorization": f"Bearer mgn_made_up_{i}"})

    room_in_window(4)
    assert [made_up(i).status_code for i in range(3)] == [401] * 3
    assert len(queries) == 3
    over = [made_up(i) for i in range(3, 10)]
    assert [r.status_code for r in over] == [429] * 7
    assert len(queries) == 3  # not one lookup more
    assert "AUTH_FAILURE_RATE" in over[-1].json()["detail"]
    retry = int(over[-1].headers["Retry-After"])
    assert 1 <= retry <= 8
    assert client.get("/v1/datasets", headers=live).status_code == 200
    assert made_up(0).status_code == 401  # a cached unknown key costs nothing: no 429 either
    time.sleep(retry)
    wait_for(lambda: made_up(10).status_code == 401, 10, "the window to give room again")
    assert len(queries) == 4


def test_other_addresses_and_unset_rates_are_not_bounded(make_service):
    client, app = make_service(auth_mode="required", auth_failure_rate="2/minute")
    room_in_window(60)
    codes = [
        client.get("/v1/datasets", headers={"Authorization": f"Bearer mgn_made_up_{i}"})
        .status_code
        for i in range(3)
    ]
    assert codes == [401, 401, 429]
    with TestClient(app, base_url="http://localhost", client=("192.0.2.7", 50000)) as other:
        response = other.get("/v1/datasets", headers={"Authorization": "Bearer mgn_other"})
    assert response.status_code == 401
    client, app = make_service(auth_mode="required", auth_failure_rate="")
    codes = {
        client.get("/v1/datasets", headers={"Authorization": f"Bearer mgn_made_up_{i}"})
        .status_code
        for i in range(40)
    }  # over the default of 30
    assert codes == {401}


@pytest.mark.parametrize(
    ("address", "counted_as"),
    [
        ("192.0.2.7", "192.0.2.7"),
        ("::ffff:192.0.2.7", "192.0.2.7"),
        ("2001:db8:1:2::7", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:ffff::1", "2001:db8:1:2::/64"),
        ("testclient", "testclient"),
    ],
)
def test_an_ipv6_client_counts_with_its_64(address, counted_as):
    assert client_of(address) == f"auth-failures:{counted_as}"


def test_an_unreadable_failure_rate_stops_the_start(make_service):
    with pytest.raises(InvalidRate, match="often"):
        make_service(auth_failure_rate="often")


@pytest.mark.parametrize("mode", ["off", "auto"])
def test_keyless_modes_refuse_changes_a_page_of_another_site_would_send(make_service, mode):
    """Without keys, a browser's cookie-less form or fetch from another site is as good as the
    user's own request: a page the user merely visits must not upload, train or cancel."""
    client, app = make_service(auth_mode=mode, host="127.0.0.1")
    foreign = [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},  # a sandboxed frame, a file:// page
        {"Origin": "http://localhost:8080"},  # another port is another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site", "Origin": "http://localhost"},
    ]
    for headers in foreign:
        response = upload(client, HEART.read_bytes(), headers=headers)
        assert response.status_code == 403, (headers, response.text)
        assert "another site" in response.json()["detail"]
        response = client.post("/v1/jobs/job_x/cancel", headers=headers)
        assert response.status_code == 403, (headers, response.text)
    assert client.get("/v1/datasets", headers=foreign[0]).json()["items"] == []  # reads are open
    own = [{}, {"Origin": "http://localhost"}, {"Sec-Fetch-Site": "same-origin"}]
    for i, headers in enumerate(own):  # the dashboard's own requests, and clients without Origin
        response = upload(client, HEART.read_bytes() + b"#%d\n" % i, headers=headers)
        assert response.status_code == 201, (headers, response.text)


def test_a_request_with_a_key_is_not_judged_by_its_origin(make_service):
    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "train", "read")
    response = upload(client, HEART.read_bytes(), headers={**acme, "Origin": "http://evil.example"})
    assert response.status_code == 201, response.text


def test_keyless_on_loopback_answers_only_requests_naming_it_by_a_loopback_host(make_service):
    """DNS rebinding: a page of a site whose name is pointed at 127.0.0.1 after it loaded is,
    to the browser, of the same origin as the service under that name; without keys it could
    read and change everything. A key still works under any name; AUTH_MODE=off is left alone
    (chosen on purpose, as behind a proxy)."""
    client, app = make_service(auth_mode="auto", host="127.0.0.1")
    for host in ("rebound.example:8000", "rebound.example", "127.0.0.1.example", "testserver"):
        response = client.get("/v1/datasets", headers={"Host": host})
        assert response.status_code == 403, (host, response.text)
        assert "loopback" in response.json()["detail"]
        headers = {"Host": host, "Sec-Fetch-Site": "same-origin"}
        assert upload(client, HEART.read_bytes(), headers=headers).status_code == 403
    for host in ("localhost", "localhost:8000", "localhost.:8000", "127.0.0.1:8000", "127.0.0.2",
                 "[::1]:8000"):  # fmt: skip
        response = client.get("/v1/datasets", headers={"Host": host})
        assert response.status_code == 200, (host, response.text)
    acme = new_key(app, "acme", "read")
    keyed = client.get("/v1/datasets", headers={**acme, "Host": "rebound.example:8000"})
    assert keyed.status_code == 200, keyed.text
    off, _ = make_service(auth_mode="off", host="127.0.0.1")
    assert off.get("/v1/datasets", headers={"Host": "proxy.internal"}).status_code == 200
