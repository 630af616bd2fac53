"""The service's dense predictions with one BLAS thread (BLAS_THREADS=1, the default) against
the BLAS library's own default (a thread per core): alone, with concurrent requests, and on a
busy machine.

Per batch shape (rows × features × classes): the decision values of a stored model's dense
rows, as `/v2/.../infer` computes them (`app.services.tensors.decision_dense`), with the BLAS
library limited to one thread and to every core (threadpoolctl), in alternating rounds, the
median of ``--repeat`` rounds of the time per call. ``--callers N``: N threads call at once, as
the API's thread pool serves N requests (each call's time is the round's wall time over the
calls). ``--busy N``: N CPU-bound processes run beside the measurements (one per core is a worker
training with SOLVER_THREADS at the cores). The ratio is one thread's time over every core's:
above 1, one BLAS thread is slower.

    .venv/bin/python benchmarks/bench_blas_threads.py --repeat 11
    .venv/bin/python benchmarks/bench_blas_threads.py --repeat 11 --callers 4
    .venv/bin/python benchmarks/bench_blas_threads.py --repeat 11 --busy 2
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
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


def per_call(fn, calls: int, callers: int) -> float:
    """Seconds per call of `fn` with `callers` threads each making `calls` calls at once."""

    def run():
        for _ in range(calls):
            fn()

    threads = [threading.Thread(target=run) for _ in range(callers)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return (time.perf_counter() - start) / (calls * callers)


def measure(shape, repeat: int, cores: int, callers: int) -> tuple[float, float]:
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
                times[threads].append(per_call(lambda: decision_dense(model, X), calls, callers))
    return float(np.median(times[1])), float(np.median(times[cores]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=11)
    parser.add_argument("--callers", type=int, default=1, help="threads calling at once")
    parser.add_argument("--busy", type=int, default=0, metavar="N",
                        help="competing CPU-bound processes")  # fmt: skip
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    competitors = [spin() for _ in range(args.busy)]
    try:
        with output_block(args.out):
            print(f"# {args.callers} caller(s) at once, {args.busy} competing CPU-bound "
                  f"process(es), {cores} cores, load average {os.getloadavg()[0]:.2f} at the "
                  f"start; median of {args.repeat} rounds")  # fmt: skip
            print(f"| rows × features × classes | 1 thread ms | {cores} threads ms | ratio |")
            print("|---|---|---|---|")
            for shape in SHAPES:
                one, every = measure(shape, args.repeat, cores, args.callers)
                label = " × ".join(f"{n:,}" for n in shape)
                print(f"| {label} | {one * 1e3:.3f} | {every * 1e3:.3f} | {one / every:.2f} |")
    finally:
        for competitor in competitors:
            competitor.kill()


if __name__ == "__main__":
    main()
