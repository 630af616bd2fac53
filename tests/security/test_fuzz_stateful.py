"""schemathesis's stateful mode with keys for two tenants: linked call sequences (upload, then
the dataset's routes, jobs on it, ...) alternating between tenants. No 5xx, schema conformance,
and no response to one tenant naming another tenant's resource. The long profile is
`scripts/fuzz_long.py --stateful`."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.security import fuzz_service


def test_stateful_two_tenants(tmp_path, sqlite_template, shared_parser):  # noqa: F811
    app = fuzz_service.build_app(tmp_path / "data", sqlite_template, auth_mode="required")
    app.state.parser = shared_parser
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False):
        headers = fuzz_service.two_tenant_headers(app)
        calls, failure = fuzz_service.fuzz_stateful(app, headers, max_examples=25)
    assert failure is None, failure
    assert calls >= 50
