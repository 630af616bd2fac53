"""The OpenAPI document, made to tell the truth, and the docs pages that render it offline.

FastAPI derives most of the document from the routes; this module adds what it cannot know, in
one place rather than on every route:

- operation ids a client generator can use: the route function's name (`upload_dataset`,
  `create_job`, ...), with a few renamed in `RENAMES`;
- the errors each operation really returns, as the `application/problem+json` document that
  `app.errors` sends (`PROBLEM_SCHEMA`), instead of FastAPI's `HTTPValidationError`: the
  statuses every /v1 route can answer (`error_statuses`) plus each operation's own (`EXTRA`);
  the inference protocol (/v2) and MLflow's invocations keep their protocols' own error
  shapes, documented on their routes (`app.errors.protocol_of`);
- the `HTTPBearer` security scheme (optional where the service runs without keys);
- `text/event-stream` on the live-progress route, with the schemas of its events' data under
  `x-event-data`, and an example on every request body;
- `/docs` and `/redoc` pages whose scripts come from the package (app/ui/static/vendor), so
  that they work on a machine without internet.
"""

from __future__ import annotations

import copy
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import HTMLResponse

from app.errors import PROBLEM_JSON, protocol_of

VENDOR = "/ui/static/vendor"
SECURITY_SCHEME = "HTTPBearer"

RENAMES = {
    "job_progress": "get_job_progress",
    "job_events": "stream_job_events",
    "healthz": "get_health",
    "readyz": "get_readiness",
}


def operation_id(route: APIRoute) -> str:
    """`generate_unique_id_function` of the app: the route function's name."""
    return RENAMES.get(route.name, route.name)


PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": "An RFC 7807 problem document; `detail` names the field or line at fault.",
    "type": "object",
    "required": ["type", "title", "status"],
    "properties": {
        "type": {"type": "string", "description": "always about:blank"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "errors": {
            "type": "array",
            "description": "one entry per invalid field (422)",
            "items": {
                "type": "object",
                "required": ["field", "message"],
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
        "line": {"type": ["integer", "null"], "description": "the file line at fault"},
        "limit_bytes": {"type": "integer", "description": "the limit that was exceeded (413)"},
    },
    "additionalProperties": True,
}

DESCRIPTIONS = {
    400: "the upload was interrupted",
    401: "no API key, or an unknown or revoked one (`WWW-Authenticate: Bearer`)",
    403: "the API key lacks the scope this operation needs",
    404: "no such resource (or another tenant's)",
    409: "the resource is in a state that forbids this (the detail says which)",
    410: "the result is gone",
    413: "the request body, upload, expanded upload or batch is over its limit",
    415: "the body's media type is not one this operation reads",
    422: "an invalid parameter, body, file or instance (the detail names it)",
    429: "over the tenant's quota, or (uploads) its MAX_UPLOADS_PER_TENANT or the server's "
    "MAX_UPLOADS_IN_FLIGHT uploads are in progress (`Retry-After` says when to retry)",
    503: "the database is unavailable, or (job events) the process serves MAX_EVENT_STREAMS "
    "streams (`Retry-After` says when to retry)",
    507: "the server's disk is full; nothing was kept",
}

# Statuses beyond those of every /v1 route, by operation id.
EXTRA: dict[str, tuple[int, ...]] = {
    "upload_dataset": (400, 429, 507),
    "delete_dataset": (409,),
    "create_job": (404, 429),
    "cancel_job": (409,),
    "predict": (415,),
    "delete_model": (409,),
    "evaluate_model": (429,),
    "create_registered_model": (409,),
    "delete_model_version": (409,),
    "get_prediction_run": (409, 410),
    "get_readiness": (503,),
}

REQUEST_EXAMPLES: dict[str, Any] = {
    "create_job": {
        "dataset_id": "ds_01hzx3k9q6m2a7",
        "estimator": "LinearSVC",
        "params": {"C": 1.0, "loss": "hinge", "tol": 0.01},
    },
    "create_prediction_run": {"dataset_id": "ds_01hzx3k9q6m2a7"},
    "create_registered_model": {"name": "fraud", "description": "card fraud", "tags": {}},
    "create_model_version": {"model_id": "mdl_01hzx3k9q6m2a7"},
    "set_model_alias": {"version": 2},
    "update_registered_model": {"description": "card fraud, EU", "tags": {"team": "risk"}},
    "update_model_version": {"tags": {"validated": "yes"}},
    "evaluate_model": {"dataset_id": "ds_01hzx3k9q6m2a7"},
}
EXAMPLE_BY_MEDIA = {
    "multipart/form-data": {"file": "+1 1:0.5 3:1\n-1 2:0.25\n", "name": "a9a"},
    "application/octet-stream": "+1 1:0.5 3:1\n-1 2:0.25\n",
    "text/plain": "+1 1:0.5 7:1\n3:0.25\n",
}


def error_statuses(op_id: str, path: str, operation: dict[str, Any]) -> list[int]:
    """The error statuses an operation can answer."""
    statuses = set(EXTRA.get(op_id, ()))
    if path.startswith("/v1/"):
        statuses |= {401, 403, 503}
        validated = [p for p in operation.get("parameters", []) if p.get("in") != "path"]
        if validated or operation.get("requestBody"):
            statuses.add(422)
        if "{" in path:
            statuses.add(404)
        if operation.get("requestBody"):
            statuses.add(413)
    return sorted(statuses)


def _document_errors(op_id: str, path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    problem = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    statuses = error_statuses(op_id, path, operation)
    for code in [c for c in responses if c[0] in "45" and int(c) not in statuses]:
        del responses[code]  # FastAPI's default 422 on routes that validate nothing
    for status in statuses:
        entry = responses.setdefault(str(status), {})
        if entry.get("description") in (None, "", "Validation Error"):
            entry["description"] = DESCRIPTIONS[status]
        entry["content"] = copy.deepcopy(problem)


def _add_examples(op_id: str, operation: dict[str, Any]) -> None:
    for media, content in operation.get("requestBody", {}).get("content", {}).items():
        if "example" in content or "examples" in content:
            continue
        example = REQUEST_EXAMPLES.get(op_id, EXAMPLE_BY_MEDIA.get(media))
        if example is not None:
            content["example"] = example


SEARCH_EVENT_EXAMPLE = (
    'event: progress\nid: 42\ndata: {"iteration": 5, "elapsed_s": 0.01, "gap": 0.08, '
    '"stage": "path", "fold": 1, "folds_total": 3, "c_index": 2, "cs_total": 4, "C": 1.0, '
    '"solves_done": 7, "solves_total": 13, "percent": 53.8, ...}\n\n'
)


def _event_stream(operation: dict[str, Any]) -> None:
    operation["responses"]["200"] = {
        "description": "`progress` events, each one progress record as JSON (schema "
        "`ProgressRecord`, the same as the items of /progress), with the record's id as the "
        "event id (send `Last-Event-ID` to resume); then one `end` event with the job "
        "(`JobOut`). A search job's every record says where on its path it is: stage, fold of "
        "folds_total, c_index of cs_total, C, solves_done of solves_total and the path's "
        "percent, beside the current solve's gap",
        "content": {
            "text/event-stream": {
                "schema": {"type": "string"},
                "x-event-data": {
                    "progress": {"$ref": "#/components/schemas/ProgressRecord"},
                    "end": {"$ref": "#/components/schemas/JobOut"},
                },
                "examples": {
                    "single solve": {
                        "value": 'event: progress\nid: 7\ndata: {"iteration": 3, "elapsed_s": '
                        '0.04, "gap": 0.012, ...}\n\nevent: end\ndata: {"id": "job_...", '
                        '"status": "succeeded", ...}\n\n'
                    },
                    "search": {"value": SEARCH_EVENT_EXAMPLE},
                },
            }
        },
    }


def build(app: FastAPI, keys_optional: bool) -> dict[str, Any]:
    """FastAPI's document with the additions above."""
    from fastapi.openapi.utils import get_openapi

    doc = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Problem"] = PROBLEM_SCHEMA
    components["securitySchemes"] = {
        SECURITY_SCHEME: {
            "type": "http",
            "scheme": "bearer",
            "description": "an API key (`margin keys create`); not needed on a loopback "
            "service with AUTH_MODE=auto",
        }
    }
    security = [{SECURITY_SCHEME: []}] + ([{}] if keys_optional else [])
    for path, item in doc.get("paths", {}).items():
        for operation in item.values():
            op_id = operation["operationId"]
            if path.startswith(("/v1/", "/v2/models")):
                operation["security"] = security
            if op_id == "stream_job_events":
                _event_stream(operation)
            if protocol_of(path) == "problem":
                _document_errors(op_id, path, operation)
            elif operation.get("responses", {}).get("422", {}).get("description") == (
                "Validation Error"
            ):
                del operation["responses"]["422"]  # FastAPI's; these routes validate no fields
            _add_examples(op_id, operation)
    return doc


def install(app: FastAPI, keys_optional: bool) -> None:
    """Serve the document above at /openapi.json and the docs pages from local assets."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build(app, keys_optional)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    oauth_redirect = "/docs/oauth2-redirect"

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            oauth2_redirect_url=f"{root}{oauth_redirect}",
            swagger_js_url=f"{root}{VENDOR}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{VENDOR}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{root}{VENDOR}/swagger-ui/favicon-32x32.png",
            swagger_ui_parameters={"persistAuthorization": True, "validatorUrl": None},
        )

    @app.get(oauth_redirect, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return get_swagger_ui_oauth2_redirect_html()

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        return get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{VENDOR}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{root}{VENDOR}/swagger-ui/favicon-32x32.png",
            with_google_fonts=False,
        )
