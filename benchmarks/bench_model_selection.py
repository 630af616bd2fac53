"""Choosing C: `solvers.LinearSVCCV` against scikit-learn's GridSearchCV and LIBLINEAR's -C.

Subcommands (each prints the load average; the machine may be shared):

``grid``: the same 10 values of C and the same 5 stratified folds (seeded) on both sides: ours is
``LinearSVCCV(Cs=grid, cv=folds, n_jobs=2)`` (each fold's path warm-started, folds in two threads
over one X), the reference ``GridSearchCV(sklearn LinearSVC(dual=True), {"C": grid}, cv=folds,
n_jobs=2)`` (every (C, fold) cold, X copied per fold). Same loss, tol and max_iter, no intercept on
either side, refit on both. What tol means on each side: scikit-learn's LinearSVC(dual=True) is
LIBLINEAR's -s 1, stopped when the projected gradients of a full pass span at most tol (M − m ≤
tol), or at max_iter passes; ours stops its dual passes by the same rule and, where they stall or
where a fold's path has gone primal (`solvers.selection.search.WarmStarts`), its Newton steps at
‖∇P‖ ≤ 0.1 · tol · min(n₊, n₋)/n · ‖∇P(0)‖ (LIBLINEAR's own rule after its -s 1 switches to -s 2;
the refit on all rows, the model returned, at the fit's 0.01 · tol); the largest duality gap of our
path's solves is printed beside. Each side runs once on 300 rows just before its own timings (our
compiled kernels loaded; scikit-learn's worker processes started, after ours are timed: our fits
right after that start ran slower), so that neither side's one-time setup is counted. Also: one cold
``LinearSVC`` fit on all rows at the grid's largest C (the "×cold" column is the search's wall time
over it; with ``--repeat N`` both are timed N times, in turns, and the best of each is taken, while
"ours s", set against GridSearchCV's single run, stays the first run), the chosen C and its test
accuracy on both sides, the dual passes plus Newton steps of the whole path (summed over folds and
Cs), and with ``--memory`` the search's peak resident memory in a fresh process (net of a call doing
nothing) against the CSR input plus the models.

``liblinear``: LIBLINEAR's own search ``train(prob, '-s 2 -C -v 5 -c START -e 0.01')``
(`liblinear-official`), timed as it runs; the C values it visited are read from its
``log2c=`` lines, and ours is timed on those Cs with 5 stratified folds. LIBLINEAR's -s 2 stops
each Newton solve at ‖∇P‖ ≤ e · min(n₊, n₋)/n · ‖∇P(0)‖ with e = 0.01; ours at tol = 0.1 stops
the Newton steps of its path by the same rule (0.1 · tol = 0.01), those of its refit ten times
tighter, and its dual passes at M − m ≤ 0.1.

``calibration``: log loss of per-class Platt against a softmax temperature for the joint
formulations (what `solvers.selection.cv.joint_default` cites), and our ``probability=True``
against ``CalibratedClassifierCV(LinearSVC, method="sigmoid")`` on a9a.t and dna.t.

    .venv/bin/python benchmarks/bench_model_selection.py grid \
        --datasets a9a news20-binary rcv1-like
    .venv/bin/python benchmarks/bench_model_selection.py grid \
        --datasets sector news20 --multi-class ovr crammer_singer
    .venv/bin/python benchmarks/bench_model_selection.py liblinear \
        --datasets a9a news20-binary rcv1-like
    .venv/bin/python benchmarks/bench_model_selection.py grid \
        --datasets a9a rcv1-like --memory --no-reference
    .venv/bin/python benchmarks/bench_model_selection.py calibration
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import (  # noqa: E402
    SHARED_DATA,
    csr_nbytes,
    output_block,
    peak_net_of_noop,
    rcv1_like,
    read_dataset,
)

GRID = np.logspace(-3, 1, 10)


def load(name):
    """(X, y, Xt or None, yt or None) of a benchmark set."""
    if name == "a9a":
        X, y = read_dataset(SHARED_DATA / "a9a" / "a9a.bz2")
        Xt, yt = _test(SHARED_DATA / "a9a" / "a9a.t", X.shape[1])
        return X, y, Xt, yt
    if name in ("news20", "news20-binary"):
        X, y = read_dataset(SHARED_DATA / "news20" / "news20.bz2")
        Xt, yt = _test(SHARED_DATA / "news20" / "news20.t.bz2", X.shape[1])
        if name == "news20-binary":  # classes 1-10 against 11-20
            y, yt = np.where(y <= 10, -1.0, 1.0), np.where(yt <= 10, -1.0, 1.0)
        return X, y, Xt, yt
    if name == "sector":
        X, y = read_dataset(SHARED_DATA / "sector" / "sector.scale.bz2")
        Xt, yt = _test(SHARED_DATA / "sector" / "sector.t.scale.bz2", X.shape[1])
        return X, y, Xt, yt
    if name == "rcv1-like":
        X, y = rcv1_like(scale=0.05)
        cut = (4 * X.shape[0]) // 5
        return X[:cut], y[:cut], X[cut:], y[cut:]
    raise SystemExit(f"unknown dataset {name!r}")


def _test(path, n_features):
    from sklearn.datasets import load_svmlight_file

    Xt, yt = load_svmlight_file(str(path), n_features=n_features)
    return Xt.tocsr(), yt


def _folds(y, k=5, seed=0):
    from sklearn.model_selection import StratifiedKFold

    return list(StratifiedKFold(k, shuffle=True, random_state=seed).split(np.zeros(len(y)), y))


def ours_search(X, y, Cs, folds, multi_class, tol, max_iter):
    from solvers import LinearSVCCV

    return LinearSVCCV(Cs=list(Cs), cv=folds, n_jobs=2, tol=tol, max_iter=max_iter,
                       fit_intercept=False, multi_class=multi_class,
                       calibration=None).fit(X, y)  # fmt: skip


def _search_peak(X, y, Cs, folds, multi_class, tol, max_iter):
    ours_search(X, y, Cs, folds, multi_class, tol, max_iter)
    return None


def _small(X, y, multi_class, tol, max_iter):
    """The arguments of a search on 300 rows: a run outside the timings and measurements."""
    rows = np.random.default_rng(0).permutation(X.shape[0])[:300]
    Xs, ys = X[rows], y[rows]
    return Xs, ys, GRID[[0, -1]], _folds(ys, k=3), multi_class, tol, max_iter


def _warm_up_ours(X, y, multi_class, tol, max_iter):
    """Our search and fit once on 300 rows: the compiled kernels loaded."""
    from solvers import LinearSVC

    args = _small(X, y, multi_class, tol, max_iter)
    ours_search(*args)
    LinearSVC(C=1.0, tol=tol, fit_intercept=False, multi_class=multi_class, n_jobs=2).fit(
        args[0], args[1]
    )


def _warm_up_reference(X, y, multi_class, tol, max_iter):
    """GridSearchCV once on 300 rows: scikit-learn's worker processes started. Run after our
    timings, just before the reference's: our fits right after that start ran slower."""
    import warnings

    from sklearn import svm
    from sklearn.model_selection import GridSearchCV

    args = _small(X, y, multi_class, tol, max_iter)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator = svm.LinearSVC(dual=True, tol=tol, fit_intercept=False,
                                  multi_class=multi_class)  # fmt: skip
        search = GridSearchCV(estimator, {"C": list(args[2])}, cv=args[3], n_jobs=2)
        search.fit(args[0], args[1])


