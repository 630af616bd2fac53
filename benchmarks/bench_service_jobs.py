"""Job start latency and the service's training overhead.

Starts `margin serve` (API + local pool of warm worker processes, SQLite) on a temporary data
directory and uploads a dataset, then:

- start latency: submits jobs one at a time (each after the previous ended) and takes, for each,
  the time from sending POST /v1/jobs (and from the job row's creation inside it) to a worker's
  claim (`started_at`, a server timestamp on the same clock), so client polling does not blur
  the figure. Reports p50 / p90 / max.
- overhead: the same training job through the service (claim to finish: load the stored arrays,
  train with progress writes, score, store the model) against `fit` called directly in this
  process on the same arrays with the same parameters and threads, alternating, best of N each.

    .venv/bin/python -m benchmarks.bench_service_jobs [--jobs 40] [--repeat 3] [--estimator E]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import datetime
from pathlib import Path

import httpx
import numpy as np

from benchmarks._service import MarginProcess

ROOT = Path(__file__).resolve().parents[1]
A9A = ROOT.parent / "shared" / "data" / "a9a" / "a9a.bz2"
HEART = ROOT / "app" / "demo" / "heart_scale"
TERMINAL = {"succeeded", "failed", "cancelled"}


def wait(http: httpx.Client, job_id: str, every: float = 0.01) -> dict:
    while True:
        job = http.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in TERMINAL:
            return job
        time.sleep(every)


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def upload(http: httpx.Client, path: Path) -> str:
    with open(path, "rb") as handle:
        response = http.post("/v1/datasets", files={"file": (path.name, handle)})
    response.raise_for_status()
    return response.json()["id"]


def start_latency(http: httpx.Client, dataset: str, estimator: str, n: int):
    """Per job: (POST sent -> claimed, row created -> claimed), in seconds."""
    params = {"max_iter": 5}
    from_post, from_row = [], []
    for _ in range(n):
        body = {"dataset_id": dataset, "estimator": estimator, "params": params}
        sent = time.time()  # same machine, same clock as the server's timestamps
        job = http.post("/v1/jobs", json=body)
        job.raise_for_status()
        done = wait(http, job.json()["id"])
        assert done["status"] == "succeeded", done
        from_post.append(ts(done["started_at"]) - sent)
        from_row.append(ts(done["started_at"]) - ts(done["created_at"]))
    return from_post, from_row


def overhead(http, dataset: str, estimator: str, params: dict, threads: int, repeat: int):
    import solvers
    from solvers.io import load_libsvm

    data = load_libsvm(str(A9A))
    cls = getattr(solvers, estimator)
    extra = {"n_jobs": threads} if estimator == "LinearSVC" else {}
    service, fit_only, direct = [], [], []
    for i in range(repeat + 1):  # the first round warms both sides up and is not counted
        body = {"dataset_id": dataset, "estimator": estimator, "params": params}
        job = http.post("/v1/jobs", json=body)
        done = wait(http, job.json()["id"], every=0.25)  # light polling: the API shares the cores
        assert done["status"] == "succeeded", done
        model = http.get(f"/v1/models/{done['model_id']}").json()
        start = time.perf_counter()
        cls(**params, **extra).fit(data.X, data.y)
        if i:
            direct.append(time.perf_counter() - start)
            service.append(ts(done["finished_at"]) - ts(done["started_at"]))
            fit_only.append(model.get("train_time_s", float("nan")))
    return service, fit_only, direct


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--estimator", default="LinearSVC")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    params = {"C": 1.0, "tol": 0.001} if args.estimator == "LinearSVC" else {"C": 1.0, "tol": 1e-4}
    with tempfile.TemporaryDirectory() as tmp:
        serve = MarginProcess("serve", Path(tmp), "--workers", str(args.workers))
        try:
            serve.wait_ready("/readyz")
            with httpx.Client(base_url=serve.url, timeout=600) as http:
                heart = upload(http, HEART)
                a9a = upload(http, A9A)
                start_latency(http, heart, args.estimator, 3)  # first jobs load the kernels
                from_post, from_row = start_latency(http, heart, args.estimator, args.jobs)
                import os

                threads = max(1, (os.cpu_count() or 1) // args.workers)
                service, fit_only, direct = overhead(
                    http, a9a, args.estimator, params, threads, args.repeat
                )
        finally:
            serve.stop()
    for label, values in (("POST sent", from_post), ("job row created", from_row)):
        ms = np.array(values) * 1000
        print(
            f"start latency, {label} -> worker claim, {args.jobs} jobs, {args.workers} idle "
            f"workers: p50 {np.percentile(ms, 50):.0f} ms, p90 {np.percentile(ms, 90):.0f} ms, "
            f"max {ms.max():.0f} ms"
        )
    print(f"{args.estimator} {params} on a9a, {threads} solver thread(s):")
    print(f"  through the service (claim to finish): {', '.join(f'{s:.3f}' for s in service)} s")
    print(f"  of which the fit inside the worker:    {', '.join(f'{s:.3f}' for s in fit_only)} s")
    print(f"  direct fit in this process:            {', '.join(f'{d:.3f}' for d in direct)} s")
    print(
        f"  ratio of bests: {min(service) / min(direct):.3f}, "
        f"of medians: {statistics.median(service) / statistics.median(direct):.3f}"
    )


if __name__ == "__main__":
    main()
