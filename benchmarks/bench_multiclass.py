"""Multi-class solvers against LIBLINEAR in the same run: time ratio, primal objective, memory.

Crammer–Singer vs LIBLINEAR -s 4, one-vs-rest (1 and 2+ threads) vs LIBLINEAR -s 3 / -s 1 (its
one-vs-rest is single-threaded), Weston–Watkins vs our Crammer–Singer. Same C, bias and tol;
training time only (LIBLINEAR's problem is built once per set, timed separately and not counted).

LIBLINEAR's dual one-vs-rest solvers stop each class at 300 passes; every one-vs-rest row is
therefore measured twice: to tol (our default budget of 1,000 passes) and with ``max_iter=300``,
the same cap. Memory columns: CSR (the input), peak (the resident high-water mark our solve adds
in a fresh process, after a warm-up solve on 30 rows, net of a call doing nothing: the method of
`bench_binary.py`, `benchmarks._common.peak_net_of_noop`; a run of its own, not timed), model
(W with its bias column), α (the dual variables) and mem ratio = (CSR + peak) / (CSR + model).

    .venv/bin/python benchmarks/bench_multiclass.py --datasets news20-l2 sector mnist --tol 0.1
    .venv/bin/python benchmarks/bench_multiclass.py --datasets synthetic --skip ww --threads 1

``--threads`` takes one or more thread counts for the one-vs-rest rows (default: 1 and every
core); each count adds two rows per loss, so ``--threads 1`` is the quickest run, and on a
machine shared with other work a second thread measures contention more than scaling.
``--skip ww`` drops Weston–Watkins (the slowest solver), ``--skip cs ovr`` the other rows.
``synthetic`` (200,000 x 200,000, 20 classes, 12M non-zeros, CSR 138 MB) took 2.5 minutes on
2 cores with ``--skip ww --threads 1``, most of it in LIBLINEAR -s 3 and -s 1 (Weston–Watkins
adds about 10 s, each further thread count about a minute).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = Path(os.environ.get("MARGIN_SHARED_DATA", ROOT.parent / "shared" / "data"))
FILES = {
    "news20": "news20/news20.bz2",
    "sector": "sector/sector.scale.bz2",
    "mnist": "mnist/mnist.scale.t.bz2",
    "dna": "dna/dna.scale",
}


def synthetic(n=200_000, d=200_000, k=20, nnz_per_row=60, seed=0):
    """Sparse text-like 20-class set: each class prefers its own slice of the features."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    own = rng.random((n, nnz_per_row)) < 0.3
    cols = rng.integers(0, d, (n, nnz_per_row))
    slice_width = d // k
    cols[own] = (y[:, None] * slice_width + rng.integers(0, slice_width, (n, nnz_per_row)))[own]
    cols.sort(axis=1)
    vals = rng.random((n, nnz_per_row))
    X = sp.csr_matrix(
        (vals.ravel(), cols.ravel(), np.arange(0, n * nnz_per_row + 1, nnz_per_row)), shape=(n, d)
    )
    X.sum_duplicates()
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1))))
    return X, y + 1.0


def load(name):
    """A benchmark set; ``news20-l2`` is news20 with rows scaled to unit length (the raw file
    holds term counts with row norms up to 1e5, where LIBLINEAR -s 4 needs about 45 s for
    3,000 rows)."""
    if name == "synthetic":
        return synthetic()
    X, y = load_svmlight_file(str(DATA / FILES[name.removesuffix("-l2")]))
    if name.endswith("-l2"):
        from sklearn.preprocessing import normalize

        X = normalize(X)
    return X.tocsr(), y


REPEAT = 1
MEMORY = True  # --no-memory skips the traced runs (the memory columns then read nan)
# LIBLINEAR 2.50 stops its dual one-vs-rest solvers (-s 1, -s 3) at this many passes per class.
LIBLINEAR_DUAL_PASSES = 300


