"""One-vs-rest on small dense sets against LIBLINEAR -s 1, idle and with a competing process.

Per set: LIBLINEAR's one-vs-rest (`train()`, single-threaded), ours on 1 thread and on
``--threads`` threads, and the sum of our per-class binary fits (the class-by-class way), median
of ``--repeat`` runs each, run in rounds of one of each, all at C 1, tol 0.1, no bias. Sets: dna,
pendigits (shared data), usps (usps-esl.t), ``dense-a`` (4,435 × 36, 6 classes) and ``dense-b``
(15,000 × 16, 26 classes): Gaussian class centres plus noise, each feature scaled to [-1, 1] —
the shapes of the satimage and letter sets. ``--busy`` runs a CPU-bound process beside the
measurements (the shared server).

    .venv/bin/python benchmarks/bench_ovr_small.py --repeat 5
    .venv/bin/python benchmarks/bench_ovr_small.py --repeat 5 --busy
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import SHARED_DATA, liblinear_problem, liblinear_train, output_block, read_dataset  # noqa: E402
from bench_parallel import spin  # noqa: E402

from solvers.binary import solve_binary  # noqa: E402
from solvers.multiclass.ovr import solve_ovr  # noqa: E402

FILES = {
    "dna": "dna/dna.scale",
    "pendigits": "pendigits/pendigits",
    "usps": "usps/usps-esl.t.bz2",
}
SHAPES = {"dense-a": (4435, 36, 6), "dense-b": (15000, 16, 26)}


def dense_set(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    X = rng.normal(size=(k, d))[y] + 1.5 * rng.normal(size=(n, d))
    X = (X - X.min(0)) / (X.max(0) - X.min(0)) * 2 - 1
    return sp.csr_matrix(X), y


def load(name):
    if name in SHAPES:
        return dense_set(*SHAPES[name])
    X, y = read_dataset(SHARED_DATA / FILES[name])
    classes, index = np.unique(y, return_inverse=True)
    return X, index.astype(np.int64)


def interleaved_medians(repeat, fns):
    """Median time of each function, run in rounds (one run of each per round) so that a change
    of the machine's load falls on all of them alike."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, runs in zip(fns, times, strict=True):
            t = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t)
    return [float(np.median(runs)) for runs in times]


def bench(name, threads, repeat):
    X, y = load(name)
    k = int(y.max()) + 1
    labels = [np.where(y == c, 1.0, -1.0) for c in range(k)]
    solve_ovr(X, y, k, n_jobs=threads)  # compiled and warm
    solve_binary(X, labels[0])
    prob = liblinear_problem(X, y.astype(np.float64))
    t_ll, t_one, t_many, t_by_class = interleaved_medians(
        repeat,
        [
            lambda: liblinear_train(prob, 1, 1.0, 0.1),
            lambda: solve_ovr(X, y, k, n_jobs=1),
            lambda: solve_ovr(X, y, k, n_jobs=threads),
            lambda: [solve_binary(X, lab) for lab in labels],
        ],
    )
    print(
        f"| {name} | {X.shape[0]:,} × {X.shape[1]}, {k} | {os.getloadavg()[0]:.1f} | {t_ll:.3f} | "
        f"{t_one:.3f} ({t_one / t_ll:.2f}) | {t_many:.3f} ({t_many / t_one:.2f}) | "
        f"{t_by_class:.3f} ({t_one / t_by_class:.2f}) |",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["dna", "pendigits", "usps", *SHAPES])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    competitor = spin() if args.busy else None
    try:
        with output_block(args.out):
            print(
                f"# busy={args.busy} (a competing CPU-bound process), "
                f"medians of {args.repeat} rounds"
            )
            print(
                "| set | rows × features, classes | load | LIBLINEAR -s 1 s | ours 1 thread s "
                f"(/LIBLINEAR) | ours {args.threads} threads s (/1 thread) | sum of per-class "
                "binary fits s (fused/by-class) |"
            )
            print("|---|---|---|---|---|---|---|")
            for name in args.sets:
                bench(name, args.threads, args.repeat)
    finally:
        if competitor is not None:
            competitor.kill()


if __name__ == "__main__":
    main()
