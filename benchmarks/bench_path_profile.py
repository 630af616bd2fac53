"""Where a search's time goes: `solvers.LinearSVCCV` on one thread, its phases timed.

The search of `bench_model_selection.py grid` (10 values of C, 5 stratified folds, tol 0.1, no
intercept), run with ``n_jobs=1`` so that its phases add up to its wall time, with the solvers'
compiled calls wrapped in timers: the dual passes, the objectives (each solve's certificate, a
pass over its rows), the measure of a returned α (a pass, where the last pass did not converge),
the weights rebuilt from a warm start's α (a pass), the Newton method, and the held-out decision
values. A call made inside another timed one counts for the outer one only. "other" is the rest:
the Python drivers, the table, the refit's setup.

    .venv/bin/python benchmarks/bench_path_profile.py --datasets a9a rcv1-like
    .venv/bin/python benchmarks/bench_path_profile.py --datasets sector news20
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import output_block  # noqa: E402
from benchmarks.bench_model_selection import GRID, _folds, _path_work, load  # noqa: E402

# (module, attribute, phase): the attribute is looked up at each call, so a wrapper set on the
# module is what the drivers call
TIMED = [
    ("solvers.binary.kernels", "dcd_epoch", "dual passes"),
    ("solvers.binary.kernels", "objectives", "objectives"),
    ("solvers.binary.kernels", "dual_objective", "objectives"),
    ("solvers.binary.kernels", "projected_gradient_range", "measure of the returned α"),
    ("solvers.binary.kernels", "record_weights", "weights from α"),
    ("solvers.binary.newton", "finish", "Newton"),
    ("solvers.binary.newton", "solve_from_primal", "Newton"),
    ("solvers.multiclass.ovr_blocks", "ovr_pass", "dual passes"),
    ("solvers.multiclass.ovr_blocks", "ovr_measures", "objectives"),
    ("solvers.multiclass.ovr_blocks", "weights_from_alpha", "weights from α"),
    ("solvers.multiclass.ovr", "_finish_by_newton", "Newton"),
    ("solvers.selection.cv", "held_out_decisions", "held-out values"),
]


class PhaseClock:
    """Seconds and calls per phase; only the outermost timed call of a thread counts."""

    def __init__(self):
        self.seconds, self.calls = defaultdict(float), defaultdict(int)
        self._inside = threading.local()

    def wrap(self, function, phase):
        def timed(*args, **kwargs):
            if getattr(self._inside, "on", False):
                return function(*args, **kwargs)
            self._inside.on = True
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start
                self.calls[phase] += 1
                self._inside.on = False

        return timed


def install(clock: PhaseClock) -> list:
    """Wrap every timed call; returns what `restore` needs to put the plain functions back."""
    saved = []
    for module_name, attribute, phase in TIMED:
        module = importlib.import_module(module_name)
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, clock.wrap(getattr(module, attribute), phase))
    return saved


def restore(saved: list) -> None:
    for module, attribute, function in saved:
        setattr(module, attribute, function)


def search(X, y, multi_class, tol, n_jobs=1):
    from solvers import LinearSVCCV

    return LinearSVCCV(Cs=list(GRID), cv=_folds(y), n_jobs=n_jobs, tol=tol, max_iter=1000,
                       fit_intercept=False, multi_class=multi_class,
                       calibration=None).fit(X, y)  # fmt: skip


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["a9a", "news20-binary", "rcv1-like"])
    parser.add_argument("--multi-class", default="ovr", choices=("ovr", "crammer_singer"))
    parser.add_argument("--tol", type=float, default=0.1)
    parser.add_argument("--out", default=None, help="a results fragment to write the output to")
    args = parser.parse_args()
    with output_block(args.out):
        print(f"# load average at the start {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
        print(f"# {len(GRID)} values of C from {GRID[0]:g} to {GRID[-1]:g}; 5 stratified folds "
              f"(seed 0); tol {args.tol}, no intercept; one thread")  # fmt: skip
        print("| set | search s | phase | calls | s | share |")
        print("|---|---|---|---|---|---|")
        for name in args.datasets:
            X, y, _, _ = load(name)
            rows = np.random.default_rng(0).permutation(X.shape[0])[:300]
            search(X[rows], y[rows], args.multi_class, args.tol)  # kernels loaded, untimed
            clock = PhaseClock()
            saved = install(clock)
            start = time.perf_counter()
            fitted = search(X, y, args.multi_class, args.tol)
            total = time.perf_counter() - start
            restore(saved)
            other = total - sum(clock.seconds.values())
            for phase in [*sorted(clock.seconds, key=clock.seconds.get, reverse=True), "other"]:
                seconds = other if phase == "other" else clock.seconds[phase]
                calls = "" if phase == "other" else clock.calls[phase]
                print(f"| {name} | {total:.2f} | {phase} | {calls} | {seconds:.3f} "
                      f"| {seconds / total:.0%} |")  # fmt: skip
            print(f"# {name}: {_path_work(fitted)} dual passes + Newton steps on the path")
            sys.stdout.flush()
        print(f"# load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
