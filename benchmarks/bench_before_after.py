"""The same solver calls on two trees of the repository, back to back: is any row slower?

Each tree runs in a process of its own that imports `solvers` from that tree (with a Numba cache
of its own), loads the data once and compiles the kernels before the first timing. The two
processes then take turns: every row is timed ``--runs`` times in each tree, alternating which
goes first, and the table gives the median of each side, their ratio (after / before) and the
machine's load average before and after the row. A row more than 10% slower is flagged.

    .venv/bin/python benchmarks/bench_before_after.py --before 08a814a --runs 5
    .venv/bin/python benchmarks/bench_before_after.py --rows a9a-sqhinge w8a-hinge --runs 5

``--before`` and ``--after`` take any git revision; ``--after`` defaults to the working tree
(uncommitted changes included). Only the public API (``solvers.solve_*``, ``read_libsvm``) is
called, so any two trees since it was introduced compare.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MARGIN_SHARED_DATA", ROOT.parent / "shared" / "data"))

# name -> (data set, the call timed, with X, y from the data set)
GRID = "list(np.logspace(-3, 1, 10))"  # the C grid of the model-selection rows
ROWS = {
    "a9a-sqhinge": ("a9a", "solvers.solve_binary(X, y, loss='squared_hinge', tol=0.1)"),
    "a9a-hinge": ("a9a", "solvers.solve_binary(X, y, loss='hinge', tol=0.1)"),
    "a9a-sqhinge-1e-3": ("a9a", "solvers.solve_binary(X, y, loss='squared_hinge', tol=1e-3)"),
    "w8a-sqhinge": ("w8a", "solvers.solve_binary(X, y, loss='squared_hinge', tol=0.1)"),
    "w8a-hinge": ("w8a", "solvers.solve_binary(X, y, loss='hinge', tol=0.1)"),
    "news20-sqhinge": ("news20-binary", "solvers.solve_binary(X, y, tol=0.1)"),
    "news20-hinge-1e-3": ("news20-binary", "solvers.solve_binary(X, y, loss='hinge', tol=1e-3)"),
    "rcv1-like-0.2": ("rcv1-like", "solvers.solve_binary(X, y, tol=0.1)"),
    "rcv1-like-2-threads": ("rcv1-like", "solvers.solve_binary(X, y, tol=0.1, n_jobs=2)"),
    # raw term counts, where the dual passes stall and the primal Newton method finishes
    "newton-news20-raw": ("news20-raw", "solvers.solve_binary(X, y, C=10.0, tol=0.1)"),
    "ovr-news20-raw": ("news20-raw-classes", "solvers.solve_ovr(X, y, k, tol=0.1, n_jobs=1)"),
    "cs-news20": ("news20-l2", "solvers.solve_crammer_singer(X, y, k, bias=1.0, tol=0.1)"),
    "ww-news20": ("news20-l2", "solvers.solve_weston_watkins(X, y, k, bias=1.0, tol=0.1)"),
    "ovr-news20-1": ("news20-l2", "solvers.solve_ovr(X, y, k, bias=1.0, tol=0.1, n_jobs=1)"),
    "ovr-news20-2": ("news20-l2", "solvers.solve_ovr(X, y, k, bias=1.0, tol=0.1, n_jobs=2)"),
    "ovr-sector-1": ("sector", "solvers.solve_ovr(X, y, k, tol=0.1, n_jobs=1)"),
    "ovr-pendigits-1": ("pendigits", "solvers.solve_ovr(X, y, k, tol=0.1, n_jobs=1)"),
    "ovr-usps-1": ("usps", "solvers.solve_ovr(X, y, k, tol=0.1, n_jobs=1)"),
    "ovr-dense-b-1": ("dense-b", "solvers.solve_ovr(X, y, k, tol=0.1, n_jobs=1)"),
    "cs-mnist": ("mnist", "solvers.solve_crammer_singer(X, y, k, bias=1.0, tol=0.1)"),
    "svr-a9a": ("a9a", "solvers.solve_svr(X, y, C=1.0, epsilon=0.1, tol=0.1)"),
    "structural-dna": ("dna-cs", "solvers.fit_structural(X, y, k, tol=1e-3)"),
    "read-news20": ("news20-text", "solvers.read_libsvm(io.BytesIO(X))"),
    "cv-a9a": ("a9a", f"solvers.LinearSVCCV(Cs={GRID}, cv=5, n_jobs=2, tol=0.1).fit(X, y)"),
    "cv-news20": ("news20-binary", f"solvers.LinearSVCCV(Cs={GRID}, cv=5, n_jobs=2).fit(X, y)"),
    "cv-rcv1-like": ("rcv1-like", f"solvers.LinearSVCCV(Cs={GRID}, cv=5, n_jobs=2).fit(X, y)"),
    "cv-sector-ovr": ("sector", f"solvers.LinearSVCCV(Cs={GRID}, cv=5, n_jobs=2).fit(X, y)"),
    "cv-news20-ovr": ("news20-l2", f"solvers.LinearSVCCV(Cs={GRID}, cv=5, n_jobs=2).fit(X, y)"),
}
DEFAULT_ROWS = [
    "a9a-sqhinge",
    "a9a-hinge",
    "w8a-sqhinge",
    "news20-sqhinge",
    "cs-news20",
    "ww-news20",
    "ovr-news20-1",
    "svr-a9a",
    "structural-dna",
    "read-news20",
]

# Runs in each tree's process: loads a data set on request, then times calls.
WORKER = r"""
import bz2, io, json, sys, time
import numpy as np
import scipy.sparse as sp
import solvers

