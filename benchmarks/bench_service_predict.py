"""Prediction load test: single-instance predict over HTTP on loopback.

Starts the service's API (uvicorn, one process, as `margin api` runs it) on a temporary SQLite
database holding one stored model, and a bare FastAPI endpoint (one async route that reads the
body and answers a constant JSON) as the reference, in the same run. A Python load generator
(asyncio, keep-alive connections, sharing the machine's cores with the server) sends one instance
of 100 non-zeros per request and measures:

- latency (p50, p99) at an offered open-loop rate (default 300 requests/s; latency counts from
  the scheduled send time, so a stalled server is not hidden by a waiting client);
- saturation throughput: closed loop over a few connections, requests/s with zero errors.

The service is measured on its route (async, work on the event loop) and on a variant that does
the same work on the thread pool, as a `def` route would.

    .venv/bin/python -m benchmarks.bench_service_predict [--seconds 10] [--rate 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request, Response
from starlette.routing import Route

from benchmarks._loadgen import (
    closed_loop,
    instance_body,
    make_model,
    open_loop,
    request_bytes,
    start_server,
)
from benchmarks._service import free_port

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------------------------
# The apps under test (uvicorn imports these factories)


def bare_app():
    """A FastAPI app with one route that reads the body and returns a constant JSON."""
    app = FastAPI()

    @app.post("/predict")
    async def predict(request: Request) -> Response:
        await request.body()
        return Response(b'{"labels":[1],"decision_values":[[0.5]]}', media_type="application/json")

    return app


def service_app():
    """The service (settings from the environment), plus a variant of predict that does its
    work on the thread pool, as a `def` route would (the body must still be read by async code),
    registered in the same router right after the real route so that routing costs the same."""
    from starlette.concurrency import run_in_threadpool

    from app.api import models
    from app.main import create_app
    from app.services.model_cache import fetch_model

    async def threaded(request: Request) -> Response:
        app = request.app
        model_id = request.path_params["model_id"]
        cache = models.model_cache(app)
        body = await request.body()
        model = await run_in_threadpool(fetch_model, app.state.db, cache, model_id)
        content, _ = await run_in_threadpool(
            models._predict_bytes,
            body,
            request.headers.get("content-type", ""),
            model,
            app.state.settings.max_predict_batch,
            False,  # no probabilities, as the measured requests ask for none
        )
        return Response(content, media_type="application/json")

    if not any(getattr(r, "path", "") == THREADED_PATH for r in models.router.routes):
        models.router.routes.insert(1, Route(THREADED_PATH, threaded, methods=["POST"]))
    return create_app()


THREADED_PATH = "/models/{model_id}/predict-threaded"


# --------------------------------------------------------------------------------------------
# Measurements


async def measure(port: int, path: str, payloads: list[bytes], args) -> dict:
    requests = [request_bytes(path, body) for body in payloads]
    # Warm-up: the first request loads and caches the model; let the server settle.
    await closed_loop(port, requests, 1.0, 2)
    latency = await open_loop(port, requests, args.rate, args.seconds)
    saturation = await closed_loop(port, requests, args.seconds, args.conns)
    return {"latency": latency, "saturation": saturation}


# --------------------------------------------------------------------------------------------


def run(args) -> dict:
    """Start every server, then measure them in turn, ``args.rounds`` times (interleaved, so that
    a change in the machine's background load hits them alike); each figure is the median."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    rounds: dict[str, list] = {}
    servers = []
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        model_id = make_model(data_dir, args.features, args.classes)
        env = {**os.environ, "DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
        env.pop("DATABASE_URL", None)
        payloads = [instance_body(args.features, seed) for seed in range(64)]
        targets = [
            ("bare FastAPI endpoint", "benchmarks.bench_service_predict:bare_app", "/predict"),
            (
                "service predict",
                "benchmarks.bench_service_predict:service_app",
                f"/v1/models/{model_id}/predict",
            ),
        ]
        if args.guard:  # the same route behind the header guard `margin api` runs with
            targets.append(
                (
                    "service predict, header guard (as margin api runs)",
                    "benchmarks.bench_service_predict:service_app",
                    f"/v1/models/{model_id}/predict",
                    "app.http_guard:GuardedHttpToolsProtocol",
                )
            )
        if not args.skip_threaded:
            targets.append(
                (
                    "service predict, work on the thread pool (as a def route)",
                    "benchmarks.bench_service_predict:service_app",
                    f"/v1/models/{model_id}/predict-threaded",
                )
            )
        try:
            for name, factory, path, *http in targets:
                port = free_port()
                servers.append(start_server(factory, port, env, args.access_log, *http))
                rounds[name] = [port, path]
            for r in range(args.rounds):
                for name, (port, path, *_) in rounds.items():
                    result = asyncio.run(measure(port, path, payloads, args))
                    rounds[name].append(result)
                    print(f"round {r + 1} {name}: {json.dumps(result)}", flush=True)
        finally:
            for server in servers:
                server.terminate()
                server.wait(timeout=30)
    return {name: _median(runs[2:]) for name, runs in rounds.items()}


def _median(results: list[dict]) -> dict:
    return {
        part: {key: float(np.median([r[part][key] for r in results])) for key in results[0][part]}
        for part in results[0]
    }


def report(results: dict, args) -> str:
    lines = [
        "| endpoint | offered req/s | p50 ms | p99 ms | errors | saturation req/s "
        f"({args.conns} conns) | sat. p50 ms | sat. p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lat, sat = r["latency"], r["saturation"]
        lines.append(
            f"| {name} | {lat['offered']:.0f} | {lat['p50_ms']:.2f} | {lat['p99_ms']:.2f} | "
            f"{lat['errors'] + sat['errors']} | {sat['rps']:.0f} | {sat['p50_ms']:.2f} | "
            f"{sat['p99_ms']:.2f} |"
        )
    bare = results.get("bare FastAPI endpoint")
    ours = results.get("service predict")
    if bare and ours:
        lines.append("")
        lines.append(
            f"service / bare saturation throughput: "
            f"{ours['saturation']['rps'] / bare['saturation']['rps']:.2f}"
        )
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# In process: the cost of one request through each ASGI app, without sockets or a load generator


async def _asgi_call(app, path: str, body: bytes) -> int:
    sent = []
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    return sent[0]["status"]


async def _asgi_cost(app, path: str, bodies: list[bytes], n: int) -> float:
    """Median microseconds per request (the median, not the mean: on a shared machine the
    process is descheduled now and then, and those pauses would dominate a mean)."""
    for body in bodies[:4]:
        status = await _asgi_call(app, path, body)
        if status != 200:
            raise RuntimeError(f"{path} answered {status}")
    times = np.empty(n)
    for i in range(n):
        start = time.perf_counter()
        await _asgi_call(app, path, bodies[i % len(bodies)])
        times[i] = time.perf_counter() - start
    return float(np.median(times) * 1e6)


def in_process(args) -> dict:
    """Median microseconds per request through each app (median over ``args.rounds``)."""
    from app.api import models
    from app.config import Settings
    from app.db import Database
    from app.main import create_app
    from app.services.prediction import dumps, parse_body, predict_payload

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        model_id = make_model(data_dir, args.features, args.classes)
        bodies = [instance_body(args.features, seed) for seed in range(64)]
        settings = Settings(data_dir=data_dir)
        db = Database(settings.db_url)

        def service(models_first: bool):
            app = create_app(settings)
            app.state.db = db
            if models_first:
                routes = app.router.routes
                ours = [r for r in routes if getattr(r, "original_router", None) is models.router]
                for route in ours:
                    routes.remove(route)
                routes[0:0] = ours
            return app

        def service_api_route():
            """The same handler behind a FastAPI APIRoute (parameters and dependencies
            resolved per request), in the models router's place."""
            from fastapi import APIRouter

            from app.api import datasets, jobs, solvers
            from app.errors import install_handlers

            app = FastAPI()
            app.state.settings, app.state.db = settings, db
            install_handlers(app)
            router = APIRouter()
            router.add_api_route(
                "/models/{model_id}/predict", models._predict_documented, methods=["POST"]
            )
            for r in (datasets.router, jobs.router, solvers.router, router):
                app.include_router(r, prefix="/v1")
            return app

        apps = {
            "bare FastAPI endpoint": (bare_app(), "/predict"),
            "service predict as an APIRoute": (
                service_api_route(),
                f"/v1/models/{model_id}/predict",
            ),
            "service predict": (service(False), f"/v1/models/{model_id}/predict"),
            "service predict, models router included first": (
                service(True),
                f"/v1/models/{model_id}/predict",
            ),
        }
        model = models.fetch_model(db, models.ModelCache(1), model_id)

        def work_only(body):
            return dumps(predict_payload(model, parse_body(body, "application/json", model, 10)))

        samples: dict[str, list[float]] = {name: [] for name in [*apps, "parse + predict only"]}
        for _ in range(args.rounds):
            for name, (app, path) in apps.items():
                samples[name].append(asyncio.run(_asgi_cost(app, path, bodies, args.requests)))
            times = np.empty(args.requests)
            for i in range(args.requests):
                start = time.perf_counter()
                work_only(bodies[i % len(bodies)])
                times[i] = time.perf_counter() - start
            samples["parse + predict only"].append(float(np.median(times) * 1e6))
        db.dispose()
    return {name: float(np.median(values)) for name, values in samples.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--rate", type=float, default=300.0, help="offered requests/s")
    parser.add_argument("--conns", type=int, default=8, help="connections at saturation")
    parser.add_argument("--features", type=int, default=20_000, help="model's feature count")
    parser.add_argument("--classes", type=int, default=2, help="2: binary model; k > 2: k columns")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved repetitions")
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="servers log every request (as `margin api` does by default)",
    )
    parser.add_argument("--skip-threaded", action="store_true", help="skip the thread-pool variant")
    parser.add_argument(
        "--guard", action="store_true", help="also the route behind app.http_guard's protocol"
    )
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="instead: microseconds per request through each ASGI app, no sockets",
    )
    parser.add_argument("--requests", type=int, default=3000, help="per in-process round")
    args = parser.parse_args(argv)
    if args.in_process:
        print("| app | µs per request (in process, median request) |\n|---|---|")
        for name, us in in_process(args).items():
            print(f"| {name} | {us:.0f} |")
        return
    results = run(args)
    print()
    print(report(results, args))


if __name__ == "__main__":
    main()
