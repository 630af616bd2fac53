"""Where the time of the parallel binary rounds goes (`solvers.binary.parallel`), 1 and 2 threads.

Two measurements, on ``rcv1-like`` (Zipf-like feature popularity, `benchmarks._common.rcv1_like`)
and ``uniform`` (`synthetic_sparse`, 1,000,000 features, 40 uniform non-zeros a row; ``--scale``
× 10M rows):

- ``rounds``: rounds to tol of the shared rounds on 2 threads when w̃ is rebuilt from α every
  ``RESYNC_EVERY`` rounds (the default) and every 100 rounds, against the serial passes, two
  seeds each. The crowding fallback is off, so every round runs on both threads.
- ``pass``: the wall time of one pass over every sample in a random order, on one thread, on two
  threads sharing w̃ (the shared rounds) and on two threads with a copy of w̃ each (what the
  deterministic rounds do), from α = 0 (every sample steps) and again after it (fewer steps);
  then one pass over the support vectors (α_i > 0) of the solution after 8 serial passes (tol
  0.01), which is what shrinking leaves to the late rounds: every step there writes w̃.
  ``--passes-only`` skips the rounds.

    .venv/bin/python benchmarks/bench_parallel_anatomy.py --sets rcv1-like uniform --scale 0.1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import output_block, rcv1_like, synthetic_sparse  # noqa: E402

from solvers._core.problem import csr_arrays  # noqa: E402
from solvers.binary import crowding, parallel, solve_binary  # noqa: E402
from solvers.binary import parallel_kernels as pk  # noqa: E402
from solvers.binary.state import SolveState  # noqa: E402

LOSSES = ("squared_hinge", "hinge")


def load(name, scale):
    if name == "rcv1-like":
        return rcv1_like(scale)
    return synthetic_sparse(int(10_000_000 * scale), 1_000_000, 40, seed=1)


def rounds(name, X, y, tols):
    crowding.CPU_SHARE_FLOOR = 0.0
    default = parallel.RESYNC_EVERY
    for loss in LOSSES:
        for tol in tols:
            serial = [solve_binary(X, y, loss=loss, tol=tol, random_state=s).n_iter for s in (0, 1)]
            cells = []
            for every in (default, 100):
                parallel.RESYNC_EVERY = every
                cells.append(
                    [
                        solve_binary(X, y, loss=loss, tol=tol, n_jobs=2, random_state=s).n_iter
                        for s in (0, 1)
                    ]
                )
            parallel.RESYNC_EVERY = default
            print(f"| {name} | {loss} | {tol:g} | {serial} | {cells[0]} | {cells[1]} |", flush=True)


def one_pass(state, order, w, pool, chunks):
    """Wall seconds of one pass over ``order`` cut in ``chunks`` threads, on the vectors ``w``."""
    none = np.empty(0)
    parts = np.array_split(order, chunks)
    started = time.perf_counter()
    futures = [
        pool.submit(
            pk.block_epoch, state.csr, state.bias, state.record, w[b], parts[b].copy(),
            parts[b].shape[0], (np.inf, -np.inf), 1.0, none, 0, False,
        )  # fmt: skip
        for b in range(chunks)
    ]
    for future in futures:
        future.result()
    return time.perf_counter() - started


def passes(name, X, y, repeat):
    csr = csr_arrays(X)
    order = np.random.default_rng(0).permutation(X.shape[0]).astype(np.uint32)
    pool = ThreadPoolExecutor(2)
    C = np.array([1.0])
    late = solve_binary(csr, y, tol=0.01, max_iter=8, random_state=0).alpha
    support = np.flatnonzero(late > 0).astype(np.uint32)
    support = support[np.random.default_rng(1).permutation(support.shape[0])]
    for start in ("α = 0", "after one pass", f"support vectors, {support.shape[0]:,} rows"):
        best = {}
        for _ in range(repeat):
            for label, chunks, private in (("1 thread", 1, False), ("2 shared", 2, False),
                                           ("2 private", 2, True)):  # fmt: skip
                late_round = start.startswith("support")
                warm = late if late_round else None
                state = SolveState.build(csr, y, C, "squared_hinge", 0.0, warm)
                if start == "after one pass":
                    one_pass(state, order, [state.w], pool, 1)
                w = [state.w.copy() for _ in range(chunks)] if private else [state.w] * chunks
                seconds = one_pass(state, support if late_round else order, w, pool, chunks)
                best[label] = min(best.get(label, np.inf), seconds)
        one, shared, private = best["1 thread"], best["2 shared"], best["2 private"]
        print(
            f"| {name} | {start} | {one:.3f} | {shared:.3f} ({one / shared:.2f}×) "
            f"| {private:.3f} ({one / private:.2f}×) |",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["rcv1-like", "uniform"])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--tols", type=float, nargs="+", default=[0.1, 0.01])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--passes-only", action="store_true", help="skip the rounds to tol")
    parser.add_argument("--out", default=None, help="a fragment of benchmarks/results/")
    args = parser.parse_args()
    data = {name: load(name, args.scale) for name in args.sets}
    solve_binary(*(a[:2000] for a in data[args.sets[0]]), n_jobs=2)  # compile
    with output_block(args.out):
        at_start = os.getloadavg()[0]
        print(f"# {os.cpu_count()} cores, load at start {at_start:.2f}; scale {args.scale}")
        if not args.passes_only:
            print("| set | loss | tol | serial passes | 2 threads, rebuild every "
                  f"{parallel.RESYNC_EVERY} rounds | every 100 rounds |")  # fmt: skip
            print("|---|---|---|---|---|---|")
            for name, (X, y) in data.items():
                rounds(name, X, y, args.tols)
        print("| set | pass from | 1 thread s | 2 threads, one shared w̃ s | "
              "2 threads, a w̃ each s |")  # fmt: skip
        print("|---|---|---|---|---|")
        for name, (X, y) in data.items():
            passes(name, X, y, args.repeat)
        print(f"# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