print(json.dumps(solvers.__file__), flush=True)  # which tree this process runs

DATA = sys.argv[1]
cache = {}

def read(*parts):
    return solvers.read_libsvm(f"{DATA}/" + "/".join(parts))

def unit_rows(X):
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    norms[norms == 0] = 1.0
    return sp.csr_matrix(X.multiply(1.0 / norms[:, None]))

def classes(y):
    labels, index = np.unique(y, return_inverse=True)
    return index, len(labels)

CLASS_FILES = {
    "sector": ("sector", "sector.scale.bz2"),
    "pendigits": ("pendigits", "pendigits"),
    "usps": ("usps", "usps-esl.t.bz2"),
    "mnist": ("mnist", "mnist.scale.t.bz2"),
}

def load(name):
    if name in ("a9a", "w8a"):
        X, y = read(name, f"{name}.bz2")
        return X, np.where(y > 0, 1.0, -1.0), 2
    if name == "news20-binary":
        X, y = read("news20", "news20.bz2")
        return unit_rows(X), np.where(y == 1, 1.0, -1.0), 2
    if name == "news20-l2":
        X, y = read("news20", "news20.bz2")
        return (unit_rows(X), *classes(y))
    if name == "news20-raw":
        X, y = read("news20", "news20.bz2")
        return X, np.where(y == 1, 1.0, -1.0), 2
    if name == "news20-raw-classes":
        X, y = read("news20", "news20.bz2")
        return (X, *classes(y))
    if name in CLASS_FILES:  # multi-class sets read as they are
        X, y = read(*CLASS_FILES[name])
        return (X, *classes(y))
    if name == "dense-b":  # benchmarks/bench_ovr_small.py's dense_set(15000, 16, 26)
        rng = np.random.default_rng(0)
        y = rng.integers(0, 26, 15000)
        X = rng.normal(size=(26, 16))[y] + 1.5 * rng.normal(size=(15000, 16))
        X = (X - X.min(0)) / (X.max(0) - X.min(0)) * 2 - 1
        return sp.csr_matrix(X), y, 26
    if name == "dna-cs":
        try:
            from solvers.structural.problems import multiclass_problem
        except ImportError:  # a tree from before the families became subpackages
            from solvers.structural_problems import multiclass_problem
        X, y = read("dna", "dna.scale")
        index, k = classes(y)
        Xs, margins, groups = multiclass_problem(X, index, k, C=0.1, bias=1.0)
        return Xs, margins, groups
    if name == "news20-text":
        return bz2.decompress(open(f"{DATA}/news20/news20.bz2", "rb").read()), None, None
    if name == "rcv1-like":
        rng = np.random.default_rng(0)
        n, d, per = 135_000, 47_236, 73
        indptr = np.arange(0, n * per + 1, per)
        indices = np.sort(rng.integers(0, d, (n, per)), axis=1).ravel().astype(np.int32)
        X = sp.csr_matrix((rng.random(n * per), indices, indptr), shape=(n, d))
        X.sum_duplicates()
        X = unit_rows(X)
        y = np.where(X @ rng.standard_normal(d) > 0, 1.0, -1.0)
        return X, y, 2
    raise KeyError(name)

