"""Logging for every role: text lines (the default) or JSON objects (LOG_FORMAT=json), each with
the id of the request (X-Request-ID, made up when a client sends none) and of the job it concerns.

The ids live in context variables: `RequestId` sets the request's for everything the request does
(threads it starts inherit it), `job_context` the job's while a worker runs one; a logging filter
copies them onto every record, so any logger's lines carry them without passing them along.
"""

from __future__ import annotations

import logging
import re
import uuid
from contextlib import contextmanager
from contextvars import ContextVar

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
request_id: ContextVar[str | None] = ContextVar("margin_request_id", default=None)
job_id: ContextVar[str | None] = ContextVar("margin_job_id", default=None)
_VALID_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")


class ContextIds(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        record.job_id = job_id.get()
        return True


def configure(log_format: str = "text", level: int = logging.INFO) -> None:
    """Set up the root logger of this process (every role calls it once, at start)."""
    handler = logging.StreamHandler()
    handler.addFilter(ContextIds())
    if log_format == "json":
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(job_id)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    if log_format == "json":  # uvicorn's own loggers write through the root handler
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True


@contextmanager
def job_context(job: str):
    token = job_id.set(job)
    try:
        yield
    finally:
        job_id.reset(token)


class RequestId:
    """ASGI middleware: the request's id (the client's X-Request-ID when it is a plain token,
    else a new one) for its log lines, and echoed in the response's X-Request-ID."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = dict(scope.get("headers") or []).get(b"x-request-id", b"").decode("latin-1")
        rid = sent if _VALID_ID.match(sent) else uuid.uuid4().hex
        token = request_id.set(rid)

        async def send_with_id(message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)
