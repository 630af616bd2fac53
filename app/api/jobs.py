"""Job routes: create, list, show, progress (JSON and Server-Sent Events), cancel, history."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from sqlalchemy import select
from sse_starlette import EventSourceResponse

from app.deps import DatabaseDep, JobDep, SessionDep, SettingsDep
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
from app.services import jobs as service
from app.services.idempotency import check_key
from app.tables import TERMINAL_STATUSES, Job, JobProgress

router = APIRouter(tags=["jobs"])
FEED_SAFETY_S = 15.0  # a watcher reads the database itself after this long without a notice


@router.post("/jobs", status_code=status.HTTP_202_ACCEPTED, response_model=JobOut)
def create_job(
    body: JobCreate,
    request: Request,
    response: Response,
    db: DatabaseDep,
    idempotency_key: Annotated[str | None, Header()] = None,
):
    """Queue a training job for `estimator` on a stored dataset."""
    job, created = service.create_job(
        db,
        request.app.state.queue,
        body,
        check_key(idempotency_key),
        request.app.state.settings.dask_scheduler_address,
    )
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    if not created:
        response.headers["Idempotent-Replayed"] = "true"
    return service.job_view(job)


@router.get("/jobs", response_model=Page[JobOut])
def list_jobs(
    session: SessionDep,
    status: Annotated[list[JobStatusName] | None, Query()] = None,
    dataset_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    items, nxt = service.list_jobs(session, limit, cursor, status, dataset_id)
    return {"items": [service.job_view(j) for j in items], "next": nxt}


@router.get("/jobs/{job_id}", response_model=JobOut)
def get_job(job: JobDep):
    return service.job_view(job)


@router.get("/jobs/{job_id}/progress", response_model=ProgressPage)
def job_progress(
    job: JobDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    cursor: str | None = None,
):
    """The job's progress records, one per outer iteration written (oldest first)."""
    items, nxt = service.progress_records(session, job, limit, cursor)
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
    return service.job_view(job)


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
    """Progress records as Server-Sent Events (`progress`), then one `end` event with the job."""
    poll = min(settings.progress_interval_s, 0.25)
    start = int(last_event_id) if last_event_id and last_event_id.isdigit() else 0

    def fetch(after: int):
        with db.session() as session:
            current = session.get(Job, job.id)
            attempt = max(current.attempt, 1) if current else 1
            rows = session.scalars(
                select(JobProgress)
                .where(JobProgress.job_id == job.id, JobProgress.attempt == attempt)
                .where(JobProgress.id > after)
                .order_by(JobProgress.id)
                .limit(1000)
            ).all()
            return rows, current

    async def polled():  # SQLite: no notifications, so look a few times a second
        after = start
        while True:
            rows, current = await asyncio.to_thread(fetch, after)
            for row in rows:
                after = row.id
                yield _progress_event(row)
            if current is None or (current.status in TERMINAL_STATUSES and len(rows) < 1000):
                yield _end_event(current)
                return
            if not rows:
                await asyncio.sleep(poll)

    async def notified():  # PostgreSQL: woken by LISTEN/NOTIFY, rows read once per process
        feed = feeds.subscribe(job.id, start)
        try:
            after = start
            rows, current = await asyncio.to_thread(fetch, after)  # what came before
            while True:
                for row in rows:
                    after = row.id
                    yield _progress_event(row)
                if current is None or (current.status in TERMINAL_STATUSES and len(rows) < 1000):
                    yield _end_event(current)
                    return
                if len(rows) >= 1000:  # still catching up
                    rows, current = await asyncio.to_thread(fetch, after)
                    continue
                changed = await feed.wait(FEED_SAFETY_S)
                rows = feed.since(after) if changed else None
                if rows is None:  # left the feed, or no notice for long: read it directly
                    rows, current = await asyncio.to_thread(fetch, after)
                elif feed.current is not None:
                    current = feed.current
        finally:
            feeds.unsubscribe(feed)

    feeds = getattr(request.app.state, "job_feeds", None)
    return EventSourceResponse(polled() if feeds is None else notified(), ping=15)


def _progress_event(row: JobProgress) -> dict:
    return {"event": "progress", "id": str(row.id), "data": json.dumps(row.as_record())}


def _end_event(current: Job | None) -> dict:
    view = JobOut.model_validate(service.job_view(current)) if current else None
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