for line in sys.stdin:
    name, call = json.loads(line)
    if name not in cache:
        cache[name] = load(name)
    X, y, k = cache[name]
    t0 = time.perf_counter()
    eval(call)
    print(json.dumps(time.perf_counter() - t0), flush=True)
"""


class Tree:
    """A process that imports `solvers` from one tree and times calls on request."""

    def __init__(self, label, path, cache_dir):
        self.label = label
        env = dict(os.environ, PYTHONPATH=str(path), NUMBA_CACHE_DIR=str(cache_dir))
        env.pop("PYTHONSAFEPATH", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", WORKER, str(SHARED_DATA)],
            cwd=path, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.module = json.loads(self.proc.stdout.readline())
        if not self.module.startswith(str(path)):
            raise RuntimeError(f"the {label} process imported {self.module}, not from {path}")

    def time(self, row) -> float:
        data, call = ROWS[row]
        self.proc.stdin.write(json.dumps([data, call]) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.label} tree's process died on row {row}")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def export(revision, folder) -> Path:
    """The tree of ``revision`` (git archive), or the working tree for None."""
    if revision is None:
        return ROOT
    target = Path(folder) / revision
    target.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "archive", revision, "solvers"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    tar_path = Path(folder) / f"{revision}.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(target, filter="data")
    return target


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="08a814a")
    parser.add_argument("--after", default=None, help="a revision (default: the working tree)")
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, choices=sorted(ROWS))
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        before = Tree("before", export(args.before, tmp), Path(tmp) / "cache-before")
        after = Tree("after", export(args.after, tmp), Path(tmp) / "cache-after")
        label = args.after or "working tree"
        print(f"# before {args.before} ({before.module}), after {label} ({after.module})")
        print(f"# median of {args.runs} runs each, "
              f"alternating; load average {os.getloadavg()[0]:.2f} at start")  # fmt: skip
        print("| row | before s | after s | after / before | load before / after row |")
        print("|---|---|---|---|---|")
        slower = []
        try:
            for row in args.rows:
                load0 = os.getloadavg()[0]
                for tree in (before, after):  # data loaded and kernels compiled, untimed
                    tree.time(row)
                times = {"before": [], "after": []}
                for run in range(args.runs):
                    order = (before, after) if run % 2 == 0 else (after, before)
                    for tree in order:
                        times[tree.label].append(tree.time(row))
                b, a = np.median(times["before"]), np.median(times["after"])
                flag = " (slower by more than 10%)" if a > 1.1 * b else ""
                if flag:
                    slower.append(row)
                print(f"| {row} | {b:.4f} | {a:.4f} | {a / b:.3f}{flag} | "
                      f"{load0:.2f} / {os.getloadavg()[0]:.2f} |", flush=True)  # fmt: skip
        finally:
            before.close()
            after.close()
    print(f"# rows slower by more than 10%: {', '.join(slower) or 'none'}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
