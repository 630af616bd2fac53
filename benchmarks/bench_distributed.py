"""Distributed CoCoA+ (`solvers.distributed.solve_binary`) against our single-machine solver.

For each set and each K (Dask worker processes on this machine, one partition and one thread
each), rounds and seconds until the certified relative duality gap first reaches 1e-2, 1e-3 and
1e-4, and the bytes communicated per round (w broadcast, Δw back, α checkpoints). The
single-machine row is `solvers.solve_binary` (dual coordinate descent, shrinking on) with its
objectives computed after every pass, so both sides pay for measuring the gap each pass/round;
its "rounds" are passes. Times start at the solver call: the distributed side includes placing
the partitions on the workers (the cluster's start is not counted). Both stop at the first
measurement at or below the last target, or at ``--time-limit``.

    .venv/bin/python benchmarks/bench_distributed.py --sets rcv1-like synthetic --scale 0.05 \\
        --workers 1 2 4 --out benchmarks/results/distributed.md

rcv1-like is `benchmarks._common.rcv1_like` (677k × 47k at scale 1); synthetic is 10M rows ×
100k features with 20 non-zeros a row at scale 1 (`synthetic_sparse`), both × ``--scale`` rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks._common import output_block, rcv1_like, synthetic_sparse  # noqa: E402
from solvers.binary.parallel import MIN_NNZ_PER_THREAD  # noqa: E402

TARGETS = (1e-2, 1e-3, 1e-4)


def make_set(name, scale):
    if name == "rcv1-like":
        return rcv1_like(scale)
    return synthetic_sparse(int(10_000_000 * scale), 100_000, 20, seed=7)


class Trace:
    """A progress callback: when each gap target was first met, and the bytes per round."""

    def __init__(self, targets, objective_every=None):
        self.targets, self.hit, self.bytes = targets, {}, []
        self.last = None  # (rounds, gap) of the last measurement
        if objective_every is not None:
            self.objective_every = objective_every

    def __call__(self, progress):
        if progress.bytes_sent is not None:
            self.bytes.append(progress.bytes_sent)
        gap = progress.duality_gap
        if gap is None:
            return None
        self.last = (progress.iteration, gap)
        for t in self.targets:
            if gap <= t and t not in self.hit:
                self.hit[t] = (progress.iteration, progress.elapsed_s)
        return False if gap <= min(self.targets) else None


def single_machine(X, y, threads, args):
    import solvers

    # kernels loaded first (the parallel ones only run on rows enough for two threads)
    warm = int(np.searchsorted(X.indptr, 3 * MIN_NNZ_PER_THREAD)) if threads > 1 else 200
    solvers.solve_binary(X[:warm], y[:warm], C=args.C, max_iter=2, n_jobs=threads)
    trace = Trace(TARGETS, objective_every=1)
    solvers.solve_binary(
        X, y, loss=args.loss, C=args.C, bias=args.bias, tol=1e-12, max_iter=100_000,
        time_limit=args.time_limit, callback=trace, n_jobs=threads,
    )  # fmt: skip
    return trace


def distributed(X, y, K, sigma, args, store=None):
    """CoCoA+ on K worker processes; the partitions sent by the driver, or read by the
    workers from ``store`` (a directory of the set's arrays) when given."""
    from distributed import Client, LocalCluster

    from solvers.distributed import solve_binary, split_rows, stored_partitions

    options = dict(threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0)
    with LocalCluster(n_workers=K, silence_logs=40, **options) as cluster:
        with Client(cluster) as client:
            warm = split_rows(X[:200], y[:200], K)  # kernels loaded on every worker first
            solve_binary([p.X for p in warm], [p.y for p in warm], client=client, max_rounds=2)
            if store is None:
                parts = split_rows(X, y, K)
                X_parts, y_parts = [p.X for p in parts], [p.y for p in parts]
            else:
                X_parts, y_parts = stored_partitions(store, K, X.shape[1]), None
            trace = Trace(TARGETS)
            solve_binary(
                X_parts, y_parts, client=client, loss=args.loss,
                C=args.C, bias=args.bias, tol=min(TARGETS), max_rounds=100_000,
                local_passes=args.local_passes, time_limit=args.time_limit, callback=trace,
                sigma=sigma, checkpoint_every=args.checkpoint_every,
            )  # fmt: skip
    return trace


def store_arrays(X, y, directory) -> str:
    """The set's CSR arrays and labels as `.npy` files, as the service stores a dataset."""
    for name, values in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr),
                         ("y", y)):  # fmt: skip
        np.save(Path(directory) / f"{name}.npy", values)
    return str(directory)


