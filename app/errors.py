"""Errors as RFC 7807 problem documents (`application/problem+json`).

Services raise `ProblemError`; the handlers below turn it, FastAPI's validation errors and
Starlette's HTTP errors into problem documents. Unexpected exceptions become a plain 500 whose body
names no file, line or internal path (the traceback goes to the server log only).
"""

from __future__ import annotations

import difflib
import json
import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.db import is_disk_full, is_nul_text, is_unavailable
from app.storage import StorageUnavailable

PROBLEM_JSON = "application/problem+json"
MAX_LISTED_ERRORS = 20  # validation errors described in a response; the rest are counted
log = logging.getLogger("margin.api")


class ProblemError(Exception):
    """An error with an HTTP status, a short title, a human-readable detail and extra members."""

    def __init__(self, status: int, title: str, detail: str | None = None, **extra: Any):
        super().__init__(detail or title)
        self.status = status
        self.title = title
        self.detail = detail
        self.extra = extra
        self.headers: dict[str, str] = extra.pop("headers", None) or {}


class EchoingJSONResponse(JSONResponse):
    """JSON for an error, whose text may echo what the client sent: a lone surrogate there
    (which UTF-8 cannot hold) is written as its escape instead of failing the response."""

    def render(self, content: Any) -> bytes:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        return text.encode("utf-8", errors="backslashreplace")


def problem_response(
    status: int,
    title: str | None = None,
    detail: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "title": title or HTTPStatus(status).phrase,
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    return EchoingJSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


MLFLOW_CODES = {
    400: "BAD_REQUEST", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
    404: "RESOURCE_DOES_NOT_EXIST", 413: "REQUEST_LIMIT_EXCEEDED", 415: "BAD_REQUEST",
    422: "INVALID_PARAMETER_VALUE", 429: "REQUEST_LIMIT_EXCEEDED", 503: "TEMPORARILY_UNAVAILABLE",
}  # fmt: skip


def protocol_of(path: str) -> str:
    """Whose error shape a path answers with: "v2" (the Open Inference Protocol's
    ``{"error": ...}``), "mlflow" (``{"error_code", "message"}``) or "problem" (RFC 7807)."""
    if path.startswith("/v2/") or path == "/v2":
        return "v2"
    if path.startswith("/v1/models/") and path.endswith("/invocations"):
        return "mlflow"
    return "problem"


def error_response(
    path: str,
    status: int,
    title: str | None = None,
    detail: str | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    """An error in the shape of the path's protocol (see `protocol_of`)."""
    kind = protocol_of(path)
    message = detail or title or HTTPStatus(status).phrase
    if kind == "v2":
        return EchoingJSONResponse({"error": message}, status_code=status, headers=headers)
    if kind == "mlflow":
        body = {"error_code": MLFLOW_CODES.get(status, "INTERNAL_ERROR"), "message": message}
        return EchoingJSONResponse(body, status_code=status, headers=headers)
    return problem_response(status, title, detail, headers=headers, **extra)


def field_path(loc: tuple | list) -> str:
    """Dotted name of a field from a validation error location, without the 'body' prefix."""
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    return ".".join(parts) or "(request)"


def describe_validation_errors(
    errors: list[dict[str, Any]], known: dict[tuple, list[str]] | None = None
) -> list[dict[str, Any]]:
    """The field and message of each of the first MAX_LISTED_ERRORS errors. `known` maps a
    location prefix (without 'body') to the fields allowed there, so that an unknown field gets
    a "did you mean" suggestion. The rest are only counted (`errors_detail`): a body of 120,000
    unknown fields cost a suggestion search each, seconds on the event loop, and a 7 MB answer."""
    out = []
    for err in errors[:MAX_LISTED_ERRORS]:
        entry = {"field": field_path(err.get("loc", ())), "message": err.get("msg", "invalid")}
        if err.get("type") == "model_type":  # pydantic's text names our class (SearchSpec)
            entry["message"] = "Input should be an object"
        if err.get("type") == "extra_forbidden":
            entry["message"] = "unknown field" + _suggestion(err.get("loc", ()), known or {})
        elif err.get("type") != "missing" and _short_scalar(err.get("input")):
            entry["message"] += f" (got {err['input']!r})"
        out.append(entry)
    return out


def errors_detail(described: list[dict[str, Any]], total: int) -> str:
    """The described errors in one line, and how many of the `total` were not described."""
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in described)
    unlisted = total - len(described)
    return detail + (f"; and {unlisted} more" if unlisted > 0 else "")


def _suggestion(loc: tuple | list, known: dict[tuple, list[str]]) -> str:
    """'; did you mean 'C'?' for a misspelt field, comparing names without case first."""
    parts = [p for p in loc if p != "body"]
    if not parts:
        return ""
    name, where = str(parts[-1]), tuple(parts[:-1])
    allowed = known.get(where, [])
    by_case = [a for a in allowed if a.lower() == name.lower()]
    close = by_case or difflib.get_close_matches(name, allowed, n=1, cutoff=0.6)
    if not close:
        lowered = {a.lower(): a for a in allowed}
        close = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), 1)]
    return f"; did you mean '{close[0]}'?" if close else ""


