"""The service the attack tests (test_attacks_*.py) run against, and what each attack is checked
for: a real `margin serve` (API, parser and worker processes) on a real PostgreSQL, every process
of it under an address-space limit of SERVER_AS_GB. For each attack: the expected 4xx, `/healthz`
answering within 1 s throughout, nothing stored or left in tmp/, no job or prediction run left
active, and the process tree's resident memory (mapped file pages included) raised by less than
300 MB (kernel high-water marks). The fixtures `service` and `postgres_scratch` are in conftest.py.
RELIABILITY.md lists the attacks with their limits."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx

from app.db import Database
from app.services import keys
from benchmarks import _process_memory as memory
from tests.reliability.helpers import ROOT, free_port, wait_for

SERVER_AS_GB = 2.5
PEAK_LIMIT = 300 * memory.MB
QUOTA_MB = 8
OTHERS = ("beta", "gamma")  # tenants without quotas or rates
TRICKLE_KB_S = 8  # a trickled upload's pace: twice the service's MIN_BODY_RATE_KB


class Service:
    def __init__(self, root: Path, database_url: str, **settings: str):
        self.data = root / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "DATA_DIR": str(self.data),
            "AUTH_MODE": "required",
            # the live key stays cached through a flood of made-up ones, however long the tests
            # before it took since it was first verified (its entry does not renew on use)
            "AUTH_CACHE_S": "3600",
            "PORT": str(self.port),
            "WORKERS": "1",
            "HEADER_TIMEOUT_S": "2",
            "BODY_TIMEOUT_S": "2",
            "MIN_BODY_RATE_KB": str(TRICKLE_KB_S / 2),
            "MAX_CONNECTIONS": "64",
            "MALLOC_ARENA_MAX": "2",
            "PROGRESS_INTERVAL_S": "0.1",
            "PYTHONUNBUFFERED": "1",
            **settings,
        }
        self.log = open(root / "serve.log", "ab")  # noqa: SIM115 - closed in stop()
        cli = [sys.executable, "-m", "app.cli"]
        subprocess.run([*cli, "migrate"], env=self.env, cwd=ROOT, check=True, capture_output=True)
        db = Database(database_url)
        _, admin = keys.create_key(db, "acme", "admin", ["admin"])
        _, limited = keys.create_key(db, "slow", "limited", ["admin"])
        others = [keys.create_key(db, tenant, "other", ["admin"])[1] for tenant in OTHERS]
        keys.set_quota(db, "acme", QUOTA_MB * memory.MB, None)
        keys.set_quota(db, "slow", None, None, rate_limit="3/minute")
        db.dispose()
        self.auth = {"Authorization": f"Bearer {admin}"}
        self.limited = {"Authorization": f"Bearer {limited}"}
        self.others = [{"Authorization": f"Bearer {key}"} for key in others]
        self.process = subprocess.Popen(
            [*cli, "serve"],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=memory.limit_address_space(int(SERVER_AS_GB * 2**30)),
        )
        self.http = httpx.Client(base_url=self.url, timeout=60, headers=self.auth)

        def up():
            assert self.process.poll() is None, self.logs()
            try:
                return self.http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 90, "margin serve")

    def logs(self) -> str:
        return (self.data.parent / "serve.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
        self.log.close()

    def counts(self) -> tuple[int, int]:
        datasets = self.http.get("/v1/datasets", params={"limit": 500}).json()["items"]
        active = self.http.get("/v1/jobs", params={"status": ["queued", "running"]}).json()
        return len(datasets), len(active["items"])

    def assert_clean(self, datasets_before: int | None) -> None:
        """Nothing stored by the attack (None: not checked), nothing left in tmp/, nothing
        active."""
        tmp = self.data / "tmp"
        wait_for(lambda: not list(tmp.iterdir()), 10, "tmp/ to be empty")
        datasets, active = self.counts()
        assert active == 0 and datasets_before in (None, datasets)
        for model in self.http.get("/v1/models").json()["items"]:
            runs = self.http.get(f"/v1/models/{model['id']}/predictions").json()["items"]
            assert all(r["status"] in ("succeeded", "failed") for r in runs)


class HealthProbe:
    """Polls /healthz on its own connection while an attack runs; `worst` is its slowest answer
    (a failure counts as infinitely slow)."""

    def __init__(self, url: str):
        self.url = url
        self.worst = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while not self.stop.wait(0.2):
                start = time.perf_counter()
                try:
                    ok = client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    ok = False
                self.worst = max(self.worst, time.perf_counter() - start if ok else float("inf"))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


def attack(service: Service, send) -> httpx.Response:
    """Run `send()` (it returns the response) and check the service's health, memory and
    state around it."""
    datasets_before, _ = service.counts()
    with HealthProbe(service.url) as probe, memory.measure(service.process.pid) as peak:
        response = send()
        time.sleep(0.5)  # one more probe after the answer
    assert probe.worst < 1.0, f"/healthz took {probe.worst:.2f} s"
    assert peak.increase < PEAK_LIMIT, (peak.increase / memory.MB, peak.by_process)
    service.assert_clean(datasets_before)
    return response


def gzip_of(piece: bytes, total: int) -> bytes:
    out = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip container
    parts = [out.compress(piece) for _ in range(total // len(piece))]
    return b"".join([*parts, out.flush()])

