"""Peak resident memory that one request adds to the service's process tree (API, parser and
worker processes; mapped file pages included), at default settings.

Starts `margin serve` (SQLite, one worker) on a temporary data directory, then for each request
resets every process's high-water mark (/proc/<pid>/clear_refs), sends the request, and sums over
the tree (peak - resident before): the upload of `--upload-mb` MB of LIBSVM text (gzip, so the
transfer is small; parsed to disk), and the predict and upload attacks of the review.

    .venv/bin/python -m benchmarks.bench_request_memory [--upload-mb 200]
"""

from __future__ import annotations

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _process_memory as memory  # noqa: E402
from benchmarks._service import free_port  # noqa: E402


def wait_for(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not ready after {timeout:g} s")
        time.sleep(0.2)


def libsvm_text(mb: float) -> bytes:
    line = b"%d 1:0.5 7:1 12:0.25 13:-1 20:0.125 31:3\n"
    block = b"".join(line % (i % 2) for i in range(100_000))
    return block * max(1, int(mb * 2**20 / len(block)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upload-mb", type=float, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        env = {**os.environ, "DATA_DIR": f"{tmp}/data", "PORT": str(port), "WORKERS": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--demo"], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
        http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=600)
        try:
            wait_for(lambda: _up(http), 120, "margin serve")
            time.sleep(2)
            demo = http.get("/v1/datasets").json()["items"][0]["id"]
            job = http.post("/v1/jobs", json={"dataset_id": demo}).json()["id"]
            done = lambda: http.get(f"/v1/jobs/{job}").json()["status"] == "succeeded"  # noqa: E731
            wait_for(done, 120, "the demo job")
            model = http.get(f"/v1/jobs/{job}").json()["model_id"]
            text = libsvm_text(args.upload_mb)
            cases = [
                (f"upload {len(text) / 2**20:.0f} MB of LIBSVM text (gzip)",
                 "/v1/datasets", gzip.compress(text, 1), "application/octet-stream"),
                ("predict: 48 MiB of newlines", f"/v1/models/{model}/predict",
                 b"\n" * (48 << 20), "text/plain"),
                ("predict: 2,000,000 '1:1' lines", f"/v1/models/{model}/predict",
                 b"1:1\n" * 2_000_000, "text/plain"),
                ("predict: 10,000 dense rows of 13 values (accepted)",
                 f"/v1/models/{model}/predict",
                 b'{"instances": [' + b",".join([b"[" + b",".join([b"0.5"] * 13) + b"]"] * 10_000)
                 + b"]}", "application/json"),
                ("upload: gzip of 256 MiB of NUL bytes", "/v1/datasets",
                 gzip.compress(b"\0" * (256 << 20), 1), "application/octet-stream"),
            ]  # fmt: skip
            print(f"load average before: {os.getloadavg()}")
            print("| request | status | seconds | peak increase of the process tree (MB) |")
            print("|---|---|---|---|")
            for name, path, body, content_type in cases:
                with memory.measure(proc.pid) as peak:
                    start = time.perf_counter()
                    response = http.post(path, content=body, headers={"content-type": content_type})
                    seconds = time.perf_counter() - start
                print(f"| {name} | {response.status_code} | {seconds:.1f} | "
                      f"{peak.increase / memory.MB:.0f} |")  # fmt: skip
            print(f"load average after: {os.getloadavg()}")
        finally:
            http.close()
            os.killpg(proc.pid, 15)
            proc.wait(30)
    return 0


def _up(http: httpx.Client) -> bool:
    try:
        return http.get("/healthz").status_code == 200
    except httpx.TransportError:
        return False


if __name__ == "__main__":
    sys.exit(main())
