"""Reader throughput: `solvers.read_libsvm` against scikit-learn's `load_svmlight_file`.

Both readers parse the same uncompressed files (the shared .bz2 sets are decompressed to a
temporary directory first, so decompression is not measured), one after the other in this
process, single-threaded. The synthetic file is also read gzip-compressed (level 1) to show the
cost of decompression; its MB are those of the text. Reported per file: MB/s from the best-of-N
CPU time of the process (robust on a shared machine) and from the best-of-N wall time, with the
same N for both readers, the speed ratios, and the extra peak resident memory of one read (in a
fresh interpreter, after imports and compiling) over the size of the CSR result.
Numba compile time of the parser is measured in fresh interpreters: once with an empty cache
directory (cold) and once more with the cache it filled (cached).

    .venv/bin/python benchmarks/bench_reader.py [--synthetic-mb 200] [--repeat 3]
        [--out benchmarks/results/reader.md]

Targets (issue 2): at least 5x scikit-learn's MB/s and at least 200 MB/s.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import ROOT, SHARED_DATA, csr_nbytes, output_block  # noqa: E402

FILES = {
    "a9a": ("a9a", "a9a.bz2"),
    "w8a": ("w8a", "w8a.bz2"),
    "news20": ("news20", "news20.bz2"),
    "sector": ("sector", "sector.scale.bz2"),
    "mnist.scale.t": ("mnist", "mnist.scale.t.bz2"),
}
COMPILE_SNIPPET = """
import io, time
wall, cpu = time.perf_counter(), time.process_time()
import numpy as np
from solvers.io import read_libsvm
for dtype in (np.float64, np.float32):
    read_libsvm(io.BytesIO(b"1 1:0.5 2:1e-3\\n-1 qid:2 3:7\\n"), dtype=dtype)
print(time.perf_counter() - wall, time.process_time() - cpu)
"""
PEAK_SNIPPET = """
import io, sys
sys.path.insert(0, "benchmarks")
from bench_reader import {reader} as reader

def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

reader(io.BytesIO(b"1 1:0.5\\n-1 2:1\\n"))
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset the high-water mark to the current resident size
before = status_kib("VmRSS")
X, y = reader({path!r})
print((status_kib("VmHWM") - before) * 1024)
"""


def decompress(name, folder):
    target = folder / name
    with bz2.open(SHARED_DATA.joinpath(*FILES[name]), "rb") as src, open(target, "wb") as dst:
        while chunk := src.read(1 << 24):
            dst.write(chunk)
    return target


def synthetic(folder, megabytes, seed=0):
    """An rcv1-like file: ~75 entries per row, values with 6 decimals, 47k features."""
    from solvers.io import write_libsvm

    rows = int(megabytes * 1e6 / 1100)
    rng = np.random.default_rng(seed)
    counts = rng.integers(20, 130, size=rows)
    indptr = np.concatenate([[0], np.cumsum(counts)])
    indices = np.concatenate([np.sort(rng.choice(47236, size=c, replace=False)) for c in counts])
    values = rng.integers(1, 300_000, size=indptr[-1]) / 1e6  # written as 0.xxxxxx
    X = sp.csr_matrix((values, indices, indptr), shape=(rows, 47236))
    path = folder / f"synthetic-{megabytes}MB.svm"
    write_libsvm(path, X, rng.choice([-1.0, 1.0], size=rows))
    return path


def gzipped(path):
    target = path.with_name(path.name + ".gz")
    with open(path, "rb") as src, gzip.open(target, "wb", compresslevel=1) as dst:
        while chunk := src.read(1 << 24):
            dst.write(chunk)
    return target


def ours(path):
    from solvers.io import read_libsvm

    return read_libsvm(path)


def sklearn_reader(path):
    from sklearn.datasets import load_svmlight_file

    return load_svmlight_file(path if hasattr(path, "read") else str(path))


def measure(reader, path, repeat):
    """Best wall and best CPU seconds of ``repeat`` reads, result bytes, extra peak RSS bytes."""
    wall, cpu = np.inf, np.inf
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        X, y = reader(path)
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    result = csr_nbytes(X) + y.nbytes
    del X, y
    return wall, cpu, result, peak_in_fresh_process(reader.__name__, path)


def peak_in_fresh_process(reader_name, path):
    """Peak resident bytes one read adds in a fresh interpreter (after imports and compiling)."""
    code = PEAK_SNIPPET.format(reader=reader_name, path=str(path))
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True, text=True
    )
    return int(out.stdout)


def compile_times():
    """(wall, CPU) seconds of import + first reads in a fresh interpreter: cold, then cached."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        run = [sys.executable, "-c", COMPILE_SNIPPET]
        times = []
        for _ in ("cold", "cached"):
            out = subprocess.run(run, env=env, cwd=ROOT, capture_output=True, check=True)
            times.append(tuple(float(t) for t in out.stdout.split()))
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--synthetic-mb", type=int, default=200, help="0 to skip")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--out", help="also write the output into this benchmarks/results/ fragment"
    )
    args = parser.parse_args()
    with output_block(args.out):
        run(args)


def run(args):
    print(
        f"# best of {args.repeat} reads each; load average {os.getloadavg()[0]:.2f} at start",
        flush=True,
    )
    # both readers warmed up outside the timings (ours compiles, scikit-learn's imports)
    ours(SHARED_DATA / "heart_scale" / "heart_scale")
    sklearn_reader(SHARED_DATA / "heart_scale" / "heart_scale")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = [
            decompress(name, folder)
            for name in FILES
            if SHARED_DATA.joinpath(*FILES[name]).exists()
        ]
        if args.synthetic_mb:
            t0 = time.perf_counter()
            paths.append(synthetic(folder, args.synthetic_mb))
            paths.append(gzipped(paths[-1]))
            print(f"# synthetic files written in {time.perf_counter() - t0:.1f} s", flush=True)
        print(
            "| file | MB | ours MB/s (CPU) | sklearn MB/s (CPU) | speed-up (CPU) "
            "| ours MB/s (wall) | sklearn MB/s (wall) | speed-up (wall) "
            "| extra peak RSS / CSR result: ours | sklearn |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|", flush=True)
        for path in paths:
            text = path.with_suffix("") if path.suffix == ".gz" else path
            mb = text.stat().st_size / 1e6  # MB of text, also for the compressed copy
            w_ours, c_ours, result, peak_ours = measure(ours, path, args.repeat)
            w_sk, c_sk, _, peak_sk = measure(sklearn_reader, path, args.repeat)
            print(
                f"| {path.name} | {mb:.1f} | {mb / c_ours:.0f} | {mb / c_sk:.0f} | "
                f"{c_sk / c_ours:.1f}x | {mb / w_ours:.0f} | {mb / w_sk:.0f} | "
                f"{w_sk / w_ours:.1f}x | {peak_ours / result:.2f} | {peak_sk / result:.2f} |",
                flush=True,
            )
    (cold_wall, cold_cpu), (warm_wall, warm_cpu) = compile_times()
    print(
        f"\nParser start-up in a fresh interpreter (import + first read, float64 and float32 "
        f"kernels): cold cache {cold_cpu:.2f} s CPU ({cold_wall:.2f} s wall), cached "
        f"{warm_cpu:.2f} s CPU ({warm_wall:.2f} s wall)."
    )


if __name__ == "__main__":
    main()
