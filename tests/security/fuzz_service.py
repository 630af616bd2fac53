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


def build_app(data_dir: Path, template: Path | None = None, auth_mode: str = "off"):
    """A service on a fresh migrated SQLite database in `data_dir`."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if template is not None:
        shutil.copy(template, data_dir / "margin.db")
    else:
        migrate.upgrade(f"sqlite:///{data_dir / 'margin.db'}")
    settings = Settings(data_dir=data_dir, max_upload_mb=1, max_request_kb=64, auth_mode=auth_mode)
    return create_app(settings)


def seed(client: TestClient) -> dict:
    response = client.post("/v1/datasets", files={"file": ("heart", HEART.read_bytes())})
    assert response.status_code == 201, response.text
    return response.json()


# schemathesis gives a call 10 s (counted while the app awaits, not while a thread of it runs); on
# a loaded CI machine an upload, parsed by the shared parser process, once took longer: these runs
# check answers, not latency
CALL_TIMEOUT_S = 60


def call_kwargs(case) -> dict:
    """The read timeout of a call: CALL_TIMEOUT_S, but an event stream keeps schemathesis's
    default (a stream is read until the timeout)."""
    return {} if case.path.endswith("/events") else {"timeout": CALL_TIMEOUT_S}


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
            case.call_and_validate(checks=checks or CHECKS, **call_kwargs(case))

        if seed is not None:
            run = hypothesis_seed(seed)(run)
        try:
            run()
        except (Exception, BaseExceptionGroup) as exc:  # the shrunk example, per operation
            failures[operation.label] = describe(exc)[:4000]
    return calls, failures


def describe(exc: BaseException) -> str:
    """The exception and, for a group (hypothesis's FlakyFailure is one), each exception in it:
    a flaky failure is otherwise reported without the failure itself."""
    text = f"{type(exc).__name__}: {exc}"
    if type(exc).__name__ == "_WrappedBaseException" and exc.__cause__ is not None:
        return text + describe(exc.__cause__)  # a BaseException in a group (pytest's Failed)
    for inner in getattr(exc, "exceptions", ()):
        text += "\n  " + describe(inner).replace("\n", "\n  ")
    return text


KEPT_TABLES = {"api_keys", "tenants", "alembic_version"}


def reset_state(app) -> None:
    """Delete every dataset, job, model and run (rows and files); keys and tenants stay."""
    from app.tables import Base

    with app.state.db.write() as session:
        for table in reversed(Base.metadata.sorted_tables):
            if table.name not in KEPT_TABLES:
                session.execute(table.delete())
    shutil.rmtree(app.state.settings.data_dir / "datasets", ignore_errors=True)
    (app.state.settings.data_dir / "datasets").mkdir()


def two_tenant_headers(app) -> list[dict[str, str]]:
    """Authorization headers of an admin key for each of two tenants."""
    from app.services import keys

    out = []
    for tenant in ("acme", "globex"):
        _, key = keys.create_key(app.state.db, tenant, f"{tenant}-fuzz", ["admin"])
        out.append({"Authorization": f"Bearer {key}"})
    return out


def fuzz_stateful(app, headers: list[dict], max_examples: int, steps: int = 8, seed=0):
    """schemathesis's stateful mode: sequences of calls linked through the ids that responses
    return (links inferred from the schema), alternating between two tenants' keys. Checks: no
    5xx, schema conformance, and no response to one tenant naming an id the other created.
    Returns (calls, failure message or None)."""
    from hypothesis import HealthCheck
    from hypothesis import settings as hypothesis_settings
    from hypothesis.stateful import run_state_machine_as_test

    schema = load_schema(app)
    owners: dict[str, int] = {}  # id -> the tenant (index in headers) that created it
    calls = 0

    class TwoTenants(schema.as_state_machine()):
        step_count = 0

        def __init__(self):
            # Each scenario starts from the same server state: hypothesis replays a scenario's
            # prefix and expects the same responses (hence the same linked steps) as before.
            super().__init__()
            reset_state(app)

        def get_call_kwargs(self, case):
            self.step_count += 1
            self.tenant = self.step_count % len(headers)
            return {"headers": headers[self.tenant], **call_kwargs(case)}

        def after_call(self, response, case):
            nonlocal calls
            calls += 1
            if response.status_code in (200, 201, 202):
                try:
                    body = response.json()
                except ValueError:
                    return
                if isinstance(body, dict) and isinstance(body.get("id"), str):
                    owners.setdefault(body["id"], self.tenant)

        def validate_response(self, response, case, additional_checks=None, **kwargs):
            # an id the request itself names may come back (a 404 saying what was not found)
            sent = repr((case.formatted_path, case.query, case.body))
            for ident, owner in owners.items():
                if owner != self.tenant and ident in response.text and ident not in sent:
                    raise AssertionError(
                        f"{case.method} {case.formatted_path} as tenant {self.tenant} answered "
                        f"{response.status_code} naming {ident!r}, created by tenant {owner}"
                    )
            case.validate_response(response, checks=CHECKS)

    try:
        run_state_machine_as_test(
            TwoTenants,
            settings=hypothesis_settings(
                max_examples=max_examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                database=None,
                derandomize=seed is not None,
            ),
        )
    except (Exception, BaseExceptionGroup) as exc:
        return calls, describe(exc)[:4000]
    return calls, None
