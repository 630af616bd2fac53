"""One binary problem on several threads, against LIBLINEAR single- and multi-core, same run.

For each set, loss and tol: our solver on 1 thread and on each of ``--threads`` (the default
shared-vector rounds, and ``deterministic=True``), LIBLINEAR ``-s 1`` / ``-s 3`` (single-threaded,
liblinear-official) and, when ``--multicore-python`` names the interpreter of a virtual environment
holding ``liblinear-multicore`` (it installs the same ``liblinear`` module, so it needs its own),
multi-core LIBLINEAR with ``-m`` at the same thread counts. Time of the solve only (LIBLINEAR's
problem is built before its timer starts; ours takes the CSR as it is), best of ``--repeat``.
Sets: ``rcv1-like`` (the generator `benchmarks._common.rcv1_like`: 677,399 × 47,236, 73 distinct
non-zeros a row drawn with Zipf-like feature popularity, tf-idf-like values, unit-norm rows;
``--scale`` shrinks the rows), ``news20`` (raw term counts, classes 1–10 vs 11–20), ``mnist``
(mnist.scale.t, digits 0–4 vs 5–9), ``a9a``, ``dense`` (50,000 × 30 Gaussian, two classes) and
``tenmillion`` (`synthetic_sparse` with 10,000,000 × 1,000,000, 40 non-zeros a row; ``--scale``
applies). ``--busy`` runs a CPU-bound competing process during the measurements.

    .venv/bin/python benchmarks/bench_parallel.py --sets a9a dense news20 mnist rcv1-like \\
        --scale 0.25 --tols 0.1 0.01 --threads 2 --multicore-python /tmp/mc/bin/python
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import (  # noqa: E402
    SHARED_DATA,
    liblinear_problem,
    liblinear_train,
    output_block,
    rcv1_like,
    read_dataset,
    synthetic_sparse,
)

from solvers._core.problem import csr_arrays  # noqa: E402
from solvers.binary import parallel, solve_binary  # noqa: E402

SOLVER = {"squared_hinge": 1, "hinge": 3}
MULTICORE_LIMIT = 20  # seconds for all of one row's -m runs (OpenMP spin-waits on a busy machine)
MULTICORE = """
import sys, time, numpy as np, scipy.sparse as sp
from liblinear.liblinear import liblinear, parameter, problem
data = np.load(sys.argv[1]); X = sp.csr_matrix((data["data"], data["indices"], data["indptr"]),
    shape=tuple(data["shape"])); y = data["y"]
prob = problem(y, X)
for opts in sys.argv[2:]:
    param = parameter(opts + " -q"); liblinear.set_print_string_function(param.print_func)
    best = float("inf")
    for _ in range(int(data["repeat"])):
        t = time.perf_counter(); liblinear.train(prob, param)
        best = min(best, time.perf_counter() - t)
    print(best, flush=True)
"""


def load(name, scale):
    if name == "rcv1-like":
        return rcv1_like(scale)
    if name == "tenmillion":
        return synthetic_sparse(int(10_000_000 * scale), 1_000_000, 40, seed=1)
    if name == "dense":
        rng = np.random.default_rng(0)
        X = rng.normal(size=(50_000, 30))
        y = np.where(X @ rng.normal(size=30) + rng.normal(size=50_000) > 0, 1.0, -1.0)
        return sp.csr_matrix(X), y
    files = {
        "news20": "news20/news20.bz2",
        "mnist": "mnist/mnist.scale.t.bz2",
        "a9a": "a9a/a9a.bz2",
    }
    X, y = read_dataset(SHARED_DATA / files[name])
    if name == "news20":
        return X, np.where(y <= 10, 1.0, -1.0)
    if name == "mnist":
        return X, np.where(y <= 4, 1.0, -1.0)
    return X, np.where(y == y.max(), 1.0, -1.0)


def best_of(repeat, fn):
    best, out = np.inf, None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def multicore_times(python, X, y, options, repeat):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "set.npz"
        np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, y=y,
                 repeat=repeat)  # fmt: skip
        try:
            out = subprocess.run(
                [python, "-c", MULTICORE, str(path), *options], capture_output=True, text=True,
                check=True, timeout=MULTICORE_LIMIT,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return [f"> {MULTICORE_LIMIT} s (all -m runs)"] * len(options)
    return [f"{float(v):.3f}" for v in out.stdout.split()]


def bench(name, X, y, args):
    solve_binary(X[:200], y[:200], n_jobs=max(args.threads), tol=args.tols[0])  # compile
    prob = liblinear_problem(X, y)
    for loss in args.losses:
        for tol in args.tols:
            t1, one = best_of(args.repeat, lambda l=loss, t=tol: solve_binary(X, y, loss=l, tol=t))
            tl, _ = best_of(
                args.repeat, lambda s=SOLVER[loss], t=tol: liblinear_train(prob, s, 1.0, t)
            )
            mc = []
            if args.multicore_python:
                options = [f"-s {SOLVER[loss]} -c 1 -e {tol} -m {k}" for k in args.threads]
                mc = multicore_times(args.multicore_python, X, y, options, args.repeat)
            for j, k in enumerate(args.threads):
                for det in (False, True):
                    options = {"loss": loss, "tol": tol, "n_jobs": k, "deterministic": det}
                    tk, res = best_of(args.repeat, lambda o=options: solve_binary(X, y, **o))
                    used = parallel.threads_for(csr_arrays(X), X.shape[0], k, det)
                    mode = f"{'deterministic' if det else 'shared'}, {used} used"
                    mc_k = mc[j] if mc else "-"
                    print(
                        f"| {name} | {loss} | {tol:g} | {k} {mode} | {tk:.3f} ({res.n_iter}) | "
                        f"{t1:.3f} ({one.n_iter}) | {t1 / tk:.2f} | {tl:.3f} | {tl / tk:.2f} | "
                        f"{mc_k} | {res.status.value} | {res.primal / one.primal - 1:+.1e} |",
                        flush=True,
                    )


def spin():
    """A competing CPU-bound process (the busy machine of a shared server)."""
    code = "import time\nwhile True:\n    sum(i * i for i in range(10000))\n"
    return subprocess.Popen([sys.executable, "-c", code])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="+", default=["a9a", "dense", "news20", "mnist"])
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--losses", nargs="+", default=["squared_hinge", "hinge"])
    parser.add_argument("--tols", type=float, nargs="+", default=[0.1, 0.01])
    parser.add_argument("--threads", type=int, nargs="+", default=[os.cpu_count() or 1])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--multicore-python", default=None)
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--out", default=None, help="a fragment of benchmarks/results/")
    args = parser.parse_args()
    competitor = spin() if args.busy else None
    try:
        with output_block(args.out):
            print(f"# machine: {os.cpu_count()} cores, busy={args.busy}, load at start "
                  f"{os.getloadavg()[0]:.2f}")  # fmt: skip
            print("| set | loss | tol | threads | ours k s (iter) | ours 1 s (iter) | speed-up | "
                  "LIBLINEAR 1 s | vs LIBLINEAR | multi-core LIBLINEAR -m k s | status | "
                  "primal vs 1 thread |")  # fmt: skip
            print("|---|---|---|---|---|---|---|---|---|---|---|---|")
            for name in args.sets:
                X, y = load(name, args.scale)
                bench(name, X, y, args)
            print(f"# load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        if competitor is not None:
            competitor.kill()


if __name__ == "__main__":
    main()
