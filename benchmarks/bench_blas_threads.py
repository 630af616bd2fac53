"""The service's dense predictions with one BLAS thread (BLAS_THREADS=1, the default) against
the BLAS library's own default (a thread per core), idle and with a competing process.

Per batch shape (rows × features × classes): the decision values of a stored model's dense
rows, as `/v2/.../infer` computes them (`app.services.tensors.decision_dense`), timed with the
BLAS library limited to one thread and to every core (threadpoolctl) in alternating rounds,
median of ``--repeat`` rounds; the ratio is one thread's time over every core's. ``--busy`` runs
a CPU-bound process beside the measurements, as the service's own solver threads and requests
do on a working server.

    .venv/bin/python benchmarks/bench_blas_threads.py --repeat 21
    .venv/bin/python benchmarks/bench_blas_threads.py --repeat 21 --busy
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import output_block  # noqa: E402
from bench_parallel import spin  # noqa: E402

from app.services.prediction import LinearModel  # noqa: E402
from app.services.tensors import decision_dense  # noqa: E402

# (rows, features, classes): one instance, a small batch, and MAX_PREDICT_BATCH's 10,000 rows
SHAPES = [(1, 2000, 20), (100, 100, 10), (5000, 100, 10), (10_000, 1000, 1)]


def timed(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def measure(shape, repeat: int, cores: int) -> tuple[float, float]:
    rows, features, classes = shape
    rng = np.random.default_rng(0)
    model = LinearModel(
        id="bench", kind="classifier", classes=list(range(max(2, classes))), n_features=features,
        zero_based=False, coef=rng.standard_normal((classes, features)),
        intercept=np.zeros(classes),
    )  # fmt: skip
    X = rng.standard_normal((rows, features))
    calls = max(1, 2_000_000 // (rows * features))  # about the same work per round
    times = {1: [], cores: []}
    for _ in range(repeat):
        for threads in times:
            with threadpool_limits(limits=threads, user_api="blas"):
                decision_dense(model, X)
                times[threads].append(timed(lambda: decision_dense(model, X), calls))
    return float(np.median(times[1])), float(np.median(times[cores]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    competitor = spin() if args.busy else None
    try:
        with output_block(args.out):
            print(f"# busy={args.busy} (a competing CPU-bound process), {cores} cores, "
                  f"load average {os.getloadavg()[0]:.2f} at the start; median of "
                  f"{args.repeat} rounds")  # fmt: skip
            print(f"| rows × features × classes | 1 thread ms | {cores} threads ms | ratio |")
            print("|---|---|---|---|")
            for shape in SHAPES:
                one, every = measure(shape, args.repeat, cores)
                label = " × ".join(f"{n:,}" for n in shape)
                print(f"| {label} | {one * 1e3:.3f} | {every * 1e3:.3f} | {one / every:.2f} |")
    finally:
        if competitor is not None:
            competitor.kill()


if __name__ == "__main__":
    main()
