"""Job routes: create, list, show, progress (JSON and Server-Sent Events), cancel, history."""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections.abc import Iterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy import select
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError

from app import tenancy
from app.auth import client_address
from app.db import Database
from app.deps import DatabaseDep, JobDep, SessionDep, SettingsDep
from app.errors import ProblemError
from app.jobs import lifecycle
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page
from app.schemas.jobs import (
    JobCreate,
    JobEventOut,
    JobHistory,
    JobOut,
    JobStatusName,
    ProgressPage,
)
from app.services import job_views
from app.services import jobs as service
from app.services.idempotency import check_key
from app.streaming import drop_connection
from app.tables import TERMINAL_STATUSES, Job, JobProgress

router = APIRouter(tags=["jobs"])
log = logging.getLogger("margin.api")
FEED_SAFETY_S = 15.0  # a watcher reads the database itself after this long without a notice
PAGE_ROWS = 1000  # progress rows read from the database at once


@router.post("/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def create_job(
    body: JobCreate,
    request: Request,
    response: Response,
    db: DatabaseDep,
    idempotency_key: Annotated[
        str | None,
        Header(
            description="a retry with this key returns the job it created (header "
            "Idempotent-Replayed: true) for IDEMPOTENCY_TTL_HOURS; bodies are compared as the "
            "job they make (params validated, defaults filled in: C 1 and 1.0 are one), "
            "another job under the key is a 422"
        ),
    ] = None,
):
    """Queue a training job for `estimator` on a stored dataset."""
    settings = request.app.state.settings
    job, created = service.create_job(
        db, request.app.state.queue, body, check_key(idempotency_key), settings
    )
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    with db.session() as session:
        waiting = job_views.waiting_reason(session, job)
    return job_views.job_view(job, settings.max_job_seconds, waiting)


@router.get("/jobs", response_model=Page[JobOut])
def list_jobs(
    session: SessionDep,
    settings: SettingsDep,
    status: Annotated[list[JobStatusName] | None, Query()] = None,
    dataset_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    items, nxt = job_views.list_jobs(session, limit, cursor, status, dataset_id)
    bound = settings.max_job_seconds
    waiting = job_views.waiting_reasons(session, items)
    views = [job_views.job_view(j, bound, w) for j, w in zip(items, waiting, strict=True)]
    return {"items": views, "next": nxt}


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job: JobDep, session: SessionDep, settings: SettingsDep):
    waiting = job_views.waiting_reason(session, job)
    return job_views.job_view(job, settings.max_job_seconds, waiting)


@router.get("/jobs/{job_id}/progress", response_model=ProgressPage)
def job_progress(
    job: JobDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: str | None = None,
):
    """The job's progress records, one per outer iteration written (oldest first)."""
    items, nxt = job_views.progress_records(session, job, limit, cursor)
    return {"items": [r.as_record() for r in items], "next": nxt}


@router.post("/jobs/{job_id}/cancel", response_model=JobOut)
def cancel_job(
    job_id: str,
    request: Request,
    response: Response,
    db: DatabaseDep,
    keep_model: Annotated[
        bool,
        Query(description="store the running solve's current iterate as a model (unconverged)"),
    ] = False,
):
    """Cancel a queued job, or stop a running one within one outer iteration."""
    job = service.cancel_job(db, request.app.state.queue, job_id, keep_model)
    if job.status not in TERMINAL_STATUSES:
        response.status_code = status.HTTP_202_ACCEPTED
    return job_views.job_view(job, request.app.state.settings.max_job_seconds)


