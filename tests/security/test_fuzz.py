"""Short schemathesis profile (several hundred generated requests over every operation): no 5xx
and no response that violates the service's own OpenAPI schema. The long profile is
scripts/fuzz_long.py."""

from __future__ import annotations

from fastapi.testclient import TestClient

from tests.security import fuzz_service

EXAMPLES = 30


def test_no_server_errors_and_schema_conformance(tmp_path, sqlite_template, shared_parser):  # noqa: F811
    app = fuzz_service.build_app(tmp_path / "data", sqlite_template)
    app.state.parser = shared_parser
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        fuzz_service.seed(client)
        calls, failures = fuzz_service.fuzz(app, EXAMPLES)
    assert calls >= 200
    assert failures == {}, "\n\n".join(f"{op}: {msg}" for op, msg in failures.items())
