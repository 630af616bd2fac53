"""Support for the fault tests: `margin` processes on loopback, a throwaway PostgreSQL cluster that
a test may stop and start, and small synthetic datasets."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import numpy as np
import pytest

from tests.deploy.cluster import free_port, wait_for  # noqa: F401  (the fault tests import them from here)

ROOT = Path(__file__).resolve().parents[2]
PG_BIN = Path(os.environ.get("MARGIN_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
TERMINAL = {"succeeded", "failed", "cancelled"}


class Margin:
    """`margin` subprocesses sharing one environment; logs in `log_dir`, stopped by close()."""

    def __init__(self, log_dir: Path, **env):
        self.log_dir = log_dir
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.env.pop("DATABASE_URL", None)
        self.env.update({k.upper(): str(v) for k, v in env.items()})
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, name: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 - the process owns it
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a SIGKILL to the group takes its children too
        )
        proc.name = name
        self.procs.append(proc)
        return proc

    def api(self, port: int) -> tuple[subprocess.Popen, httpx.Client]:
        proc = self.start("api", "--port", str(port), name=f"api-{port}")
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

        def up():
            assert proc.poll() is None, self.logs()
            try:
                return http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 60, "the API to answer")
        return proc, http

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{(self.log_dir / f'{p.name}.log').read_text(errors='replace')[-3000:]}"
            for p in self.procs
        )

    @staticmethod
    def kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc, signal.SIGTERM)


class PgCluster:
    """A PostgreSQL cluster of its own (initdb as the `postgres` user) that tests stop and start."""

    def __init__(self):
        if not (PG_BIN / "initdb").exists():
            pytest.skip(f"no PostgreSQL binaries in {PG_BIN} (set MARGIN_TEST_PG_BIN)")
        if os.geteuid() != 0 or shutil.which("su") is None:
            pytest.skip("starting a throwaway PostgreSQL cluster needs root (to run as postgres)")
        self.root = Path(tempfile.mkdtemp(prefix="margin-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        shutil.chown(self.root, "postgres")
        self._as_postgres(f"{PG_BIN}/initdb -D {self.data} --auth=trust --no-sync -U postgres")
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, command: str) -> None:
        subprocess.run(["su", "postgres", "-c", command], check=True, capture_output=True)

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c max_connections=100"
        )
        self._as_postgres(
            f"{PG_BIN}/pg_ctl -D {self.data} -w -t 60 -l {self.root}/log start -o '{options}'"
        )

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(f"{PG_BIN}/pg_ctl -D {self.data} -w -t 60 -m {mode} stop")

    def destroy(self) -> None:
        subprocess.run(
            ["su", "postgres", "-c", f"{PG_BIN}/pg_ctl -D {self.data} -m immediate stop"],
            capture_output=True,
        )
        shutil.rmtree(self.root, ignore_errors=True)


def write_classification_file(path: Path, n_rows: int, n_features: int, seed: int = 0) -> Path:
    """A dense LIBSVM file of two noisy, overlapping classes (so solvers take a while)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    y = np.where(X @ rng.standard_normal(n_features) + rng.standard_normal(n_rows) > 0, 1, -1)
    lines = (
        f"{label} " + " ".join(f"{j + 1}:{v:.4g}" for j, v in enumerate(row))
        for row, label in zip(X, y, strict=True)
    )
    path.write_text("\n".join(lines) + "\n")
    return path


def job_status(http: httpx.Client, job_id: str, headers: dict | None = None) -> str | None:
    response = http.get(f"/v1/jobs/{job_id}", headers=headers or {})
    return response.json()["status"] if response.status_code == 200 else None