def _largest_gap(search) -> float:
    table = search.cv_results_
    n_folds = sum(1 for name in table if name.endswith("_duality_gap"))
    return max(float(np.max(table[f"split{f}_duality_gap"])) for f in range(n_folds))


def _path_work(search) -> int:
    """The dual passes plus Newton steps of every solve of the path (its folds and Cs)."""
    table = search.cv_results_
    n_folds = sum(1 for name in table if name.endswith("_n_iter"))
    return sum(int(np.sum(table[f"split{f}_n_iter"])) for f in range(n_folds))


def run_grid(args):
    from sklearn import svm
    from sklearn.model_selection import GridSearchCV

    from solvers import LinearSVC

    print(f"# load average at the start {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print(
        f"# grid: {len(GRID)} values of C from {GRID[0]:g} to {GRID[-1]:g}; 5 stratified "
        f"folds (seed 0); tol {args.tol}, max_iter {args.max_iter}, no intercept; 2 threads"
    )
    print(
        "| set | formulation | ours s | GridSearchCV s | ratio | ×cold | C ours / sklearn "
        "| test acc ours / sklearn | peak / (CSR + models) | largest duality gap ours "
        "| path passes + steps |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        X, y, Xt, yt = load(name)
        folds = _folds(y)
        for multi_class in args.multi_class if len(np.unique(y)) > 2 else ["ovr"]:
            options = (folds, multi_class, args.tol, args.max_iter)
            reference_runs = not args.no_reference and (multi_class == "ovr"
                                                        or args.reference_joint)  # fmt: skip
            _warm_up_ours(X, y, multi_class, args.tol, args.max_iter)
            searches, colds = [], []
            for _ in range(args.repeat):  # taken in turns, so that both see the same load
                start = time.perf_counter()
                ours = ours_search(X, y, GRID, *options)
                searches.append(time.perf_counter() - start)
                start = time.perf_counter()
                LinearSVC(C=GRID[-1], tol=args.tol, max_iter=args.max_iter, fit_intercept=False,
                          multi_class=multi_class, n_jobs=2).fit(X, y)  # fmt: skip
                colds.append(time.perf_counter() - start)
            ours_s = searches[0]
            ref_s, ref_C, ref_acc = float("nan"), float("nan"), float("nan")
            if reference_runs:
                _warm_up_reference(X, y, multi_class, args.tol, args.max_iter)
                reference = GridSearchCV(
                    svm.LinearSVC(dual=True, tol=args.tol, max_iter=args.max_iter,
                                  fit_intercept=False, multi_class=multi_class),
                    {"C": list(GRID)}, cv=folds, n_jobs=2,
                )  # fmt: skip
                start = time.perf_counter()
                reference.fit(X, y)
                ref_s = time.perf_counter() - start
                ref_C = reference.best_params_["C"]
                ref_acc = reference.score(Xt, yt)
            memory = "-"
            if args.memory:
                small = _small(X, y, multi_class, args.tol, args.max_iter)
                _, peak = peak_net_of_noop(_search_peak, X, y, GRID, *options, warmup_args=small)
                models = ours.coef_.nbytes * (len(folds) + 1)
                memory = f"{(csr_nbytes(X) + peak) / (csr_nbytes(X) + models):.2f}"
            print(f"| {name} | {multi_class} | {ours_s:.2f} | {ref_s:.2f} | {ours_s / ref_s:.2f} "
                  f"| {min(searches) / min(colds):.2f} | {ours.C_:.3g} / {ref_C:.3g} "
                  f"| {ours.score(Xt, yt):.4f} / {ref_acc:.4f} | {memory} "
                  f"| {_largest_gap(ours):.2g} | {_path_work(ours)} |")  # fmt: skip
            sys.stdout.flush()
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")


class _CapturedStdout:
    """LIBLINEAR's C-level output (its log2c= lines) captured through file descriptor 1."""

    def __enter__(self):
        sys.stdout.flush()
        self.file = tempfile.TemporaryFile(mode="w+b")
        self.saved = os.dup(1)
        os.dup2(self.file.fileno(), 1)
        return self

    def __exit__(self, *exc):
        import ctypes

        ctypes.CDLL(None).fflush(None)  # LIBLINEAR's own buffered lines belong to the capture
        os.dup2(self.saved, 1)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read().decode(errors="replace")
        self.file.close()
        return False


def liblinear_search(X, y, start_C):
    from liblinear import liblinearutil

    prob = liblinearutil.problem(np.asarray(y, dtype=np.float64), X)
    with _CapturedStdout() as out, contextlib.redirect_stdout(io.StringIO()):
        begin = time.perf_counter()  # (the Python wrapper prints its "Best C" line itself)
        best_C, _, best_score = liblinearutil.train(prob, f"-s 2 -C -v 5 -c {start_C!r} -e 0.01")
        seconds = time.perf_counter() - begin
    visited = sorted({float(2.0 ** float(v)) for v in re.findall(r"log2c=\s*([-\d.]+)", out.text)})
    return best_C, best_score, seconds, visited


def run_liblinear(args):
    from solvers._core.problem import csr_arrays
    from solvers.selection.grid import start_C

    print(f"# load average at the start {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print(f"# LIBLINEAR -s 2 -C -v 5 -e 0.01 from its start C; ours: those Cs, 5 stratified folds, "
          f"squared hinge, tol {args.tol}, no intercept, 2 threads")  # fmt: skip
    print(
        "| set | Cs visited | LIBLINEAR s | ours s | ratio | best C LIBLINEAR / ours "
        "| CV accuracy LIBLINEAR / ours | largest duality gap ours |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in args.datasets:
        X, y, _, _ = load(name)
        if len(np.unique(y)) > 2:
            print(f"| {name} | LIBLINEAR's -C is for two classes only | | | | | | |")
            continue
        start = start_C(csr_arrays(X), 0.0, (4 * X.shape[0]) // 5)
        best_C, best_score, lib_s, visited = liblinear_search(X, y, start)
        _warm_up_ours(X, y, "ovr", args.tol, args.max_iter)
        begin = time.perf_counter()
        ours = ours_search(X, y, visited, _folds(y), "ovr", args.tol, args.max_iter)
        ours_s = time.perf_counter() - begin
        print(f"| {name} | {len(visited)} ({visited[0]:.3g} to {visited[-1]:.3g}) | {lib_s:.2f} "
              f"| {ours_s:.2f} | {ours_s / lib_s:.2f} | {best_C:.3g} / {ours.C_:.3g} "
              f"| {best_score:.4f} / {ours.best_score_:.4f} "
              f"| {_largest_gap(ours):.2g} |")  # fmt: skip
        sys.stdout.flush()
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")


def run_calibration(args):
    from sklearn import svm
    from sklearn.calibration import CalibratedClassifierCV
    from sklearn.metrics import log_loss

    from solvers import LinearSVC, LinearSVCCV

    print(f"# load average at the start {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    print("# joint formulations: held-out half of each set, C = 0.1, 5 folds; log loss")
    print("| set | formulation | per-class Platt | softmax temperature |")
    print("|---|---|---|---|")
    for name in ("dna", "segment", "vowel"):
        X, y = read_dataset(SHARED_DATA / name / f"{name}.scale")
        rows = np.random.default_rng(0).permutation(X.shape[0])
        half = len(rows) // 2
        train, test = rows[:half], rows[half:]
        for multi_class in ("crammer_singer", "weston_watkins"):
            losses = []
            for method in ("sigmoid", "softmax"):
                est = LinearSVCCV(Cs=[0.1], cv=5, multi_class=multi_class, calibration=method,
                                  tol=1e-3).fit(X[train], y[train])  # fmt: skip
                losses.append(log_loss(y[test], est.predict_proba(X[test]), labels=est.classes_))
            print(f"| {name} | {multi_class} | {losses[0]:.3f} | {losses[1]:.3f} |")
    print("# probability=True against CalibratedClassifierCV(LinearSVC, sigmoid, cv=5), C = 0.1")
    print("| test set | log loss ours / sklearn | Brier ours / sklearn |")
    print("|---|---|---|")
    for name in ("a9a", "dna"):
        if name == "a9a":
            X, y, Xt, yt = load("a9a")
        else:
            X, y = read_dataset(SHARED_DATA / "dna" / "dna.scale")
            Xt, yt = _test(SHARED_DATA / "dna" / "dna.scale.t", X.shape[1])
        ours = LinearSVC(C=0.1, tol=1e-3, probability=True).fit(X, y)
        ref = CalibratedClassifierCV(svm.LinearSVC(C=0.1, tol=1e-3), method="sigmoid",
                                     cv=5).fit(X, y)  # fmt: skip
        p, q = ours.predict_proba(Xt), ref.predict_proba(Xt)
        onehot = np.eye(len(ours.classes_))[np.searchsorted(ours.classes_, yt)]
        brier = [float(np.mean(np.sum((m - onehot) ** 2, axis=1))) for m in (p, q)]
        print(f"| {name}.t | {log_loss(yt, p):.4f} / {log_loss(yt, q):.4f} "
              f"| {brier[0]:.4f} / {brier[1]:.4f} |")  # fmt: skip
    print(f"# load average at the end {os.getloadavg()[0]:.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("grid", "liblinear", "calibration"))
    parser.add_argument("--datasets", nargs="+", default=["a9a", "news20-binary", "rcv1-like"])
    parser.add_argument("--multi-class", nargs="+", default=["ovr"],
                        choices=("ovr", "crammer_singer", "weston_watkins"))  # fmt: skip
    parser.add_argument("--reference-joint", action="store_true",
                        help="also run GridSearchCV for crammer_singer (slow)")  # fmt: skip
    parser.add_argument("--tol", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=1,
                        help="time the search and the cold fit this many times, in turns; "
                        "×cold is the best of each")  # fmt: skip
    parser.add_argument("--max-iter", type=int, default=1000)
    parser.add_argument("--memory", action="store_true",
                        help="measure the search's peak memory (runs it twice more)")  # fmt: skip
    parser.add_argument("--no-reference", action="store_true", help="skip GridSearchCV")
    parser.add_argument("--out", default=None, help="a results fragment to write the output to")
    args = parser.parse_args()
    with output_block(args.out):
        {"grid": run_grid, "liblinear": run_liblinear, "calibration": run_calibration}[args.mode](
            args
        )


if __name__ == "__main__":
    main()
