"""Test support for the distributed backend: a fresh PostgreSQL database per test module, stored
datasets, and `margin` processes (workers, API) started exactly as the compose services run them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from benchmarks._service import free_port  # noqa: F401  (the tests import it from here)
from tests.deploy.conftest import ROOT

ENV_URL = "MARGIN_TEST_POSTGRES_URL"


def server_url() -> str:
    url = os.environ.get(ENV_URL)
    if not url:
        pytest.skip(
            f"{ENV_URL} is not set: these tests need a PostgreSQL server (.ci/run starts one)"
        )
    return url


class FreshDatabase:
    """CREATE DATABASE on the test server; `drop()` removes it (closing leftover connections)."""

    def __init__(self, prefix: str = "margin_deploy_t"):
        base = make_url(server_url())
        self.name = f"{prefix}_{uuid.uuid4().hex[:10]}"
        self._admin = create_engine(base, isolation_level="AUTOCOMMIT")
        with self._admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        self.url = base.set(database=self.name).render_as_string(hide_password=False)

    def drop(self) -> None:
        drop_database(self._admin, self.name)
        self._admin.dispose()


def drop_database(admin, name: str, patience_s: float = 30.0) -> None:
    """DROP DATABASE ... WITH (FORCE) through the AUTOCOMMIT engine `admin`, again while it is
    refused for a session the test role may not end: an autovacuum worker in the database
    (the role is not a superuser), which finishes soon."""
    deadline = time.monotonic() + patience_s
    while True:
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except DBAPIError as exc:
            # 42501 insufficient_privilege, 55006 object_in_use
            if getattr(exc.orig, "sqlstate", None) not in ("42501", "55006"):
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def write_regression_file(path: Path, n_rows: int, n_features: int, seed: int) -> Path:
    """A LIBSVM file of a noisy linear target (real-valued labels: a LinearSVR dataset)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n_rows, n_features))
    y = X @ rng.standard_normal(n_features) + 0.3 * rng.standard_normal(n_rows)
    with open(path, "w") as f:
        for row, label in zip(X, y, strict=True):
            features = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row))
            f.write(f"{label:.6g} {features}\n")
    return path


def margin_command(*args: str) -> list[str]:
    """`margin ARGS` through the console script of this environment (as the image runs it)."""
    script = Path(sys.executable).parent / "margin"
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "import sys; from app.cli import main; sys.exit(main())", *args]


class Processes:
    """`margin` subprocesses with logs in a directory; all stopped by `close()`."""

    def __init__(self, log_dir: Path, env: dict[str, str]):
        self.log_dir = log_dir
        self.env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        self.procs: list[subprocess.Popen] = []

    def start(self, *args: str, name: str, **env: str) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            margin_command(*args),
            cwd=ROOT,
            env={**self.env, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        proc.log_path = self.log_dir / f"{name}.log"
        self.procs.append(proc)
        return proc

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            margin_command(*args),
            cwd=ROOT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def log(self, proc: subprocess.Popen) -> str:
        return proc.log_path.read_text(errors="replace")

    @staticmethod
    def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> int:
        if proc.poll() is None:
            proc.send_signal(sig)
        return proc.wait(timeout=timeout)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for(predicate: Callable[[], object], timeout: float, what: str, every: float = 0.05):
    """Poll until `predicate()` is truthy; returns its value, or fails naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
