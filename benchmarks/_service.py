"""Helpers for the service benchmarks: run `margin` roles in subprocesses on a free loopback port,
and sample a process's resident memory."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

_PORTS = random.Random()  # its own: with a seeded `random`, each process would pick the same
_GIVEN: set[int] = set()  # never twice: a server may not have bound its port yet


def free_port() -> int:
    """A loopback port free now, for a server started next, drawn below the kernel's ephemeral
    range: a port from a bind to port 0 is one the kernel hands out again (to an outgoing
    connection, or another bind to port 0) before the server binds it; one below is never."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _PORTS.randrange(max(1024, low - 12_000), low)
        if port in _GIVEN:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _GIVEN.add(port)
        return port
    raise RuntimeError(f"no free loopback port below {low}")


def _ephemeral_low() -> int:
    """The first port of the kernel's ephemeral range (Linux's setting; else IANA's 49152)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 49152


class MarginProcess:
    """`margin <role>` with a data directory, reachable at self.url once `wait_ready` returns."""

    def __init__(self, role: str, data_dir: Path, *args: str, env: dict | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        environment = {**os.environ, **(env or {})}
        environment.pop("DATABASE_URL", None)
        subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate", "--data-dir", str(data_dir)],
            check=True,
            capture_output=True,
        )
        self.log_path = data_dir / f"{role}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app.cli",
                role,
                "--data-dir",
                str(data_dir),
                "--port",
                str(self.port),
                *args,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=environment,
        )

    def wait_ready(self, path: str = "/healthz", timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(self.log_path.read_text())
            try:
                if httpx.get(self.url + path, timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"not ready after {timeout} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class RssSampler:
    """Samples a process's RSS every `every` seconds in a thread; `peak` is the largest seen."""

    def __init__(self, pid: int, every: float = 0.02):
        self.pid = pid
        self.every = every
        self.peak = 0.0
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            value = rss_mb(self.pid)
            self.samples.append(value)
            self.peak = max(self.peak, value)