def timed(f, *a, **kw):
    """(best wall time over REPEAT runs, result): the machine may be shared, the minimum is the
    least disturbed run."""
    best = np.inf
    out = None
    for _ in range(REPEAT):
        out = None  # free the previous result so that the memory peak covers one run
        t = time.perf_counter()
        out = f(*a, **kw)
        best = min(best, time.perf_counter() - t)
    return best, out


def liblinear_primal(kind, model, X, y_idx, classes, C, bias, loss):
    from benchmarks._multiclass import cs_primal, liblinear_weights

    W, b = liblinear_weights(model, classes, X.shape[1], bias)
    if kind == "cs":
        return cs_primal(X, y_idx, W, b, C, bias)
    total = 0.0
    for c in range(len(classes)):
        yc = np.where(y_idx == c, 1.0, -1.0)
        xi = np.maximum(0.0, 1.0 - yc * (X @ W[c] + b[c]))
        reg = W[c] @ W[c] + (b[c] / bias) ** 2
        total += 0.5 * reg + C * np.sum(xi if loss == "hinge" else xi * xi)
    return total


@dataclass
class Row:
    csr_mb: float
    solver: str
    ours_s: float
    reference: str
    ref_s: float
    primal: float
    ref_primal: float  # nan where the objectives differ (WW vs CS)
    status: str
    peak_mb: float
    model_mb: float
    alpha_mb: float


def row(csr_mb, solver, t, result, peak_mb, reference, t_ref, ref_primal):
    return Row(
        csr_mb,
        solver,
        t,
        reference,
        t_ref,
        result.primal,
        ref_primal,
        str(result.status),
        peak_mb,
        (result.w.nbytes + np.asarray(result.bias).nbytes) / 2**20,
        result.alpha.nbytes / 2**20,
    )


def bench_dataset(name, args):
    """The rows of one set, each yielded as soon as it is measured."""
    from liblinear import liblinear, liblinearutil

    from solvers import solve_crammer_singer, solve_ovr, solve_weston_watkins

    C, bias, tol = args.C, args.bias, args.tol
    X, labels = load(name)
    classes, y = np.unique(labels, return_inverse=True)
    k = len(classes)
    csr_mb = (X.data.nbytes + X.indices.nbytes + X.indptr.nbytes) / 2**20
    t = time.perf_counter()
    prob = liblinear.problem(labels, X)
    t_prob = time.perf_counter() - t
    print(
        f"{name}: {X.shape[0]} rows, {X.shape[1]} features, {X.nnz} nnz, {k} classes, "
        f"CSR {csr_mb:.1f} MB, LIBLINEAR problem built in {t_prob:.2f} s (not counted)",
        flush=True,
    )

    def reference(solver_type):
        return timed(liblinearutil.train, prob, f"-s {solver_type} -c {C} -e {tol} -B {bias} -q")

    # compile (cached after the first run) with the options and index types of the timed calls
    head = X[:30]
    head.indices = head.indices.astype(X.indices.dtype)  # slicing may narrow them
    head.indptr = head.indptr.astype(X.indptr.dtype)
    small = (head, y[:30] % 2, 2)
    solve_crammer_singer(*small, bias=bias, objective_every=0)
    solve_weston_watkins(*small, bias=bias, objective_every=0)
    for loss in ("hinge", "squared_hinge"):
        for j in args.threads:
            solve_ovr(*small, loss=loss, bias=bias, n_jobs=j, objective_every=0)
    if "cs" not in args.skip:
        t_cs, r, mb = measured(
            solve_crammer_singer,
            X,
            y,
            k,
            C=C,
            bias=bias,
            tol=tol,
            max_iter=100_000,
            objective_every=0,
        )
        t_ref, m = reference(4)
        p_ref = liblinear_primal("cs", m, X, y, classes, C, bias, None)
        yield row(csr_mb, "crammer_singer", t_cs, r, mb, "liblinear -s 4", t_ref, p_ref)
        del r
        if "ww" not in args.skip:
            t_ww, rw, mb = measured(
                solve_weston_watkins,
                X,
                y,
                k,
                C=C,
                bias=bias,
                tol=tol,
                max_iter=100_000,
                objective_every=0,
            )
            yield row(
                csr_mb, "weston_watkins", t_ww, rw, mb, "our crammer_singer", t_cs, float("nan")
            )
            del rw
    if "ovr" not in args.skip:
        for loss, s in (("hinge", 3), ("squared_hinge", 1)):
            t_ref, m = reference(s)
            p_ref = liblinear_primal("ovr", m, X, y, classes, C, bias, loss)
            for j in args.threads:
                for cap in (None, LIBLINEAR_DUAL_PASSES):
                    extra = {} if cap is None else {"max_iter": cap}
                    t_o, r, mb = measured(
                        solve_ovr,
                        X,
                        y,
                        k,
                        loss=loss,
                        C=C,
                        bias=bias,
                        tol=tol,
                        n_jobs=j,
                        objective_every=0,
                        **extra,
                    )
                    label = f"ovr {loss}, {j} thread(s)" + (
                        "" if cap is None else f", max_iter={cap}"
                    )
                    yield row(csr_mb, label, t_o, r, mb, f"liblinear -s {s}", t_ref, p_ref)
                    del r


