"""Object storage against the file default: upload throughput and job start latency.

Starts `margin serve --workers 1` (SQLite, the local pool) twice on fresh data directories: with
STORAGE_URL unset (the data directory) and with STORAGE_URL=s3://... on moto's S3 server on
loopback (started here; production runs MinIO or another S3 service, over a network). For each:

- upload: POST /v1/datasets of a generated LIBSVM file (--rows rows, 20 non-zeros each), a
  different file each time; MB/s of the file as sent, over the whole request (received, parsed
  and stored: for S3 the arrays are uploaded before the answer);
- job start latency: from POST /v1/jobs to the job's first progress record (claimed, dataset
  loaded, first pass done), for the first job on a dataset (S3: the worker downloads it into its
  cache) and for a second job on the same dataset (the cached copy).

Medians of --repeat runs; the machine's load average is printed with the figures.

    .venv/bin/python -m benchmarks.bench_storage [--rows 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

from benchmarks._service import MarginProcess


def write_file(path: Path, rows: int, seed: int) -> int:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for start in range(0, rows, 10_000):
            n = min(10_000, rows - start)
            cols = np.arange(20) * 50 + rng.integers(0, 50, size=(n, 20)) + 1  # increasing
            vals = rng.random((n, 20))
            labels = np.where(rng.random(n) < 0.5, -1, 1)
            f.writelines(
                f"{lab} " + " ".join(f"{c}:{v:.4f}" for c, v in zip(cr, vr, strict=True)) + "\n"
                for lab, cr, vr in zip(labels, cols, vals, strict=True)
            )
    return path.stat().st_size


def first_progress(http: httpx.Client, dataset_id: str) -> float:
    start = time.perf_counter()
    job = http.post("/v1/jobs", json={"dataset_id": dataset_id, "params": {"max_iter": 3}})
    job_id = job.json()["id"]
    while True:
        body = http.get(f"/v1/jobs/{job_id}").json()
        if body["progress"] is not None or body["status"] in ("succeeded", "failed"):
            took = time.perf_counter() - start
            break
        time.sleep(0.005)
    while http.get(f"/v1/jobs/{job_id}").json()["status"] not in ("succeeded", "failed"):
        time.sleep(0.02)
    return took


def run(mode: str, files: list[Path], env: dict, tmp: Path) -> dict:
    data = tmp / f"data-{mode}"
    data.mkdir()
    server = MarginProcess("serve", data, "--workers", "1", env=env)
    try:
        server.wait_ready("/readyz", timeout=180)
        uploads, cold, warm = [], [], []
        with httpx.Client(base_url=server.url, timeout=600) as http:
            for path in files:
                start = time.perf_counter()
                with open(path, "rb") as f:
                    response = http.post("/v1/datasets", files={"file": (path.name, f)})
                took = time.perf_counter() - start
                assert response.status_code == 201, response.text
                uploads.append(path.stat().st_size / 2**20 / took)
                dataset_id = response.json()["id"]
                cold.append(first_progress(http, dataset_id))
                warm.append(first_progress(http, dataset_id))
        return {
            "upload_mb_s": statistics.median(uploads),
            "start_cold_s": statistics.median(cold),
            "start_warm_s": statistics.median(warm),
        }
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from benchmarks._s3server import MotoServer

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        files = [tmp / f"upload-{i}.svm" for i in range(args.repeat)]
        size = [write_file(path, args.rows, seed=i) for i, path in enumerate(files)][0]
        moto = MotoServer(tmp / "moto.log")
        try:
            moto.client().create_bucket(Bucket="bench")
            results = {
                "file": run("file", files, {}, tmp),
                "s3": run("s3", files, {**moto.env, "STORAGE_URL": "s3://bench/margin"}, tmp),
            }
        finally:
            moto.stop()
    print(f"load average {os.getloadavg()}; file {size / 2**20:.1f} MB, {args.rows} rows")
    print("| storage | upload MB/s | job start, first on the dataset (s) | job start, cached (s) |")
    print("|---|---|---|---|")
    for mode, r in results.items():
        print(
            f"| {mode} | {r['upload_mb_s']:.1f} | {r['start_cold_s']:.2f} | "
            f"{r['start_warm_s']:.2f} |"
        )
    s3, file = results["s3"], results["file"]
    print(
        f"ratios s3/file: upload throughput {s3['upload_mb_s'] / file['upload_mb_s']:.2f}, "
        f"first start {s3['start_cold_s'] / file['start_cold_s']:.2f}, "
        f"cached start {s3['start_warm_s'] / file['start_warm_s']:.2f}"
    )


if __name__ == "__main__":
    main()
