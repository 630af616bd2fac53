"""Throughput of the distributed backend (WORKER_BACKEND=procrastinate) with 1, 2, 4, ... workers.

For each worker count: a fresh PostgreSQL database migrated by `margin migrate`'s code, N
`margin worker` processes (one job at a time each, solver threads = cores / N), then two
workloads submitted at once through the service's job-creation function (the same transaction the
API runs): many small LinearSVC jobs, and a few large ones. Measured: wall time from the first
submission to the last job's end, jobs per second, and the speed-up over one worker.

    .venv/bin/python -m benchmarks.bench_workers --workers 1,2,4
    .venv/bin/python -m benchmarks.bench_workers --workers 1,2,4,8,16 --small 200 --large 16

Needs a PostgreSQL server: MARGIN_BENCH_POSTGRES_URL or MARGIN_TEST_POSTGRES_URL (a role that may
CREATE DATABASE). Writes benchmarks/results/workers.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "workers.md"
TERMINAL = ("succeeded", "failed", "cancelled")


def write_binary_file(path: Path, n_rows: int, n_features: int, density: float, seed: int) -> None:
    """A sparse binary problem: a random hyperplane with 5% flipped labels (not separable)."""
    rng = np.random.default_rng(seed)
    w = rng.standard_normal(n_features)
    nnz = max(1, int(density * n_features))
    with open(path, "w") as f:
        for _ in range(n_rows):
            cols = np.sort(rng.choice(n_features, nnz, replace=False))
            vals = rng.standard_normal(nnz)
            label = 1 if vals @ w[cols] > 0 else -1
            if rng.random() < 0.05:
                label = -label
            f.write(
                f"{label:+d} "
                + " ".join(f"{c + 1}:{v:.4g}" for c, v in zip(cols, vals, strict=True))
            )
            f.write("\n")


class Run:
    """A fresh database with the datasets imported, and N workers on it."""

    def __init__(self, server_url: str, workdir: Path, files: dict[str, Path], n_workers: int):
        from app import migrate
        from app.config import Settings
        from app.db import Database
        from app.services.dataset_commit import import_file

        base = make_url(server_url)
        self.name = f"margin_bench_{uuid.uuid4().hex[:8]}"
        self.admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with self.admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        self.url = base.set(database=self.name).render_as_string(hide_password=False)
        migrate.upgrade(self.url)
        data_dir = workdir / f"data-{n_workers}"
        self.settings = Settings(database_url=self.url, data_dir=data_dir)
        self.settings.ensure_dirs()
        self.db = Database(self.url)
        self.datasets = {
            k: import_file(self.db, self.settings, p, k)[0].id for k, p in files.items()
        }
        threads = max(1, (os.cpu_count() or 1) // n_workers)
        env = {
            **os.environ,
            "DATABASE_URL": self.url,
            "DATA_DIR": str(data_dir),
            "WORKER_BACKEND": "procrastinate",
            "WORKER_CONCURRENCY": "1",
            "SOLVER_THREADS": str(threads),
        }
        script = Path(sys.executable).parent / "margin"
        self.logs = [open(workdir / f"worker-{n_workers}-{i}.log", "wb") for i in range(n_workers)]
        self.workers = [
            subprocess.Popen([str(script), "worker"], env=env, stdout=log, stderr=subprocess.STDOUT)
            for log in self.logs
        ]
        try:
            self._wait_registered()
        except BaseException:  # interrupted or timed out: leave no worker or database behind
            self.close()
            raise

    def _wait_registered(self) -> None:
        from app.jobs.workers import WorkerId
        from app.tables import Worker

        pids = {p.pid for p in self.workers}
        deadline = time.monotonic() + 120
        while True:
            with self.db.session() as session:
                if pids <= {WorkerId.parse(w).pid for w in session.scalars(select(Worker.id))}:
                    return
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register within 120 s")
            time.sleep(0.1)

    def workload(self, dataset: str, n_jobs: int, params: dict) -> dict:
        """Submit n_jobs at once and wait for all; wall time, throughput, mean job time."""
        from app.jobs.procrastinate_queue import ProcrastinateQueue
        from app.schemas.jobs import JobCreate
        from app.services.jobs import create_job
        from app.tables import Job

        queue = ProcrastinateQueue()
        body = JobCreate(dataset_id=self.datasets[dataset], estimator="LinearSVC", params=params)
        start = time.perf_counter()
        ids = [create_job(self.db, queue, body, None, self.settings)[0].id for _ in range(n_jobs)]
        while True:
            with self.db.session() as session:
                jobs = session.scalars(select(Job).where(Job.id.in_(ids))).all()
            if all(j.status in TERMINAL for j in jobs):
                break
            time.sleep(0.05)
        wall = time.perf_counter() - start
        failed = [j.error for j in jobs if j.status != "succeeded"]
        if failed:
            raise RuntimeError(f"{len(failed)} jobs did not succeed: {failed[:3]}")
        spans = [(j.finished_at - j.started_at).total_seconds() for j in jobs]
        return {"wall": wall, "per_s": n_jobs / wall, "mean_job": float(np.mean(spans))}

    def close(self) -> None:
        for proc in self.workers:
            proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            proc.wait(timeout=60)
        for log in self.logs:
            log.close()
        self.db.dispose()
        with self.admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)'))
        self.admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--small", type=int, default=60, help="number of small jobs")
    parser.add_argument("--large", type=int, default=8, help="number of large jobs")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    server = os.environ.get("MARGIN_BENCH_POSTGRES_URL") or os.environ.get(
        "MARGIN_TEST_POSTGRES_URL"
    )
    if not server:
        sys.exit("set MARGIN_BENCH_POSTGRES_URL (or MARGIN_TEST_POSTGRES_URL) to a PostgreSQL URL")
    counts = [int(n) for n in args.workers.split(",")]
    small_params = {"C": 1.0, "tol": 0.1}
    large_params = {"C": 1.0, "tol": 0.1}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        files = {
            "small": workdir / "small.svm",
            "large": workdir / "large.svm",
        }
        write_binary_file(files["small"], 2_000, 200, 0.1, seed=1)
        write_binary_file(files["large"], 50_000, 1_000, 0.02, seed=2)
        for n in counts:
            load_before = os.getloadavg()[0]
            run = Run(server, workdir, files, n)
            try:
                run.workload("small", 2, small_params)  # warm-up: every worker loads its kernels
                small = run.workload("small", args.small, small_params)
                large = run.workload("large", args.large, large_params)
            finally:
                run.close()
            rows.append((n, small, large, (load_before, os.getloadavg()[0])))
            print(
                f"{n:>2} workers: small {small['per_s']:.2f} jobs/s ({small['wall']:.1f} s), "
                f"large {large['per_s']:.3f} jobs/s ({large['wall']:.1f} s)",
                flush=True,
            )
    report(args, rows)


def report(args, rows) -> None:
    base_small, base_large = rows[0][1]["per_s"], rows[0][2]["per_s"]
    lines = [
        "# Distributed workers: throughput against the number of workers",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {platform.node()}: "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, PostgreSQL on loopback.",
        "",
        "Command: `.venv/bin/python -m benchmarks.bench_workers "
        f"--workers {args.workers} --small {args.small} --large {args.large}`",
        "",
        f"Small: {args.small} LinearSVC jobs on 2,000 x 200 (10% dense), tol 0.1. "
        f"Large: {args.large} jobs on 50,000 x 1,000 (2% dense), tol 0.1. "
        "All jobs of a workload submitted at once; wall time from the first submission to the "
        "last job's end. One job at a time per worker, solver threads = cores / workers.",
        "",
        "The last column is the machine's 1-minute load average before and after the run: other "
        "work on the machine lowers every figure, and the speed-ups compare like with like only "
        "when it stays near the worker count.",
        "",
        "| workers | small: jobs/s | speed-up | mean job s | large: jobs/s | speed-up "
        "| mean job s | load avg |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, small, large, (load_before, load_after) in rows:
        lines.append(
            f"| {n} | {small['per_s']:.2f} | {small['per_s'] / base_small:.2f}x "
            f"| {small['mean_job']:.2f} | {large['per_s']:.3f} | "
            f"{large['per_s'] / base_large:.2f}x | {large['mean_job']:.2f} "
            f"| {load_before:.1f} / {load_after:.1f} |"
        )
    two = [r for r in rows if r[0] == 2]
    if two:
        _, small, large, _ = two[0]
        lines += [
            "",
            "<!-- summary: worker scaling 1, 2, 4 workers | "
            f"{small['per_s'] / base_small:.2f}x / {large['per_s'] / base_large:.2f}x at 2 "
            "workers (small / large jobs) -->",
        ]
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("\n".join(lines) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