def _solve(name, X, y, k, options):
    """One solve by name (it travels to a fresh process); returns nothing."""
    import solvers

    getattr(solvers, name)(X, y, k, **options)


def measured(solve, X, y, k, **options):
    """(seconds, result, peak MB the solve adds to a fresh process, net of a no-op).

    The peak comes from runs of their own (`benchmarks._common.peak_net_of_noop`), after a
    warm-up solve on 30 rows with the same options; the timed runs are in this process.
    """
    peak = float("nan")
    if MEMORY:
        from benchmarks._common import peak_net_of_noop

        head = X[:30]
        head.indices = head.indices.astype(X.indices.dtype)  # slicing may narrow them
        head.indptr = head.indptr.astype(X.indptr.dtype)
        warm = (solve.__name__, head, y[:30] % 2, 2, options)
        _, added = peak_net_of_noop(_solve, solve.__name__, X, y, k, options, warmup_args=warm)
        peak = added / 2**20
    t, out = timed(solve, X, y, k, **options)
    return t, out, peak


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["news20-l2", "sector", "mnist"])
    parser.add_argument("--tol", type=float, default=0.1)
    parser.add_argument("--C", type=float, default=1.0)
    parser.add_argument("--bias", type=float, default=1.0)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--skip", nargs="*", default=[], help="any of cs ovr ww")
    parser.add_argument("--no-memory", action="store_true", help="time only, no traced runs")
    parser.add_argument("--repeat", type=int, default=1, help="best of this many runs")
    parser.add_argument(
        "--out", help="also write the output into this benchmarks/results/ fragment"
    )
    args = parser.parse_args()
    from benchmarks._common import output_block

    with output_block(args.out):
        run(args)


def run(args):
    global REPEAT, MEMORY
    REPEAT, MEMORY = args.repeat, not args.no_memory
    print(
        f"C={args.C} bias={args.bias} tol={args.tol} cores={os.cpu_count()} "
        f"repeat={args.repeat} load average={os.getloadavg()[0]:.1f}"
    )
    header = (
        "| set | solver | ours s | reference | ref s | ratio | primal rel. diff | status "
        "| CSR MB | peak MB | model MB | α MB | mem ratio |"
    )
    print(header + "\n" + "|---" * header.count(" | ") + "|---|")
    for name in args.datasets:
        for r in bench_dataset(name, args):
            rel = (r.primal - r.ref_primal) / abs(r.ref_primal)
            diff = "n/a" if np.isnan(rel) else f"{rel:+.2e}"
            ratio = (r.csr_mb + r.peak_mb) / (r.csr_mb + r.model_mb)
            print(
                f"| {name} | {r.solver} | {r.ours_s:.2f} | {r.reference} | {r.ref_s:.2f} | "
                f"{r.ours_s / r.ref_s:.2f} | {diff} | {r.status} | {r.csr_mb:.1f} | "
                f"{r.peak_mb:.1f} | {r.model_mb:.1f} | {r.alpha_mb:.1f} | {ratio:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
