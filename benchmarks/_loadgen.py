"""The HTTP load generator shared by the prediction benchmarks (`bench_service_predict`,
`bench_load`): a stored model to serve, a uvicorn server to start, raw keep-alive requests, and
open- and closed-loop drivers (asyncio; latency counts from the scheduled send time)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
NNZ = 100  # non-zeros of each instance sent


def make_model(data_dir: Path, n_features: int, n_classes: int, seed: int = 0) -> str:
    """Migrate a fresh SQLite database in data_dir and store one model; returns its id."""
    from app.config import Settings
    from app.db import Database
    from app.migrate import upgrade
    from app.services.model_store import pack_weights
    from app.tables import Model, new_id

    settings = Settings(data_dir=data_dir)
    settings.ensure_dirs()
    upgrade(settings.db_url)
    rng = np.random.default_rng(seed)
    k = 1 if n_classes == 2 else n_classes
    db = Database(settings.db_url)
    model_id = new_id("model")
    with db.write() as session:
        session.add(
            Model(
                id=model_id,
                estimator="LinearSVC",
                params={},
                kind="classifier",
                classes=list(range(n_classes)),
                n_features=n_features,
                zero_based=False,
                weights=pack_weights(rng.standard_normal((k, n_features)), rng.standard_normal(k)),
                status="converged",
                gap=0.0,
                n_iter=1,
                train_time_s=0.0,
            )
        )
    db.dispose()
    return model_id


def start_server(
    factory: str, port: int, env: dict, access_log: bool, http: str = "httptools"
) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--loop", "uvloop", "--http", http]
    cmd += ["--log-level", "info"] if access_log else ["--no-access-log", "--log-level", "warning"]
    stdout = subprocess.DEVNULL if access_log else None
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=stdout, stderr=stdout)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"{factory} exited with {proc.returncode}") from None
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{factory} did not start listening on port {port}")


def request_bytes(path: str, body: bytes, key: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{auth}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def instance_body(n_features: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(n_features, NNZ, replace=False) + 1)
    values = rng.standard_normal(NNZ).round(6)
    doc = {"instances": [{"indices": idx.tolist(), "values": values.tolist()}]}
    return json.dumps(doc).encode()


# --------------------------------------------------------------------------------------------
# Load generator


class Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Conn:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, payload: bytes) -> int:
        self.writer.write(payload)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        await self.reader.readexactly(length)
        return status

    def close(self):
        self.writer.close()


async def open_loop(
    port: int, payloads: list[bytes], rate: float, seconds: float, n_conns: int = 8
) -> dict:
    """Requests at fixed times (rate per second); latency from each scheduled time (no
    coordinated omission); a dropped connection counts as an error."""
    conns = [await Conn.open(port) for _ in range(n_conns)]
    total = int(rate * seconds)
    latencies = np.empty(total)
    errors = 0
    start = time.perf_counter() + 0.05

    async def lane(j: int):
        nonlocal errors
        for i in range(j, total, n_conns):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            try:
                status = await conns[j].call(payloads[i % len(payloads)])
            except (OSError, asyncio.IncompleteReadError):
                status = 0
            errors += status != 200
            latencies[i] = time.perf_counter() - due

    await asyncio.gather(*(lane(j) for j in range(n_conns)))
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return {
        "offered": rate,
        "achieved": total / elapsed,
        "n": total,
        "errors": errors,
        "p50_ms": float(np.percentile(latencies, 50) * 1e3),
        "p99_ms": float(np.percentile(latencies, 99) * 1e3),
    }


async def closed_loop(port: int, payloads: list[bytes], seconds: float, n_conns: int) -> dict:
    """As many requests as the server answers, n_conns in flight."""
    conns = [await Conn.open(port) for _ in range(n_conns)]
    stop = time.perf_counter() + seconds
    counts, errors, latencies = [0] * n_conns, [0], []

    async def lane(j: int):
        i = j
        while time.perf_counter() < stop:
            t = time.perf_counter()
            if await conns[j].call(payloads[i % len(payloads)]) != 200:
                errors[0] += 1
            latencies.append(time.perf_counter() - t)
            counts[j] += 1
            i += n_conns

    t0 = time.perf_counter()
    await asyncio.gather(*(lane(j) for j in range(n_conns)))
    elapsed = time.perf_counter() - t0
    for c in conns:
        c.close()
    return {
        "conns": n_conns,
        "rps": sum(counts) / elapsed,
        "n": sum(counts),
        "errors": errors[0],
        "p50_ms": float(np.percentile(latencies, 50) * 1e3),
        "p99_ms": float(np.percentile(latencies, 99) * 1e3),
    }