def _short_scalar(value: Any) -> bool:
    if isinstance(value, str):
        return len(value) <= 60
    return isinstance(value, int | float | bool) or value is None


async def _problem_error(request: Request, exc: ProblemError) -> JSONResponse:
    return error_response(
        request.url.path, exc.status, exc.title, exc.detail, headers=exc.headers, **exc.extra
    )


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    all_errors = exc.errors()
    errors = describe_validation_errors(all_errors, _body_fields(request))
    detail = errors_detail(errors, len(all_errors))
    status = 422 if protocol_of(request.url.path) == "problem" else 400
    return error_response(request.url.path, status, "Invalid request", detail, errors=errors)


def _body_fields(request: Request) -> dict[tuple, list[str]]:
    """The top-level fields of the route's JSON body model, for suggestions."""
    field = getattr(request.scope.get("route"), "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    fields = getattr(model, "model_fields", None)
    return {(): list(fields)} if fields else {}


def _unreadable_json(exc: StarletteHTTPException) -> str | None:
    """Why `json` could not read a body, where it raised something else than a JSON error:
    FastAPI then answers a 400 naming nothing ("There was an error parsing the body")."""
    cause = exc.__cause__
    if exc.status_code != 400 or cause is None:
        return None
    if type(cause) is ValueError and "integer string conversion" in str(cause):
        return "the body holds an integer of more than 4300 digits, which no field takes"
    if isinstance(cause, RecursionError):
        return "the body's lists or objects are nested too deeply to read"
    return None


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    unreadable = _unreadable_json(exc)
    if unreadable is not None:
        status = 422 if protocol_of(request.url.path) == "problem" else 400
        return error_response(request.url.path, status, "Invalid request", unreadable)
    detail = exc.detail if isinstance(exc.detail, str) else None
    headers = getattr(exc, "headers", None)
    return error_response(request.url.path, exc.status_code, None, detail, headers=headers)


DB_RETRY_AFTER_S = 5
NUL_DETAIL = "text may not contain the NUL character (U+0000, %00 in a URL)"
DISK_FULL_DETAIL = "the server's disk is full: nothing was changed; retry once space is freed"


async def _database_error(request: Request, exc: Exception) -> JSONResponse:
    """The database is unreachable (restarting, connections dropped), too busy, or no pooled
    connection came free in time: 503, so that clients retry; the service recovers by itself once
    the database is back. Its disk is full: 507, with nothing changed. A text value it cannot
    store (a NUL character in a JSON string or form field): 422, the transaction rolled back."""
    if is_nul_text(exc):
        return error_response(request.url.path, 422, "Invalid request", NUL_DETAIL)
    if not (is_disk_full(exc) or is_unavailable(exc)):
        return await _unexpected(request, exc)
    log.warning("database error on %s %s: %s", request.method, request.url.path, exc)
    return database_problem(exc)


def database_problem(exc: Exception) -> JSONResponse:
    """507 for a full disk, 503 with Retry-After for an unavailable database, 500 for any other
    database error (also for code outside the exception handlers, such as the auth gate)."""
    if is_disk_full(exc):
        return problem_response(507, "Insufficient storage", DISK_FULL_DETAIL)
    if not is_unavailable(exc):
        log.error("database error: %s", exc)
        return problem_response(500, "Internal Server Error", "an unexpected error occurred")
    return problem_response(
        503,
        "Service Unavailable",
        "the database is unavailable; retry shortly",
        headers={"Retry-After": str(DB_RETRY_AFTER_S)},
    )


async def _storage_error(request: Request, exc: Exception) -> JSONResponse:
    """The object store did not answer within STORAGE_TIMEOUT_S: 503; a write stored nothing
    (a read is told only to retry: "nothing was stored" misled a download)."""
    log.warning("object storage error on %s %s: %s", request.method, request.url.path, exc)
    reading = request.method in ("GET", "HEAD")
    return problem_response(
        503,
        "Service Unavailable",
        "the object storage is unavailable"
        + ("" if reading else ": nothing was stored")
        + "; retry shortly",
        headers={"Retry-After": str(DB_RETRY_AFTER_S)},
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(
        request.url.path, 500, "Internal Server Error", "an unexpected error occurred"
    )


def install_handlers(app: FastAPI) -> None:
    app.add_exception_handler(ProblemError, _problem_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(DBAPIError, _database_error)
    app.add_exception_handler(PoolTimeout, _database_error)
    app.add_exception_handler(StorageUnavailable, _storage_error)
    app.add_exception_handler(Exception, _unexpected)
