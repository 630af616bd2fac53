"""The OpenAPI document tells the truth: it is valid, its operation ids are usable names, every
error a /v1 route answers is documented as the problem document actually sent, the security
scheme and the event stream are declared, every request body has an example; a walk over every
operation checks that each status it returns is documented with the right media type and
schema; and /docs and /redoc load only assets served by the package."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from openapi_spec_validator import validate

from app.config import Settings
from app.main import create_app
from tests.security import fuzz_service

ERRORS = {"401", "403", "404", "409", "410", "413", "415", "422", "429"}


@pytest.fixture(scope="module")
def document(tmp_path_factory, sqlite_template):
    app = fuzz_service.build_app(tmp_path_factory.mktemp("openapi"), sqlite_template)
    with TestClient(app, base_url="http://localhost") as client:
        return client.get("/openapi.json").json()


def operations(doc):
    for path, item in doc["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_the_document_is_valid_openapi(document):
    validate(document)


def test_operation_ids_are_plain_unique_names(document):
    ids = [op["operationId"] for _, _, op in operations(document)]
    assert len(ids) == len(set(ids))
    for op_id in ids:
        assert re.fullmatch(r"[a-z][a-z_]*", op_id), op_id
        assert "v1" not in op_id and not op_id.endswith(("_get", "_post", "_delete")), op_id
    for expected in ("upload_dataset", "create_job", "get_job", "cancel_job", "predict",
                     "stream_job_events", "export_model", "evaluate_model", "list_models"):
        assert expected in ids


def test_every_v1_error_is_a_problem_document(document):
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas and "ValidationError" not in schemas
    assert set(schemas["Problem"]["required"]) == {"type", "title", "status"}
    seen = set()
    for path, method, op in operations(document):
        if not path.startswith("/v1/") or path.endswith("/invocations"):
            continue
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                seen.add(status)
                assert list(response["content"]) == ["application/problem+json"], (path, status)
                ref = response["content"]["application/problem+json"]["schema"]["$ref"]
                assert ref == "#/components/schemas/Problem"
        assert {"401", "403"} <= set(op["responses"]), (path, method)
        if "{" in path:
            assert "404" in op["responses"], path
    assert ERRORS <= seen


def test_protocol_routes_document_their_own_error_shapes(document):
    """The inference protocol's routes answer {"error"}, MLflow's invocations {"error_code",
    "message"}; neither is a problem document."""
    seen = 0
    for path, _, op in operations(document):
        v2, mlflow = path.startswith("/v2/models"), path.endswith("/invocations")
        if not (v2 or mlflow):
            continue
        required = ["error"] if v2 else ["error_code", "message"]
        for status, response in op["responses"].items():
            if status.startswith(("4", "5")):
                seen += 1
                schema = response["content"]["application/json"]["schema"]
                assert schema["required"] == required, (path, status)
        assert {"401", "403", "404"} <= set(op["responses"]), path
    assert seen >= 40


def test_bearer_security_scheme_on_every_v1_operation(document):
    scheme = document["components"]["securitySchemes"]["HTTPBearer"]
    assert scheme == {**scheme, "type": "http", "scheme": "bearer"}
    for path, _, op in operations(document):
        if path.startswith(("/v1/", "/v2/models")):
            assert {"HTTPBearer": []} in op["security"], path
            assert {} in op["security"]  # the loopback service answers without a key
        else:
            assert "security" not in op


def test_keys_required_drops_the_anonymous_alternative(tmp_path, sqlite_template):
    import shutil

    shutil.copy(sqlite_template, tmp_path / "margin.db")
    app = create_app(Settings(data_dir=tmp_path, auth_mode="required"))
    with TestClient(app, base_url="http://localhost") as client:
        doc = client.get("/openapi.json").json()
    assert doc["paths"]["/v1/datasets"]["get"]["security"] == [{"HTTPBearer": []}]


def test_event_stream_and_examples(document):
    events = document["paths"]["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"]
    assert list(events["content"]) == ["text/event-stream"]
    bodies = 0
    for path, method, op in operations(document):
        for media, content in op.get("requestBody", {}).get("content", {}).items():
            bodies += 1
            assert "example" in content or "examples" in content, (path, method, media)
    assert bodies >= 6


def test_the_event_streams_records_are_documented_with_a_searchs_path(document):
    content = document["paths"]["/v1/jobs/{job_id}/events"]["get"]["responses"]["200"]["content"]
    data = content["text/event-stream"]["x-event-data"]
    assert data == {"progress": {"$ref": "#/components/schemas/ProgressRecord"},
                    "end": {"$ref": "#/components/schemas/JobOut"}}
    record = document["components"]["schemas"]["ProgressRecord"]["properties"]
    for name in ("stage", "fold", "folds_total", "c_index", "cs_total", "C", "solves_done",
                 "solves_total", "percent", "gap"):
        assert record[name]["description"], name
    example = content["text/event-stream"]["examples"]["search"]["value"]
    assert '"solves_done": 7, "solves_total": 13, "percent": 53.8' in example


def test_docs_pages_load_only_local_assets(document, tmp_path, sqlite_template):
    app = fuzz_service.build_app(tmp_path / "d", sqlite_template)
    with TestClient(app, base_url="http://localhost") as client:
        for page in ("/docs", "/redoc"):
            html = client.get(page).text
            assets = re.findall(r'(?:src|href)="([^"]+)"', html)
            assert assets, page
            for url in assets:
                assert url.startswith("/"), f"{page} loads {url} from elsewhere"
                response = client.get(url)
                assert response.status_code == 200 and len(response.content) > 500, url
            assert "https://" not in html.replace("https://fastapi.tiangolo.com", "")


def test_every_status_of_every_operation_is_documented(tmp_path, sqlite_template, shared_parser):
    """schemathesis over every operation: status code, media type and body schema of each
    response must be documented (and no 5xx)."""
    from schemathesis.checks import (
        content_type_conformance,
        not_a_server_error,
        response_schema_conformance,
        status_code_conformance,
    )

    app = fuzz_service.build_app(tmp_path / "data", sqlite_template)
    app.state.parser = shared_parser
    checks = [not_a_server_error, status_code_conformance, content_type_conformance,
              response_schema_conformance]
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        fuzz_service.seed(client)
        calls, failures = fuzz_service.fuzz(app, 12, checks=checks)
    assert calls >= 100
    assert failures == {}, "\n\n".join(f"{op}: {msg}" for op, msg in failures.items())


def test_unauthenticated_answers_conform_too(tmp_path, sqlite_template):
    """With keys required and none sent, every /v1 operation answers a documented 401."""
    import shutil

    from schemathesis.checks import content_type_conformance, response_schema_conformance

    shutil.copy(sqlite_template, tmp_path / "margin.db")
    app = create_app(Settings(data_dir=tmp_path, auth_mode="required"))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False):
        calls, failures = fuzz_service.fuzz(
            app, 3, checks=[content_type_conformance, response_schema_conformance]
        )
    assert calls >= 20 and failures == {}
