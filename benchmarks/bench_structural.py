"""Shared-slack solver: online mode on data larger than its memory; batch vs Crammer–Singer.

1. Online: a synthetic qid-grouped LIBSVM file whose CSR form is several times the memory the
   online solver may use (cache + chunk + reader buffers). For passes = 1, 2, 3: wall time,
   LB, the exact UB (one more streaming pass), the certified relative gap and the peak memory the
   call allocated (tracemalloc, which sees every numpy buffer; the resident-set growth of a
   forked child is printed too, but the parent's freed heap makes it a loose figure). The batch
   solver on the in-memory data gives the reference optimum.
2. news20 with the 0-1 loss: `fit_structural` on the Crammer–Singer reduction vs
   `solve_crammer_singer` (SDM), same C and bias; time and the certified bracket of each.

    .venv/bin/python benchmarks/bench_structural.py online --nnz 8e6 --cache-mb 6 --chunk-rows 20000
    .venv/bin/python benchmarks/bench_structural.py news20
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import SHARED_DATA, csr_nbytes, read_dataset, run_measured  # noqa: E402
from solvers import fit_structural, fit_structural_stream, solve_crammer_singer  # noqa: E402
from solvers.structural.problems import multiclass_problem  # noqa: E402


def synthetic(n_examples, per_example=4, n_features=200, row_nnz=12, seed=0, shift=3.0):
    """Constraint rows around a hidden w; `shift` leaves most of them satisfied."""
    rng = np.random.default_rng(seed)
    n_rows = n_examples * per_example
    indptr = np.arange(n_rows + 1, dtype=np.int64) * row_nnz
    indices = np.sort(
        rng.random((n_rows, n_features)).argpartition(row_nnz, axis=1)[:, :row_nnz], axis=1
    ).astype(np.int32)
    X = sp.csr_matrix(
        (rng.normal(size=n_rows * row_nnz), indices.ravel(), indptr), shape=(n_rows, n_features)
    )
    margins = X @ rng.normal(size=n_features) - shift + 0.2 * rng.normal(size=n_rows)
    return X, margins, np.repeat(np.arange(n_examples), per_example)


def online(args):
    from solvers.io import write_libsvm

    row_nnz, per = 12, 4
    n_examples = int(float(args.nnz) / (row_nnz * per))
    X, margins, groups = synthetic(n_examples, per, row_nnz=row_nnz)
    data_bytes = csr_nbytes(X) + margins.nbytes
    path = Path(tempfile.mkdtemp()) / "structural.txt"
    t0 = time.perf_counter()
    write_libsvm(path, X, margins, qid=groups + 1)
    size = path.stat().st_size / 2**20
    print(f"# wrote {size:.0f} MiB of text in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    batch = fit_structural(X, margins, groups, C=args.C, tol=1e-4, max_iter=3000)
    batch_s = time.perf_counter() - t0
    d = X.shape[1]
    del X
    chunk_rows = args.chunk_rows
    # Warm the compiled kernels in this process so that the children do not compile.
    fit_structural_stream(path, n_features=d, chunk_rows=1000, cache_size=1, C=args.C, passes=1)
    print(
        f"rows {len(margins):,}, examples {n_examples:,}, CSR {data_bytes / 2**20:.1f} MiB, "
        f"cache {args.cache_mb} MiB, chunk {chunk_rows:,} rows; batch (in memory, tol 1e-4): "
        f"{batch_s:.2f}s, OPT in [{batch.lower_bound:.6f}, {batch.upper_bound:.6f}], "
        f"{batch.n_iter} passes"
    )
    print(
        "| passes | wall s | LB | UB (exact) | (UB−LB)/UB | status | peak allocated MiB "
        "| data / peak | peak extra RSS MiB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for passes in (1, 2, 3):

        def run(passes=passes):
            tracemalloc.start()
            t = time.perf_counter()
            res = fit_structural_stream(path, n_features=d, chunk_rows=chunk_rows,
                                        cache_size=args.cache_mb, C=args.C, tol=args.tol,
                                        passes=passes)  # fmt: skip
            wall = time.perf_counter() - t
            traced = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            return wall, res.lower_bound, res.upper_bound, str(res.status), traced

        (wall, lb, ub, status, traced), rss = run_measured(run)
        print(
            f"| {passes} | {wall:.2f} | {lb:.6f} | {ub:.6f} | {(ub - lb) / ub:.2e} | {status} "
            f"| {traced / 2**20:.1f} | {data_bytes / traced:.1f}x | {rss / 2**20:.1f} |"
        )
    os.remove(path)


def news20(args):
    X, y = read_dataset(SHARED_DATA / "news20" / "news20.bz2")
    if args.rows:
        X, y = X[: args.rows], y[: args.rows]
    classes, y = np.unique(y, return_inverse=True)
    k = len(classes)
    t0 = time.perf_counter()
    Xs, margins, groups = multiclass_problem(X, y, k, C=args.C, bias=1.0)
    build_s = time.perf_counter() - t0
    print(
        f"news20 {X.shape[0]:,} x {X.shape[1]:,}, {k} classes, C={args.C}, bias 1; reduction "
        f"{Xs.shape[0]:,} rows, nnz {Xs.nnz:,}, built in {build_s:.1f}s"
    )
    print("| solver | tol | wall s | passes | primal (UB) | dual (LB) | (UB−LB)/UB | status |")
    print("|---|---|---|---|---|---|---|---|", flush=True)
    for tol in args.cs_tol:
        t0 = time.perf_counter()
        cs = solve_crammer_singer(X, y, k, C=args.C, bias=1.0, tol=tol, max_iter=args.max_iter)
        wall = time.perf_counter() - t0
        lb = -cs.dual
        print(
            f"| Crammer–Singer SDM | {tol} (max v_i) | {wall:.2f} | {cs.n_iter} | {cs.primal:.4f} "
            f"| {lb:.4f} | {(cs.primal - lb) / cs.primal:.2e} | {cs.status} |",
            flush=True,
        )
    for tol in args.tol_news20:
        t0 = time.perf_counter()
        res = fit_structural(Xs, margins, groups, tol=tol, max_iter=args.max_iter)
        wall = time.perf_counter() - t0
        print(
            f"| fit_structural (0-1 loss) | {tol} (rel. gap) | {wall:.2f} | {res.n_iter} "
            f"| {res.upper_bound:.4f} | {res.lower_bound:.4f} "
            f"| {res.gap / res.upper_bound:.2e} | {res.status} |",
            flush=True,
        )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    on = sub.add_parser("online")
    on.add_argument("--nnz", default="5e6", help="non-zeros of the synthetic set")
    on.add_argument("--cache-mb", type=float, default=8.0)
    on.add_argument("--chunk-rows", type=int, default=40_000)
    on.add_argument("--C", type=float, default=0.1)
    on.add_argument("--tol", type=float, default=1e-3)
    nw = sub.add_parser("news20")
    nw.add_argument("--rows", type=int, default=0, help="first rows only (0: all)")
    nw.add_argument("--C", type=float, default=1.0)
    nw.add_argument("--max-iter", type=int, default=1000)
    nw.add_argument("--cs-tol", type=float, nargs="+", default=[0.1, 0.01])
    nw.add_argument("--tol-news20", type=float, nargs="+", default=[1e-2, 1e-3])
    args = parser.parse_args()
    online(args) if args.what == "online" else news20(args)


if __name__ == "__main__":
    main()
