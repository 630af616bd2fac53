"""The FastAPI application: routers, error handlers, health and readiness."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request

from app import auth, limits, logs, metrics, openapi, ui
from app.config import Settings, get_settings
from app.db import Database
from app.errors import install_handlers, problem_response
from app.jobs.queue import get_queue

log = logging.getLogger("margin.api")
WORKER_ALIVE_S = 15.0


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the service for `settings` (default: the environment's). Tables must exist already
    (`margin migrate`); nothing here creates them."""
    settings = settings or get_settings()
    app = FastAPI(
        title="Margin",
        version="0.1.0",
        description="Train and serve large-scale linear SVMs.",
        lifespan=_lifespan,
        docs_url=None,  # served by app.openapi from local assets
        redoc_url=None,
        generate_unique_id_function=openapi.operation_id,
    )
    _attach_state(app, settings)
    install_handlers(app)
    _add_middleware(app, settings)
    _include_routers(app)
    app.add_api_route("/healthz", healthz, methods=["GET"], tags=["health"])
    app.add_api_route("/readyz", readyz, methods=["GET"], tags=["health"])
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI):
    from app.services.sweep import sweep_partial_uploads

    settings: Settings = app.state.settings
    if settings.worker_backend == "procrastinate":
        from app.jobs import procrastinate_schema

        procrastinate_schema.check(app.state.db)  # a mismatch stops the start, with why
    try:
        sweep_partial_uploads(settings, app.state.db)
    except Exception:  # a sweep must never keep the API from starting
        log.exception("sweeping partial uploads failed")
    app.state.parser.warm()
    try:
        yield
    finally:
        app.state.job_feeds.stop()
        app.state.parser.shutdown()
        app.state.db.dispose()


def _attach_state(app: FastAPI, settings: Settings) -> None:
    """The app's shared objects: settings, database, job queue, upload and evaluation slots,
    parsers, job feeds."""
    from app.services.job_feed import JobFeeds, PolledJobFeeds
    from app.services.parser_pool import ParserPool
    from app.services.tenant_slots import Bound, TenantSlots, parser_count

    settings.ensure_dirs()
    app.state.settings = settings
    app.state.db = Database(settings.db_url, pool_timeout=settings.db_pool_timeout_s)
    app.state.queue = get_queue(settings)
    app.state.upload_slots = TenantSlots(
        "uploads",
        Bound(settings.max_uploads_per_tenant, "MAX_UPLOADS_PER_TENANT"),
        Bound(settings.max_uploads_in_flight, "MAX_UPLOADS_IN_FLIGHT"),
    )
    app.state.parser = ParserPool(parser_count(settings.max_uploads_in_flight))
    # a million rows of a few classes score within a second or two
    app.state.evaluation_slots = TenantSlots(
        "evaluations",
        Bound(settings.max_evaluations_per_tenant, "MAX_EVALUATIONS_PER_TENANT"),
        retry_after_s=2,
    )
    app.state.job_feeds = (
        PolledJobFeeds(app.state.db, min(settings.progress_interval_s, 0.25))
        if settings.is_sqlite
        else JobFeeds(app.state.db)
    )


def _add_middleware(app: FastAPI, settings: Settings) -> None:
    """Each one added wraps those before it: the last added sees a request first."""
    app.add_middleware(limits.BodySizeLimit, limits=limits.RouteLimits(settings))
    auth.install(app, settings, app.state.db)  # before the body limit and the body
    metrics.install(app, settings)  # counts every answer, the gate's too
    app.add_middleware(logs.RequestId)  # outermost: every log line of a request carries its id


def _include_routers(app: FastAPI) -> None:
    from app.api import (
        datasets,
        inference,
        invocations,
        jobs,
        models,
        prediction_runs,
        registry,
        solvers,
        summaries,
    )
    from app.deps import plain_integers, sent_once

    modules = (datasets, jobs, solvers, models, prediction_runs, invocations, registry, summaries)
    url_checks = [Depends(sent_once), Depends(plain_integers)]
    checks = [Depends(auth.authorize), *url_checks]
    for module in modules:
        app.include_router(module.router, prefix="/v1", dependencies=checks)
    # keys checked by auth.AuthGate (/v2/models)
    app.include_router(inference.router, dependencies=url_checks)
    openapi.install(app, keys_optional=app.state.auth.mode != "required")
    ui.install(app)


async def healthz() -> dict:
    """The process answers: on the event loop, needing neither a thread nor the database."""
    return {"status": "ok"}


def readyz(request: Request):
    db: Database = request.app.state.db
    try:
        db.ping()
    except Exception as exc:
        log.warning("readiness: database unreachable: %s", exc)
        return problem_response(503, "Not ready", "the database is unreachable")
    alive = _workers_alive(db)
    if not alive:
        return problem_response(
            503,
            "Not ready",
            f"no worker process has reported in the last {WORKER_ALIVE_S:g} s",
            database="ok",
            workers=0,
        )
    return {"status": "ready", "database": "ok", "workers": alive}


def _workers_alive(db: Database) -> int:
    """Workers whose heartbeat is at most WORKER_ALIVE_S old."""
    from app.jobs.workers import ready_count

    with db.session() as session:
        return ready_count(session, WORKER_ALIVE_S)