def against_spark(args):
    """Spark MLlib's LinearSVC (its own venv, `bench_spark_svc.py`) and ours on the same
    rcv1-like train/test split, hinge loss, no bias: fit seconds, test accuracy, primal."""
    import json
    import subprocess

    from benchmarks.bench_spark_svc import primal, split
    from solvers.distributed import solve_binary, split_rows

    command = [args.spark_python, str(Path(__file__).with_name("bench_spark_svc.py")),
               "--scale", str(args.scale), "--C", str(args.C), "--cores", "2"]  # fmt: skip
    spark = json.loads(subprocess.run(command, capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1])  # fmt: skip
    X, y, Xt, yt = split(args.scale)
    print(f"\nAgainst Spark MLlib LinearSVC (local[2]), rcv1-like {X.shape[0]:,} train / "
          f"{Xt.shape[0]:,} test rows, hinge, C = {args.C}, no intercept\n")  # fmt: skip
    print("| solver | fit s | test accuracy | primal | primal rel. to best |")
    print("|---|---:|---:|---:|---:|")
    rows = [("Spark LinearSVC (OWL-QN/L-BFGS, maxIter 100)", spark["seconds"],
             spark["accuracy"], spark["primal"])]  # fmt: skip
    from distributed import Client, LocalCluster

    options = dict(threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0)
    with LocalCluster(n_workers=2, silence_logs=40, **options) as cluster, Client(cluster) as c:
        parts = split_rows(X, y, 2)
        warm = split_rows(X[:200], y[:200], 2)  # kernels loaded on every worker first
        solve_binary([p.X for p in warm], [p.y for p in warm], client=c, max_rounds=2)
        for tol in (1e-1, 1e-2, 1e-3):
            start = time.perf_counter()
            r = solve_binary([p.X for p in parts], [p.y for p in parts], client=c, loss="hinge",
                             C=args.C, tol=tol, time_limit=args.time_limit)  # fmt: skip
            seconds = time.perf_counter() - start
            accuracy = float(np.mean(np.where(Xt @ r.w > 0, 1.0, -1.0) == yt))
            rows.append((f"ours, CoCoA+ K = 2, gap {tol:g} ({r.n_iter} rounds)", seconds,
                         accuracy, primal(X, y, r.w, args.C)))  # fmt: skip
    best = min(row[3] for row in rows)
    for name, seconds, accuracy, p in rows:
        print(f"| {name} | {seconds:.1f} | {accuracy:.4f} | {p:.2f} | {(p - best) / best:+.1e} |")


def cells(trace):
    out = []
    for t in TARGETS:
        if t in trace.hit:
            rounds, seconds = trace.hit[t]
            out.append(f"{rounds} / {seconds:.1f}")
        elif trace.last is not None:
            out.append(f"not reached (gap {trace.last[1]:.1e} after {trace.last[0]})")
        else:
            out.append("not reached")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sets", nargs="*", default=["rcv1-like", "synthetic"])
    parser.add_argument("--scale", type=float, default=0.05)
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2, 4])
    parser.add_argument("--loss", default="squared_hinge", choices=["squared_hinge", "hinge"])
    parser.add_argument("--C", type=float, default=1.0)
    parser.add_argument("--bias", type=float, default=0.0)
    parser.add_argument("--local-passes", type=int, default=1)
    parser.add_argument("--sigmas", nargs="+", default=["adaptive"], choices=["adaptive", "K"],
                        help="σ' of the runs: adaptive and/or K (the safe bound)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1],
                        help="thread counts of the single-machine runs")
    parser.add_argument("--checkpoint-every", type=int, default=1)
    parser.add_argument("--source", choices=["memory", "stored"], default="memory",
                        help="partitions sent by the driver, or read by each worker from "
                             "the set stored as .npy arrays in a temporary directory")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--spark-python", default=None,
                        help="python of a venv with pyspark: also compare with Spark's LinearSVC")
    parser.add_argument("--out", default=None, help="fragment of benchmarks/results to write")
    args = parser.parse_args()
    with output_block(args.out):
        source = {"stored": "read by the workers from stored arrays",
                  "memory": "sent by the driver"}[args.source]  # fmt: skip
        print(f"partitions: {source}; "
              f"loss {args.loss}, C = {args.C}, bias = {args.bias}, H = {args.local_passes} "
              f"local pass(es) a round, α checkpoint every {args.checkpoint_every} round(s), "
              f"time limit {args.time_limit:.0f} s a run\n")  # fmt: skip
        print("| set | rows × features, nnz | solver | K (processes or threads) "
              "| to 1e-2 (rounds / s) | to 1e-3 | to 1e-4 | MB per round | load avg |")  # fmt: skip
        print("|---|---|---|---:|---:|---:|---:|---:|---|")
        for name in args.sets:
            X, y = make_set(name, args.scale)
            shape = f"{X.shape[0]:,} × {X.shape[1]:,}, {X.nnz:,}"
            store = None
            if args.source == "stored":
                store = store_arrays(X, y, tempfile.mkdtemp(prefix="cocoa-bench-"))
            runs = [(f"single machine, {t} thread(s)", t, None) for t in args.threads]
            runs += [(f"CoCoA+ on Dask, σ' {sigma}", K, sigma)
                     for K in args.workers for sigma in args.sigmas]  # fmt: skip
            for label, K, sigma in runs:
                before = os.getloadavg()[0]
                if sigma is None:
                    trace = single_machine(X, y, K, args)
                else:
                    sigma_value = "adaptive" if sigma == "adaptive" else K
                    trace = distributed(X, y, K, sigma_value, args, store)
                mb = f"{np.mean(trace.bytes) / 1e6:.2f}" if trace.bytes else "-"
                load = f"{before:.1f} / {os.getloadavg()[0]:.1f}"
                print(f"| {name} | {shape} | {label} | {K} | " + " | ".join(cells(trace))
                      + f" | {mb} | {load} |", flush=True)  # fmt: skip
            del X, y
            if store is not None:
                shutil.rmtree(store)
        if args.spark_python:
            against_spark(args)
        print(f"\nmeasured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    main()
