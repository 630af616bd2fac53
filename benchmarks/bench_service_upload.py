"""Upload + parse throughput through HTTP, and the API process's memory while it streams.

Builds a ~500 MB uncompressed LIBSVM file from real rows (mnist.scale.t repeated), starts
`margin api` on a temporary SQLite data directory, and uploads the file as multipart form data
with httpx (streamed from disk). Throughput is file size / wall time from the first byte sent to
the 201 response (receive, hash, parse in the parser process, store the arrays, commit). The API
process's RSS is sampled every 20 ms during the upload; the parser runs in its own process and is
not part of that figure (its peak is reported separately).

    .venv/bin/python -m benchmarks.bench_service_upload [--mb 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import bz2
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from benchmarks._service import MarginProcess, RssSampler, rss_mb

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT.parent / "shared" / "data" / "mnist" / "mnist.scale.t.bz2"
OUT = ROOT / "benchmarks" / "out"


def build_file(megabytes: float) -> Path:
    path = OUT / f"upload-{megabytes:g}MB.svm"
    if path.exists():
        return path
    OUT.mkdir(parents=True, exist_ok=True)
    block = bz2.decompress(SOURCE.read_bytes())
    repeats = max(1, round(megabytes * 2**20 / len(block)))
    with open(path, "wb") as handle:
        for _ in range(repeats):
            handle.write(block)
    return path


def children_of(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except FileNotFoundError:
        return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path = build_file(args.mb)
    size = path.stat().st_size
    with tempfile.TemporaryDirectory() as tmp:
        api = MarginProcess("api", Path(tmp), env={"MAX_UPLOAD_MB": str(4 * args.mb)})
        try:
            api.wait_ready()
            with httpx.Client(base_url=api.url, timeout=600) as http:
                # warm the parser process (spawned and its kernels loaded on first use)
                http.post("/v1/datasets", files={"file": ("w", b"1 1:1\n-1 2:1\n")})
                idle = rss_mb(api.process.pid)
                rates, peaks, parser_peaks = [], [], []
                for _ in range(args.repeat):
                    with RssSampler(api.process.pid) as sampler, open(path, "rb") as handle:
                        parser_pids = children_of(api.process.pid)
                        start = time.perf_counter()
                        response = http.post("/v1/datasets", files={"file": (path.name, handle)})
                        wall = time.perf_counter() - start
                    response.raise_for_status()
                    body = response.json()
                    http.delete(f"/v1/datasets/{body['id']}")
                    rates.append(size / 2**20 / wall)
                    peaks.append(sampler.peak)
                    parser_peaks.append(
                        max((_hwm_mb(p) for p in parser_pids), default=float("nan"))
                    )
        finally:
            api.stop()
    from solvers.io import load_libsvm

    start = time.perf_counter()
    load_libsvm(str(path))
    reader = size / 2**20 / (time.perf_counter() - start)
    print(f"file: {size / 2**20:.0f} MB, {body['n_rows']} rows, nnz {body['nnz']}")
    print(f"solvers.io.load_libsvm alone, same file, this process: {reader:.0f} MB/s")
    print(
        f"end-to-end MB/s per run: {', '.join(f'{r:.0f}' for r in rates)}"
        f" (median {statistics.median(rates):.0f})"
    )
    print(f"API RSS: idle {idle:.0f} MB, peak during uploads {max(peaks):.0f} MB")
    print(f"parser process peak RSS (VmHWM): {max(parser_peaks):.0f} MB")


def _hwm_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return float("nan")


if __name__ == "__main__":
    main()
