"""`/metrics` in the Prometheus text format (prometheus-client).

Two sources:
- this API process's own counters: requests per route and status with a latency histogram, and
  predictions served (instances and requests);
- the database, read at scrape time (`DatabaseCollector`): jobs by status, the queue's depth,
  models trained and their training seconds, prediction runs by status, live workers and the age
  of the oldest heartbeat. Training happens in other processes (the local pool's children,
  distributed workers on other machines); the database is what they all share, so every API
  process reports the same totals and no multiprocess registry directory is needed.

Per-tenant counts would leak between tenants: where keys are required (AUTH_MODE=required, or
auto on a public address), `/metrics` needs a key with the `admin` scope or `METRICS_TOKEN`.
"""

from __future__ import annotations

import hmac
import time
from datetime import timedelta

from fastapi import FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from sqlalchemy import func, select

from app import clock
from app.auth import client_address
from app.errors import ProblemError, problem_response
from app.tables import Job, JobStatus, Model, PredictionRun, Worker, utcnow

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
WORKER_ALIVE_S = 15.0


class Metrics:
    """One app's registry and the instruments its code updates."""

    def __init__(self, db):
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "margin_http_requests", "HTTP requests answered", ["method", "route", "status"],
            registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "margin_http_request_duration_seconds", "time to answer an HTTP request",
            ["method", "route"], buckets=LATENCY_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self.predicted = Counter(
            "margin_predictions", "instances predicted by the predict endpoint", ["kind"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(DatabaseCollector(db))


class RequestMetrics:
    """ASGI middleware: count and time every HTTP request by its route's template."""

    def __init__(self, app, metrics: Metrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = [500]

        async def send_status(message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            template = _template(scope)
            method = scope["method"]
            self.metrics.requests.labels(method, template, str(status[0])).inc()
            self.metrics.latency.labels(method, template).observe(time.perf_counter() - start)


def _plain_template(scope) -> str | None:
    """The path template of a plain Starlette endpoint (predict), which unlike FastAPI's routes
    does not put its route in the scope: the path with each parameter's last occurrence
    replaced by its name."""
    if scope.get("endpoint") is None:
        return None
    path = scope["path"]
    for name, value in reversed(list((scope.get("path_params") or {}).items())):
        head, found, tail = path.rpartition(f"/{value}")
        if found:
            path = f"{head}/{{{name}}}{tail}"
    return path


def _template(scope) -> str:
    """The matched route's path template with its router's prefix (`/v1/jobs/{job_id}`): a
    label per route, never per id."""
    route = scope.get("route")
    if route is None:
        return _plain_template(scope) or "(unmatched)"
    template = getattr(route, "path", None)
    if not template:
        return "(unmatched)"
    params = {k: str(v) for k, v in (scope.get("path_params") or {}).items()}
    try:
        concrete = template.format(**params)
    except (KeyError, ValueError, IndexError):
        return template
    path = scope["path"]
    return path[: len(path) - len(concrete)] + template if path.endswith(concrete) else template


class DatabaseCollector:
    """What the workers did, read from the database when /metrics is scraped."""

    def __init__(self, db):
        self.db = db

    def collect(self):
        with self.db.session() as session:
            counts = select(Job.status, func.count()).group_by(Job.status)
            jobs = dict(session.execute(counts).all())
            trained = session.execute(
                select(func.count(), func.coalesce(func.sum(Model.train_time_s), 0.0))
            ).one()
            runs = dict(
                session.execute(
                    select(PredictionRun.status, func.count()).group_by(PredictionRun.status)
                ).all()
            )
            clock.synchronize(session)
            since = utcnow() - timedelta(seconds=WORKER_ALIVE_S)
            workers = session.execute(
                select(func.count(), func.min(Worker.heartbeat_at)).where(
                    Worker.heartbeat_at >= since
                )
            ).one()
        by_status = GaugeMetricFamily("margin_jobs", "jobs by status", labels=["status"])
        for status in JobStatus:
            by_status.add_metric([status.value], jobs.get(status.value, 0))
        yield by_status
        yield GaugeMetricFamily(
            "margin_queue_depth", "jobs waiting for a worker", value=jobs.get("queued", 0)
        )
        yield CounterMetricFamily("margin_models_trained", "models stored", value=trained[0])
        yield CounterMetricFamily(
            "margin_training_seconds", "solver seconds of the stored models", value=trained[1]
        )
        run_family = GaugeMetricFamily(
            "margin_prediction_runs", "background prediction runs by status", labels=["status"]
        )
        for status in ("queued", "running", "succeeded", "failed", "cancelled"):
            run_family.add_metric([status], runs.get(status, 0))
        yield run_family
        yield GaugeMetricFamily(
            "margin_workers_alive",
            f"worker processes whose heartbeat is under {WORKER_ALIVE_S:g} s old",
            value=workers[0],
        )
        oldest = workers[1]
        age = (utcnow() - oldest).total_seconds() if oldest is not None else float("nan")
        yield GaugeMetricFamily(
            "margin_worker_heartbeat_age_seconds",
            "age of the oldest heartbeat among live workers",
            value=age,
        )


def install(app: FastAPI, settings) -> Metrics:
    metrics = Metrics(app.state.db)
    app.state.metrics = metrics
    app.add_middleware(RequestMetrics, metrics=metrics)

    @app.get("/metrics", tags=["health"], response_class=Response)
    async def scrape(request: Request):
        """The service's metrics in the Prometheus text format (admin scope, or METRICS_TOKEN,
        where keys are required)."""
        try:
            await _check_access(request, settings)
        except ProblemError as exc:
            return problem_response(exc.status, exc.title, exc.detail, headers=exc.headers)
        body = await run_in_threadpool(generate_latest, metrics.registry)  # reads the database
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return metrics


async def _check_access(request: Request, settings) -> None:
    auth = request.app.state.auth
    if auth.mode != "required":
        return
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    token = token.strip()
    if settings.metrics_token and scheme.lower() == "bearer":
        if hmac.compare_digest(token.encode(), settings.metrics_token.encode()):
            return
    principal = await auth.principal_for(header or None, client_address(request))
    if not principal.allows("admin"):
        raise ProblemError(403, "Forbidden", "/metrics needs a key with the 'admin' scope")
