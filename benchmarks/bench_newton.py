"""Squared hinge where dual coordinate descent stalls: ours (with its Newton finish) vs LIBLINEAR.

Per set and C: our solver at tol 0.1 (dual passes, then the primal Newton finish when they stall),
the same without the finish (``newton=False``), LIBLINEAR -s 1 (its dual solver, which switches to
-s 2 after its pass budget) and -s 2 (primal Newton from the start, its default -e 0.01). Time of
the solve only, best of ``--repeat`` runs taken in turns (each side's conversion of the data,
LIBLINEAR's `problem` and our checked `csr_arrays` view, is made once before the timings); the
primal objective of every model and our duality gap of the returned (w, α) (the certificate).
Sets: ``news20`` (raw term counts, classes 1–10 vs 11–20), ``sector`` (class 1 vs the rest),
``mnist`` (mnist.scale.t, 0–4 vs 5–9) and ``rcv1-like`` (`benchmarks._common.rcv1_like`,
``--scale`` of its rows).

    .venv/bin/python benchmarks/bench_newton.py --sets news20 sector mnist rcv1-like --scale 0.1
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import (  # noqa: E402
    SHARED_DATA,
    binary_primal,
    liblinear_problem,
    liblinear_train,
    output_block,
    rcv1_like,
    read_dataset,
)

from solvers._core.problem import csr_arrays  # noqa: E402
from solvers.binary import solve_binary  # noqa: E402

FILES = {
    "news20": "news20/news20.bz2",
    "sector": "sector/sector.scale.bz2",
    "mnist": "mnist/mnist.scale.t.bz2",
}


def load(name, scale):
    if name == "rcv1-like":
        return rcv1_like(scale)
    X, y = read_dataset(SHARED_DATA / FILES[name])
    if name == "news20":
        return X, np.where(y <= 10, 1.0, -1.0)
    if name == "mnist":
        return X, np.where(y <= 4, 1.0, -1.0)
    return X, np.where(y == 1, 1.0, -1.0)


def best_in_turns(repeat, fns):
    """Best time and last output of each of ``fns``, run in turns ``repeat`` times (a slow
    stretch of the machine then falls on every side alike)."""
    best, outs = [np.inf] * len(fns), [None] * len(fns)
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            t = time.perf_counter()
            outs[k] = fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return list(zip(best, outs, strict=True))


def bench(name, X, y, C, repeat):
    # each side's own form of the data made once, outside the timings: LIBLINEAR's problem, and
    # the checked view our solvers take (`solvers._core.problem.csr_arrays`)
    prob, data = liblinear_problem(X, y), csr_arrays(X)
    (t_ours, ours), (t_dcd, dcd), (t_s1, m1), (t_s2, m2) = best_in_turns(repeat, [
        lambda: solve_binary(data, y, C=C, tol=0.1),
        lambda: solve_binary(data, y, C=C, tol=0.1, newton=False),
        lambda: liblinear_train(prob, 1, C, 0.1),
        lambda: liblinear_train(prob, 2, C, 0.01),
    ])  # fmt: skip

    def p_of(model):
        w, b, labels, _ = model
        if labels[0] != 1:
            w, b = -w, -b
        return binary_primal(X, y, w, b, C, "squared_hinge", 0.0)

    p1, p2 = p_of(m1), p_of(m2)
    print(
        f"| {name} | {C:g} | {t_ours:.3f} ({ours.method}, {ours.n_iter}, {ours.status.value}) | "
        f"{ours.duality_gap:.1e} | {t_dcd:.3f} ({dcd.status.value}) | {t_s1:.3f} | {t_s2:.3f} | "
        f"{t_ours / t_s1:.2f} | {t_ours / t_s2:.2f} | {ours.primal / p1 - 1:+.1e} | "
        f"{ours.primal / p2 - 1:+.1e} |",
        flush=True,
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["news20", "sector", "mnist", "rcv1-like"])
    parser.add_argument("--C", type=float, nargs="+", default=[1.0, 10.0, 100.0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    with output_block(args.out):
        print(f"# load average at the start {os.getloadavg()[0]:.2f}")
        print(
            "| set | C | ours s (finish, passes+steps, status) | ours duality gap | ours without "
            "the finish s | LIBLINEAR -s 1 s | -s 2 s | ours / -s 1 | ours / -s 2 | primal vs "
            "-s 1 | primal vs -s 2 |"
        )
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        solve_binary(np.eye(3), np.array([1.0, -1.0, 1.0]))  # compiled before timing
        for name in args.sets:
            X, y = load(name, args.scale)
            for C in args.C:
                bench(name, X, y, C, args.repeat)
        print(f"# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
