"""Binary dual coordinate descent against LIBLINEAR and scikit-learn, in the same run.

For each data set, loss and tol: our train time (median of --repeat runs over seeds 0, 1, ...,
after a warm-up compile), LIBLINEAR's train time (median of as many runs; its data conversion
timed apart), scikit-learn's LinearSVC fit time,
the time ratio, the primal objectives' relative difference, and peak memory during training
(the resident high-water mark a training call adds in a fresh process, after a warm-up call on
200 rows, net of a call doing nothing, plus the CSR input, as a multiple of the CSR input; see
`benchmarks._common.peak_net_of_noop`).

Where LIBLINEAR stops at its 300-pass cap the table says so: its -s 3 (hinge) simply stops, and
ours is then timed under the same cap as well (a "both capped" row); its -s 1 (squared hinge)
switches to a primal Newton solve (-s 2) at the cap, which its time includes ("then -s 2"), so
there is no capped row for the squared hinge: the two would not be doing the same work.
Then Numba compile time, cold (empty cache) and cached (`import solvers` + first fit in a fresh
process).

    .venv/bin/python benchmarks/bench_binary.py --sets a9a w8a --tols 0.1 0.001
    .venv/bin/python benchmarks/bench_binary.py --sets rcv1-like --scale 0.1   # development size
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import (  # noqa: E402
    best_time,
    binary_primal,
    csr_nbytes,
    liblinear_binary_w,
    liblinear_problem,
    liblinear_train,
    load_binary,
    news20_like,
    output_block,
    peak_net_of_noop,
    rcv1_like,
)
from solvers.binary import solve_binary  # noqa: E402

LIBLINEAR_SOLVER = {"squared_hinge": 1, "hinge": 3}
# LIBLINEAR 2.50 stops its dual coordinate descent (-s 1, -s 3) after this many passes.
LIBLINEAR_DUAL_PASSES = 300
REAL = ("a9a", "w8a", "news20", "reuters")


def load(name, scale, dtype):
    if name == "rcv1-like":
        return rcv1_like(scale, dtype=dtype)
    if name == "news20-like":
        return news20_like(scale, dtype=dtype)
    X, y = load_binary(name, dtype=dtype)
    if name == "news20":
        # raw word counts: both solvers stall at their iteration limits, so rows are
        # L2-normalised as in LIBSVM's news20.binary
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        X = X.multiply(1.0 / norms[:, None]).tocsr().astype(dtype)
    return X, y


def liblinear_iterations(prob, solver, C, tol):
    """(LIBLINEAR's pass count, whether it switched to -s 2) on a converted problem, from the log
    of an untimed run."""
    import re

    from liblinear.liblinear import PRINT_STRING_FUN, liblinear, parameter, toPyModel

    lines = []
    param = parameter(f"-s {solver} -c {C!r} -e {tol!r} -B -1")
    log = PRINT_STRING_FUN(lambda text: lines.append(text.decode()))
    liblinear.set_print_string_function(log)
    try:
        toPyModel(liblinear.train(prob, param))  # wrapped so that the model is freed
    finally:
        liblinear.set_print_string_function(param.print_func)
    log = "".join(lines)
    found = re.findall(r"#iter = (\d+)", log)
    return (int(found[-1]) if found else None), "Switching to use -s 2" in log


def measure(X, y, loss, tol, C, repeat, with_sklearn):
    """One row of the table. Our runs and LIBLINEAR's alternate, so that a change in the load
    of a shared machine hits both. Each side reports the median of ``repeat`` runs, each run in
    its own order: ours with seeds 0, 1, ..., LIBLINEAR from its process-wide generator, which
    moves on with every call. The number of passes (and so the time) depends on the order,
    widely so at tight tolerances: a best-of-N against LIBLINEAR's luckiest run, or a single
    seed, would measure luck."""
    row = {}
    s = LIBLINEAR_SOLVER[loss]
    solve_binary(X, y, loss=loss, C=C, tol=tol, max_iter=1)  # compile outside the timing
    t0 = time.perf_counter()
    prob = liblinear_problem(X, y)
    row["ll_convert_s"] = time.perf_counter() - t0
    runs = {"ours_s": [], "ours_cpu": [], "ll_s": [], "ll_cpu": [], "iter": []}
    for seed in range(repeat):
        wall, cpu, result = best_time(
            lambda seed=seed: solve_binary(X, y, loss=loss, C=C, tol=tol, random_state=seed), 1
        )
        runs["ours_s"].append(wall)
        runs["ours_cpu"].append(cpu)
        runs["iter"].append(result.n_iter)
        runs["ll_s"].append(liblinear_train(prob, s, C, tol)[3])
        runs["ll_cpu"].append(liblinear_train.cpu_s)
    row.update({key: float(np.median(values)) for key, values in runs.items()})
    row["ll_iter"], row["ll_newton"] = liblinear_iterations(prob, s, C, tol)
    ll_capped = (row["ll_iter"] or 0) >= LIBLINEAR_DUAL_PASSES and not row["ll_newton"]
    if ll_capped and row["iter"] > LIBLINEAR_DUAL_PASSES:
        # LIBLINEAR -s 3 stopped at its pass cap, not at tol: time ours under the same cap too
        # (-s 1 instead goes on with a Newton solve, timed as it runs in the main row)
        capped = [
            best_time(
                lambda seed=seed: solve_binary(
                    X, y, loss=loss, C=C, tol=tol, max_iter=LIBLINEAR_DUAL_PASSES,
                    random_state=seed,
                ),
                1,
            )
            for seed in range(repeat)
        ]  # fmt: skip
        row["capped"] = (
            float(np.median([c[0] for c in capped])),
            float(np.median([c[1] for c in capped])),
            capped[-1][2].primal,
        )
    del prob
    row["ours_iter"], row["ours_status"] = int(row["iter"]), str(result.status.value)
    row["ours_primal"] = result.primal
    warm = (X[:200], y[:200], loss, C, tol)  # the warm-up problem of the memory measurements
    _, peak = peak_net_of_noop(_ours_iterations, X, y, loss, C, tol, warmup_args=warm)
    row["ours_mem"] = (csr_nbytes(X) + peak) / csr_nbytes(X)
    w, b, _, _ = liblinear_binary_w(X, y, s, C, tol, 0.0)
    row["ll_primal"] = binary_primal(X, y, w, b, C, loss, 0.0)
    _, peak = peak_net_of_noop(
        _liblinear_seconds, X, y, s, C, tol, warmup_args=(*warm[:2], s, C, tol)
    )
    row["ll_mem"] = (csr_nbytes(X) + peak) / csr_nbytes(X)
    if with_sklearn:
        from sklearn.svm import LinearSVC

        sk = LinearSVC(loss=loss, C=C, tol=tol, dual=True, fit_intercept=False, max_iter=1000)
        t0 = time.perf_counter()
        sk.fit(X, y)
        row["sk_s"] = time.perf_counter() - t0
        row["sk_primal"] = binary_primal(X, y, sk.coef_.ravel(), 0.0, C, loss, 0.0)
    return row


def _ours_iterations(X, y, loss, C, tol):
    return solve_binary(X, y, loss=loss, C=C, tol=tol).n_iter


def _liblinear_seconds(X, y, solver, C, tol):
    return liblinear_binary_w(X, y, solver, C, tol, 0.0)[3]


def compile_times():
    """Cold compile (empty Numba cache) and cached start, each in a fresh process.

    Wall and CPU seconds: cold = first fit minus a second fit on a tiny problem (the compile of
    every kernel the fit uses); cached = interpreter start to the end of the first fit with the
    cache warm (`import solvers` included, scikit-learn never imported).
    """
    tiny = (
        "import time\n"
        "t0, c0 = time.perf_counter(), time.process_time()\n"
        "import numpy as np, scipy.sparse as sp, sys\n"
        "import solvers\n"
        "X = sp.csr_matrix(np.eye(6)); y = np.array([1., -1.] * 3)\n"
        "t1, c1 = time.perf_counter(), time.process_time(); solvers.solve_binary(X, y)\n"
        "t2, c2 = time.perf_counter(), time.process_time(); solvers.solve_binary(X, y)\n"
        "t3, c3 = time.perf_counter(), time.process_time()\n"
        "assert 'sklearn' not in sys.modules\n"
        "print(t2 - t1 - (t3 - t2), c2 - c1 - (c3 - c2), t2 - t0, c2 - c0)\n"
    )
    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        runs = [
            subprocess.run([sys.executable, "-c", tiny], env=env, cwd=root, check=True,
                           capture_output=True, text=True).stdout.split()
            for _ in range(2)
        ]  # fmt: skip
    cold, cached = [float(v) for v in runs[0]], [float(v) for v in runs[1]]
    return (
        f"cold compile {cold[0]:.2f} s wall ({cold[1]:.2f} s CPU); "
        f"cached start (import + first fit) {cached[2]:.2f} s wall ({cached[3]:.2f} s CPU)"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="+", default=[*REAL, "rcv1-like", "news20-like"])
    parser.add_argument("--losses", nargs="+", default=["squared_hinge", "hinge"])
    parser.add_argument("--tols", nargs="+", type=float, default=[0.1, 0.001])
    parser.add_argument("--C", type=float, default=1.0)
    parser.add_argument("--scale", type=float, default=1.0, help="rows of the synthetic sets")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-sklearn", action="store_true")
    parser.add_argument("--skip-compile", action="store_true")
    parser.add_argument(
        "--out", help="also write the output into this benchmarks/results/ fragment"
    )
    args = parser.parse_args(argv)
    with output_block(args.out):
        run(args)


def run(args):

    print(
        f"# bench_binary {' '.join(sys.argv[1:])}  (C={args.C}, no bias, {args.dtype}; load "
        f"average {os.getloadavg()[0]:.2f} at start)"
    )
    if not args.skip_compile:
        print(f"# compile: {compile_times()}")
    header = (
        "| set | rows × features, nnz | loss | tol | ours s (iter) | LIBLINEAR s (iter, +convert) "
        "| ratio wall (CPU) | scikit-learn s | primal rel. diff | peak mem ours / LIBLINEAR |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for name in args.sets:
        X, y = load(name, args.scale, np.dtype(args.dtype))
        shape = f"{X.shape[0]:,} × {X.shape[1]:,}, {X.nnz:,}"
        for loss in args.losses:
            for tol in args.tols:
                r = measure(X, y, loss, tol, args.C, args.repeat, not args.no_sklearn)
                diff = (r["ours_primal"] - r["ll_primal"]) / abs(r["ll_primal"])
                sk = f"{r['sk_s']:.3f}" if "sk_s" in r else "-"
                status = "" if r["ours_status"] == "converged" else f", {r['ours_status']}"
                newton = " then -s 2" if r["ll_newton"] else ""
                print(
                    f"| {name} | {shape} | {loss} | {tol:g} "
                    f"| {r['ours_s']:.3f} ({r['ours_iter']}{status}) "
                    f"| {r['ll_s']:.3f} ({r['ll_iter']}{newton}, +{r['ll_convert_s']:.2f}) "
                    f"| {r['ours_s'] / r['ll_s']:.2f} ({r['ours_cpu'] / r['ll_cpu']:.2f}) "
                    f"| {sk} | {diff:+.1e} | {r['ours_mem']:.2f} / {r['ll_mem']:.2f} |",
                    flush=True,
                )
                if "capped" in r:
                    wall, cpu, primal = r["capped"]
                    diff = (primal - r["ll_primal"]) / abs(r["ll_primal"])
                    print(
                        f"| {name} | {shape} | {loss} | {tol:g}, both capped at "
                        f"{LIBLINEAR_DUAL_PASSES} passes | {wall:.3f} ({LIBLINEAR_DUAL_PASSES}) "
                        f"| {r['ll_s']:.3f} ({r['ll_iter']}) | {wall / r['ll_s']:.2f} "
                        f"({cpu / r['ll_cpu']:.2f}) | - | {diff:+.1e} | - |",
                        flush=True,
                    )
        del X, y


if __name__ == "__main__":
    main()
