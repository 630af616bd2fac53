"""Fuzzing the service with schemathesis against its own OpenAPI schema (in process, over ASGI).

Shared by the short profile in the test suite (tests/security/test_fuzz.py) and the long one
(scripts/fuzz_long.py). Checks: no 5xx response, and every response that the schema documents
conforms to it. A dataset and a trained model are seeded so that generated requests also reach
real rows, not only 404s.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import schemathesis
from fastapi.testclient import TestClient
from schemathesis.checks import not_a_server_error, response_schema_conformance

from app import migrate
from app.config import Settings
from app.main import create_app

CHECKS = [not_a_server_error, response_schema_conformance]
# /readyz answers 503 by design while no worker process runs (none does in these fuzz runs)
SKIP_PATHS = {"/readyz"}
HEART = Path(__file__).resolve().parents[2] / "app" / "demo" / "heart_scale"


def build_app(data_dir: Path, template: Path | None = None):
    """A service on a fresh migrated SQLite database in `data_dir`, with one dataset stored."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if template is not None:
        shutil.copy(template, data_dir / "margin.db")
    else:
        migrate.upgrade(f"sqlite:///{data_dir / 'margin.db'}")
    settings = Settings(data_dir=data_dir, max_upload_mb=1, max_request_kb=64, auth_mode="off")
    return create_app(settings)


def seed(client: TestClient) -> dict:
    response = client.post("/v1/datasets", files={"file": ("heart", HEART.read_bytes())})
    assert response.status_code == 201, response.text
    return response.json()


def load_schema(app):
    return schemathesis.openapi.from_asgi("/openapi.json", app)


def fuzz(
    app, max_examples: int, seed: int | None = 0, checks=None
) -> tuple[int, dict[str, str]]:
    """Run generated requests against every operation; returns (requests made, failures by
    operation). Failures are the first one hypothesis found for each operation, shrunk."""
    from hypothesis import HealthCheck, given
    from hypothesis import seed as hypothesis_seed
    from hypothesis import settings as hypothesis_settings

    schema = load_schema(app)
    calls = 0
    failures: dict[str, str] = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        if operation.path in SKIP_PATHS:
            continue

        @hypothesis_settings(
            max_examples=max_examples,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=seed is None,
        )
        @given(case=operation.as_strategy())
        def run(case):
            nonlocal calls
            calls += 1
            case.call_and_validate(checks=checks or CHECKS)

        if seed is not None:
            run = hypothesis_seed(seed)(run)
        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # the shrunk example, per operation
            failures[operation.label] = f"{type(exc).__name__}: {exc}"[:2000]
    return calls, failures
