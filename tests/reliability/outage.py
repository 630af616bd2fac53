"""PostgreSQL outages while distributed workers run jobs: the routine behind the CI fault test and
`scripts/pg_outage.py` (its long version).

One service (`margin api` and two `margin worker` processes, procrastinate backend) runs on a
PostgreSQL cluster of its own. Each repetition submits a few jobs, waits until one is running,
stops PostgreSQL for `outage_s` seconds (JOB_STALL_S shorter than the outage, so every heartbeat is
stale when it comes back), starts it again and waits for every job to end. Then it checks what a
client and an operator would see:

- every job ended `succeeded` (with its model) or `failed` with a reason; none is `queued` or
  `running` without a live queue entry, at any poll;
- a job submitted after the outage runs at its first attempt (no worker reaps its own jobs);
- every worker process is alive and reports a fresh heartbeat.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from tests.reliability.helpers import (
    TERMINAL,
    Margin,
    PgCluster,
    free_port,
    wait_for,
    write_classification_file,
)

# The solver runs for its whole time budget (the tolerance is out of reach for the hinge loss,
# which has no Newton finish).
LONG = {"loss": "hinge", "tol": 1e-12, "max_iter": 10_000_000, "C": 100.0}

# Rows whose queue entry is gone: a `queued` or `running` job with no procrastinate entry in
# 'todo' or 'doing' for it.
_STRANDED = text(
    "SELECT j.id, j.status FROM jobs j WHERE j.status IN ('queued', 'running') AND NOT EXISTS"
    " (SELECT 1 FROM procrastinate_jobs e WHERE e.lock = j.id AND e.status IN ('todo', 'doing'))"
)
_WORKERS_FRESH = text(
    "SELECT count(*) FROM workers WHERE heartbeat_at > now() - make_interval(secs => :s)"
)


@dataclass
class Repetition:
    jobs: dict[str, dict] = field(default_factory=dict)  # id -> final view
    stranded: list[tuple[str, str]] = field(default_factory=list)  # seen at any poll
    after: list[dict] = field(default_factory=list)  # jobs submitted after the outage
    workers_alive: int = 0
    workers_fresh: int = 0
    n_workers: int = 0
    seconds: float = 0.0

    def problems(self) -> list[str]:
        out = []
        for job_id, view in self.jobs.items():
            if view["status"] == "succeeded" and not view.get("model_id"):
                out.append(f"{job_id} succeeded without a model")
            elif view["status"] == "failed" and not view.get("error"):
                out.append(f"{job_id} failed without a reason")
            elif view["status"] not in ("succeeded", "failed"):
                out.append(f"{job_id} ended {view['status']}")
        for job_id, status in sorted(set(self.stranded)):
            out.append(f"{job_id} was {status} without a queue entry")
        if not self.workers_alive == self.workers_fresh == self.n_workers:
            out.append(
                f"{self.workers_alive} of {self.n_workers} workers alive, "
                f"{self.workers_fresh} with a fresh heartbeat"
            )
        for view in self.after:
            if (view["status"], view["attempt"]) != ("succeeded", 1):
                out.append(f"a job submitted after the outage: {view}")
        return out


class OutageRun:
    """The service on its own cluster; `repeat()` runs one outage. Use as a context manager."""

    def __init__(self, root: Path, outage_s: float, stall_s: float, job_s: float, workers: int = 2):
        self.root, self.outage_s, self.stall_s, self.job_s = root, outage_s, stall_s, job_s
        self.n_workers = workers
        self.cluster = PgCluster()
        self.margin: Margin | None = None

    def __enter__(self) -> OutageRun:
        self.cluster.start()
        self.engine = create_engine(self.cluster.url, pool_pre_ping=True)
        self.margin = Margin(
            self.root,
            data_dir=self.root / "data",
            database_url=self.cluster.url,
            worker_backend="procrastinate",
            worker_concurrency=1,
            solver_threads=1,
            job_retries=2,
            job_stall_s=self.stall_s,
            progress_interval_s=0.2,
            worker_shutdown_timeout_s=2,
        )
        assert self.margin.start("migrate", name="migrate").wait(120) == 0, self.margin.logs()
        self.api, self.http = self.margin.api(free_port())
        self.workers = [
            self.margin.start("worker", name=f"worker-{i}") for i in range(self.n_workers)
        ]
        source = write_classification_file(self.root / "train.svm", 3000, 40)
        response = self.http.post("/v1/datasets", files={"file": source.open("rb")})
        assert response.status_code == 201, response.text
        self.dataset = response.json()["id"]
        wait_for(lambda: self._fresh_workers() >= self.n_workers, 90, "the workers to register")
        return self

    def __exit__(self, *exc) -> None:
        if self.margin is not None:
            self.margin.close()
        self.engine.dispose()
        self.cluster.destroy()

    def logs(self) -> str:
        return self.margin.logs() if self.margin else ""

    def submit(self, time_limit: float) -> str:
        body = {"dataset_id": self.dataset, "params": {**LONG, "time_limit": time_limit}}
        response = self.http.post("/v1/jobs", json=body)
        assert response.status_code == 202, response.text
        return response.json()["id"]

    def view(self, job_id: str) -> dict | None:
        try:
            response = self.http.get(f"/v1/jobs/{job_id}")
        except httpx.TransportError:
            return None
        return response.json() if response.status_code == 200 else None

    def _fresh_workers(self) -> int:
        try:
            with self.engine.connect() as conn:
                return conn.execute(_WORKERS_FRESH, {"s": max(5.0, self.stall_s)}).scalar()
        except Exception:
            return 0

    def _stranded(self) -> list[tuple[str, str]]:
        with self.engine.connect() as conn:
            return [tuple(r) for r in conn.execute(_STRANDED)]

    def repeat(self, timeout: float) -> Repetition:
        """One outage: 3 jobs (the first mid-run when PostgreSQL stops), then one after it."""
        rep = Repetition(n_workers=self.n_workers)
        start = time.monotonic()
        ids = [self.submit(self.job_s) for _ in range(3)]
        wait_for(
            lambda: (v := self.view(ids[0])) and v["status"] == "running" and v["progress"],
            90,
            "the first job to run",
        )
        self.cluster.stop()
        time.sleep(self.outage_s)
        self.cluster.start()
        deadline = time.monotonic() + timeout
        while True:
            views = {j: self.view(j) for j in ids}
            try:
                stranded = self._stranded()
            except Exception:  # the database is still coming back
                stranded = []
            # a job passes through `queued` between a reap and its new entry, in one transaction;
            # a row seen without an entry on two polls in a row is stranded
            if stranded:
                time.sleep(0.5)
                again = set(self._stranded())
                rep.stranded += [s for s in stranded if s in again]
            if all(v and v["status"] in TERMINAL for v in views.values()):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.5)
        rep.jobs = {j: v or {"status": "unknown"} for j, v in views.items()}
        rep.stranded += self._stranded()
        # one job per worker, at once: each worker takes one
        after = [self.submit(min(self.job_s, 1.5)) for _ in self.workers]
        wait_for(
            lambda: all((v := self.view(j)) and v["status"] in TERMINAL for j in after),
            timeout,
            "the jobs submitted after the outage",
            every=0.3,
        )
        rep.after = [self.view(j) for j in after]
        rep.workers_alive = sum(w.poll() is None for w in self.workers)
        rep.workers_fresh = self._fresh_workers()
        rep.seconds = time.monotonic() - start
        return rep
