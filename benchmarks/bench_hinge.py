"""One-vs-rest under the hinge loss where dual coordinate descent is slow: what helps, measured.

No primal Newton method applies to the hinge loss (its primal is not differentiable), so the
passes must do the work. On raw news20 (shared data, 20 classes, term counts) at C 1, tol 0.1,
one thread, this script times our one-vs-rest hinge solver in several ways, and LIBLINEAR -s 3
(its log gives the passes per class and how many classes end at its 300-pass cap):

- ``default``: shrinking, a fresh permutation per pass, up to 1000 passes;
- ``cap 300``: the same with LIBLINEAR's pass budget;
- ``no shrinking``;
- ``tol 1 then 0.1``: a loose solve, then the tight one warm-started from its α;
- ``from squared hinge``: the squared-hinge solve (with its Newton finish), then the hinge solve
  warm-started from its α (clipped to [0, C]);
- ``cyclic``: the natural row order.

Per row: seconds (everything the variant runs), the largest per-class pass count, the classes
that met tol, the summed primal objective Σ_c P_c(w_c) relative to the best of the table, and
the relative duality gap of the returned (W, α) (LIBLINEAR returns no α). Time of the solve
only, one run each (``--repeat`` for more, best of).

    .venv/bin/python benchmarks/bench_hinge.py --out benchmarks/results/hinge.md
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import SHARED_DATA, liblinear_problem, output_block, read_dataset  # noqa: E402

from solvers.multiclass.ovr import solve_ovr  # noqa: E402

FILES = {"news20": "news20/news20.bz2", "sector": "sector/sector.scale.bz2"}


def ovr_primal(X, y, W, C):
    """Σ_c ½‖w_c‖² + C Σ_i max(0, 1 − y_ic w_cᵀx_i), y_ic = ±1 (no bias)."""
    scores = np.asarray(X @ W.T)
    signs = np.where(y[:, None] == np.arange(W.shape[0])[None, :], 1.0, -1.0)
    return 0.5 * float(np.sum(W * W)) + C * float(np.maximum(0.0, 1.0 - signs * scores).sum())


def liblinear_hinge(X, y, C, tol):
    """LIBLINEAR -s 3 one-vs-rest: (W in our class order, seconds, passes per class)."""
    from liblinear.liblinear import PRINT_STRING_FUN, liblinear, parameter, toPyModel

    log = []
    keep = PRINT_STRING_FUN(lambda s: log.append(s.decode()))
    prob = liblinear_problem(X, y.astype(np.float64))
    param = parameter(f"-s 3 -c {C!r} -e {tol!r} -B -1")
    param.print_func = keep
    liblinear.set_print_string_function(keep)
    t0 = time.perf_counter()
    model = toPyModel(liblinear.train(prob, param))
    seconds = time.perf_counter() - t0
    liblinear.set_print_string_function(ctypes.cast(None, PRINT_STRING_FUN))
    n, k = model.get_nr_feature(), model.get_nr_class()
    W = np.ctypeslib.as_array(model.w, shape=(n * k,)).reshape(n, k).T.copy()
    order = np.argsort(np.asarray(model.get_labels()))
    passes = [int(v) for v in re.findall(r"#iter = (\d+)", "".join(log))]
    full = np.zeros((k, X.shape[1]))
    full[:, :n] = W[order]
    return full, seconds, passes


def variants(X, y, k, C, tol):
    common = dict(C=C, tol=tol, n_jobs=1)

    def warm_from(loss, first_tol):
        def run():
            first = solve_ovr(X, y, k, loss=loss, **{**common, "tol": first_tol})
            alpha = np.minimum(first.alpha, C)
            return solve_ovr(X, y, k, loss="hinge", warm_start=alpha, **common), first.n_iter

        return run

    def plain(**options):
        return lambda: (solve_ovr(X, y, k, loss="hinge", **{**common, **options}), 0)

    return {
        "default": plain(),
        "cap 300": plain(max_iter=300),
        "no shrinking": plain(shrinking=False),
        "tol 1 then 0.1": warm_from("hinge", 1.0),
        "from squared hinge": warm_from("squared_hinge", tol),
        "cyclic": plain(order="cyclic"),
    }


def best_of(repeat, fn):
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        seconds = time.perf_counter() - t0
        if seconds < best:
            best, out = seconds, result
    return best, out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="news20", choices=sorted(FILES))
    parser.add_argument("--C", type=float, default=1.0)
    parser.add_argument("--tol", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    X, labels = read_dataset(SHARED_DATA / FILES[args.set])
    _, y = np.unique(labels, return_inverse=True)
    y = y.astype(np.int64)
    k = int(y.max()) + 1
    solve_ovr(X[:200], y[:200], k, loss="hinge", max_iter=2)  # compiled
    solve_ovr(X[:200], y[:200], k, max_iter=2)
    rows = []
    for name, fn in variants(X, y, k, args.C, args.tol).items():
        seconds, (result, first_passes) = best_of(args.repeat, fn)
        passes = int(np.max(result.extra["n_iter"]))
        met = int(np.sum(result.extra["gap"] <= args.tol))
        primal = ovr_primal(X, y, result.w, args.C)
        rows.append((name, seconds, passes, first_passes, met, primal, result.duality_gap))
    W, ll_seconds, ll_passes = liblinear_hinge(X, y, args.C, args.tol)
    ll_met = sum(p < 300 for p in ll_passes)
    ll_primal = ovr_primal(X, y, W, args.C)
    best = min([r[5] for r in rows] + [ll_primal])
    with output_block(args.out):
        print(
            f"# {args.set} ({X.shape[0]:,} × {X.shape[1]:,}, {k} classes), hinge, C {args.C:g}, "
            f"tol {args.tol:g}, one thread, best of {args.repeat}; load average at the start "
            f"{os.getloadavg()[0]:.1f}"
        )
        print(
            "| variant | s | passes (largest per class; + first solve) | classes that met tol | "
            "Σ primal / best − 1 | duality gap (rel.) |"
        )
        print("|---|---|---|---|---|---|")
        for name, seconds, passes, first, met, primal, gap in rows:
            extra = f" + {first}" if first else ""
            print(
                f"| {name} | {seconds:.2f} | {passes}{extra} | {met} of {k} | "
                f"{primal / best - 1:.1e} | {gap:.1e} |"
            )
        print(
            f"| LIBLINEAR -s 3 | {ll_seconds:.2f} | {max(ll_passes)} | {ll_met} of {k} "
            f"(the rest at its 300-pass cap) | {ll_primal / best - 1:.1e} | - |"
        )


if __name__ == "__main__":
    main()