@router.delete("/jobs/{job_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_job(job_id: str, db: DatabaseDep, settings: SettingsDep):
    """Delete an ended job with its progress records and history (its model stays, with
    `job_id` null); 409 while it is queued or running."""
    service.delete_job(db, settings, job_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/jobs/{job_id}/events", response_class=EventSourceResponse)
async def job_events(
    job: JobDep,
    request: Request,
    db: DatabaseDep,
    settings: SettingsDep,
    last_event_id: Annotated[str | None, Header()] = None,
):
    """Progress records as Server-Sent Events (`progress`), then one `end` event with the job;
    503 while this API process already serves MAX_EVENT_STREAMS streams, 429 while it serves
    MAX_EVENT_STREAMS_PER_TENANT of the caller's tenant. A stream whose API key is revoked is
    closed within twice AUTH_CACHE_S (AUTH_CACHE_S + 1 s under a second: its key may stay
    cached that long, then is asked every AUTH_CACHE_S, at most once a second), without an
    `end` event."""
    streams = _open_streams(request.app)
    tenant = tenancy.current_tenant()
    _check_stream_room(streams, tenant, settings)
    start = _resume_after(last_event_id)
    feeds = request.app.state.job_feeds
    events = _fed_events(db, feeds, job.id, start, settings.max_job_seconds)
    alive = _key_check(request)
    if alive is not None:
        events = _while_key_lives(events, alive, max(settings.auth_cache_s, 1.0))
    stream = _counted(events, streams, tenant)
    return _EventStream(stream, ping=15, send_timeout=settings.send_timeout_s)


class _EventStream(EventSourceResponse):
    """An event stream closed when its client has read nothing for SEND_TIMEOUT_S (its buffers
    full): such a client otherwise held the stream, and its tenant's share, for as long as it
    kept the connection open. The connection is dropped (see app.streaming)."""

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.info("event stream closed: its client read nothing for %s s", self.send_timeout)
            drop_connection(scope)


def _open_streams(app) -> dict:
    """The tenant of each event stream this API process serves now, by a token of the stream."""
    streams = getattr(app.state, "event_streams", None)
    if streams is None:
        streams = app.state.event_streams = {}
    return streams


def _check_stream_room(streams: dict, tenant: str | None, settings) -> None:
    """Refuse a stream beyond the process's bound (503), or beyond the tenant's share of it
    (429), so that one tenant's watchers cannot take every stream from the others."""
    if len(streams) >= settings.max_event_streams:
        raise ProblemError(
            503, "Too many event streams",
            f"this API process already serves {len(streams)} event streams "
            "(MAX_EVENT_STREAMS); poll GET /v1/jobs/{id}/progress or retry later",
            headers={"Retry-After": "5"},
        )  # fmt: skip
    held = sum(1 for owner in streams.values() if owner == tenant)
    if held >= settings.max_event_streams_per_tenant:
        raise ProblemError(
            429, "Too many event streams",
            f"this API process already serves {held} event streams of your tenant "
            "(MAX_EVENT_STREAMS_PER_TENANT); close one, poll GET /v1/jobs/{id}/progress "
            "or retry later",
            headers={"Retry-After": "5"},
        )  # fmt: skip


def _counted(events, streams: dict, tenant: str | None):
    """`events`, holding a token in `streams` until the stream ends, fails or is dropped
    unstarted (a client gone before the first event)."""
    token = object()
    streams[token] = tenant

    async def counted():
        try:
            async for event in events:
                yield event
        finally:
            streams.pop(token, None)

    stream = counted()
    weakref.finalize(stream, streams.pop, token, None)
    return stream


def _key_check(request: Request):
    """An async callable telling whether the stream's API key still works (False once it is
    revoked), or None where the request sent no key."""
    principal = tenancy.current()
    if principal is None or principal.key_id is None:
        return None
    auth = request.app.state.auth
    header, address = request.headers.get("authorization"), client_address(request)

    async def alive() -> bool:
        try:
            await auth.principal_for(header, address)
        except ProblemError as exc:
            return exc.status != 401  # 429 or 503: not a sign that the key is gone
        except Exception:  # the database is away: the key may well be fine
            return True
        return True

    return alive


async def _while_key_lives(events, alive, every_s: float):
    """`events`, ended once `alive()` says the stream's key was revoked: asked every `every_s`
    (AUTH_CACHE_S, the bound within which a revoked key stops), events or none. A stream opened
    before the revocation otherwise went on for as long as its job, for ever while queued."""
    checked = time.monotonic()
    pending = None
    try:
        while True:
            pending = asyncio.ensure_future(anext(events))
            while not pending.done():
                left = checked + every_s - time.monotonic()
                await asyncio.wait({pending}, timeout=max(0.0, left))
                if time.monotonic() - checked >= every_s:
                    if not await alive():
                        log.info("event stream closed: its API key was revoked")
                        return
                    checked = time.monotonic()
            try:
                event = pending.result()
            except StopAsyncIteration:
                return
            yield event
    finally:
        try:
            if pending is not None and not pending.done():
                pending.cancel()
                # waited on, not awaited: awaiting it would also swallow a cancellation of this
                # task arriving meanwhile (the server ending the stream), not only `pending`'s
                await asyncio.wait({pending})
                if not pending.cancelled():
                    pending.exception()  # retrieved: an error of an ended stream is not logged
        finally:
            # a read still running was cancelled again while waited on (anyio cancels at every
            # await of a stream whose client left, and the feed's wait takes more than one turn
            # to end): closing the events under it raised "aclose(): asynchronous generator is
            # already running", so they are closed once it ends (it may end with an event,
            # which left them open)
            if pending is None or pending.done():
                await events.aclose()
            else:
                _close_after(pending, events)


_closing: set[asyncio.Task] = set()  # closes of events whose read outlived its stream


def _close_after(read: asyncio.Future, events) -> None:
    """Close `events` once `read`, its pending `anext`, has ended (and retrieve its error, so
    that an ended stream's is not logged)."""

    def close(_) -> None:
        if not read.cancelled():
            read.exception()
        task = asyncio.ensure_future(events.aclose())
        _closing.add(task)  # held until it runs: the loop keeps only a weak reference
        task.add_done_callback(_closing.discard)

    read.add_done_callback(close)


def _resume_after(last_event_id: str | None) -> int:
    """The progress id after which a reconnecting client resumes: the Last-Event-ID header when
    it is a plain decimal id in the column's range, else 0 (from the start)."""
    after = job_views.progress_id((last_event_id or "").strip())
    return 0 if after is None else after


async def _fed_events(db: Database, feeds, job_id: str, start: int, bound):
    """Woken by the job's feed (`app.services.job_feed`: notified on PostgreSQL, polled on
    SQLite), its rows read once per process for all its watchers."""
    feed = feeds.subscribe(job_id)
    try:
        after = start
        # the feed's pushes as of the last read: one landing while this stream sends events (or
        # reads) is a change still to read, not one to wait for (before, the job's last change
        # could land then, and its end event came FEED_SAFETY_S late)
        seen = feed.version
        rows, current = await asyncio.to_thread(_fetch_progress, db, job_id, after)  # before
        while True:
            after = rows[-1].id if rows else after
            for event in _events(rows, current, bound):
                yield event
            if _ended(rows, current):
                return
            if len(rows) >= PAGE_ROWS:  # still catching up
                seen = feed.version
                rows, current = await asyncio.to_thread(_fetch_progress, db, job_id, after)
                continue
            changed = await feed.wait(seen, FEED_SAFETY_S)
            seen = feed.version
            rows = feed.since(after) if changed else None
            if rows is None:  # left the feed, or no notice for long: read it directly
                rows, current = await asyncio.to_thread(_fetch_progress, db, job_id, after)
            else:  # the feed's state as read with its rows (None: the job was deleted)
                current = feed.current
    finally:
        feeds.unsubscribe(feed)


def _fetch_progress(db: Database, job_id: str, after: int) -> tuple[list[JobProgress], Job | None]:
    """Up to PAGE_ROWS progress rows of the job's current attempt after id `after`, and the job
    (None once deleted)."""
    with db.session() as session:
        current = session.get(Job, job_id)
        attempt = max(current.attempt, 1) if current else 1
        rows = session.scalars(
            select(JobProgress)
            .where(JobProgress.job_id == job_id, JobProgress.attempt == attempt)
            .where(JobProgress.id > after)
            .order_by(JobProgress.id)
            .limit(PAGE_ROWS)
        ).all()
        return rows, current


def _ended(rows: list[JobProgress], current: Job | None) -> bool:
    """Whether the stream ends with these rows: the job is gone, or it ended and a short read
    shows that no rows are left."""
    return current is None or (current.status in TERMINAL_STATUSES and len(rows) < PAGE_ROWS)


def _events(rows: list[JobProgress], current: Job | None, bound) -> Iterator[dict]:
    """The rows' progress events, then the end event if the stream ends with them."""
    for row in rows:
        yield _progress_event(row)
    if _ended(rows, current):
        yield _end_event(current, bound)


def _progress_event(row: JobProgress) -> dict:
    return {"event": "progress", "id": str(row.id), "data": json.dumps(row.as_record())}


def _end_event(current: Job | None, bound) -> dict:
    """``bound``: MAX_JOB_SECONDS, for the job's `time_bound_s`."""
    view = JobOut.model_validate(job_views.job_view(current, bound)) if current else None
    return {"event": "end", "data": view.model_dump_json() if view else "null"}


@router.get("/jobs/{job_id}/history", response_model=JobHistory)
def job_history(job: JobDep, session: SessionDep):
    """The job's status changes, oldest first: each attempt, who moved it and why."""
    items = [
        JobEventOut(
            at=e.at,
            attempt=e.attempt,
            from_status=e.from_status,
            to_status=e.to_status,
            by=lifecycle.role(e.actor),
            reason=e.reason,
        )
        for e in lifecycle.history(session, job.id)
    ]
    return {"items": items}
