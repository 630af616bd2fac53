"""Latency of the inference protocols over HTTP on loopback: v1 predict (the reference, same
run), the Open Inference Protocol's v2 infer and MLflow's invocations, all through a registry
alias (``bench@production``), one instance of dense values per request.

Sequential: one client on one keep-alive connection, each request sent when the previous one
answered (targets: p50 < 3 ms, p99 < 10 ms). Concurrent: `--conns` connections in a closed loop.

    .venv/bin/python -m benchmarks.bench_protocols [--seconds 8] [--features 100] [--conns 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from benchmarks._loadgen import closed_loop, make_model, request_bytes, start_server
from benchmarks._service import free_port

ROOT = Path(__file__).resolve().parents[1]


def register(data_dir: Path, model_id: str) -> None:
    from app.config import Settings
    from app.db import Database
    from app.tables import ModelAlias, ModelVersion, RegisteredModel

    db = Database(Settings(data_dir=data_dir).db_url)
    with db.write() as session:
        session.add(RegisteredModel(id="rm_bench", name="bench", tags={}, latest_version=1))
        session.flush()
        session.add(ModelVersion(registered_model_id="rm_bench", version=1, model_id=model_id,
                                 tags={}))  # fmt: skip
        session.add(ModelAlias(registered_model_id="rm_bench", alias="production", version=1))
    db.dispose()


def bodies(n_features: int, seed: int) -> dict[str, bytes]:
    x = np.random.default_rng(seed).standard_normal(n_features).round(6).tolist()
    v2 = {"inputs": [{"name": "input", "shape": [1, n_features], "datatype": "FP64", "data": x}]}
    return {
        "v1 predict": json.dumps({"instances": [x]}).encode(),
        "v2 infer": json.dumps(v2).encode(),
        "invocations": json.dumps({"inputs": [x]}).encode(),
    }


PATHS = {
    "v1 predict": "/v1/models/bench@production/predict",
    "v2 infer": "/v2/models/bench@production/infer",
    "invocations": "/v1/models/bench@production/invocations",
}


async def measure(port: int, args) -> dict:
    out = {}
    for name, path in PATHS.items():
        payloads = [request_bytes(path, bodies(args.features, s)[name]) for s in range(32)]
        await closed_loop(port, payloads, 1.0, 1)  # warm-up
        sequential = await closed_loop(port, payloads, args.seconds, 1)
        concurrent = await closed_loop(port, payloads, args.seconds, args.conns)
        out[name] = {"sequential": sequential, "concurrent": concurrent}
        print(name, json.dumps(out[name]), flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--features", type=int, default=100)
    parser.add_argument("--conns", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        model_id = make_model(data_dir, args.features, 2)
        register(data_dir, model_id)
        env = {**os.environ, "DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT)}
        env.pop("DATABASE_URL", None)
        port = free_port()
        server = start_server("app.main:create_app", port, env, access_log=False)
        try:
            results = asyncio.run(measure(port, args))
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"\nload average {os.getloadavg()}; {args.features} features, one instance a request")
    print("| route | sequential p50 ms | p99 ms | req/s | concurrent "
          f"({args.conns} conns) p50 ms | p99 ms | req/s |")
    print("|---|---|---|---|---|---|---|")
    for name, r in results.items():
        s, c = r["sequential"], r["concurrent"]
        print(f"| {name} | {s['p50_ms']:.2f} | {s['p99_ms']:.2f} | {s['rps']:.0f} | "
              f"{c['p50_ms']:.2f} | {c['p99_ms']:.2f} | {c['rps']:.0f} |")


if __name__ == "__main__":
    main()
