"""Thread scaling of one binary problem on a many-core machine (prepared for a lent 16-core one).

Generates in place a 10,000,000 × 1,000,000 set with 40 non-zeros a row (`uniform_set`: uniform
feature indices, uniform positive values, unit-norm rows, labels the sign of a random hyperplane
plus 10% noise), times our solver at 1, 4, 8 and 16
threads at tol 0.1 (squared hinge; the hinge at 1 and 16 threads), and LIBLINEAR -s 1 once when
the ``liblinear`` module is importable (in a child process with a time limit, the problem's
conversion not counted). Writes a Markdown table to ``--out`` (a file in the output folder).

Each row also says where the wall time went (`Anatomy`): the rounds' compiled epochs (the
slowest thread of each round summed, and its excess over the mean thread), the rest of the
rounds (dealing the samples out, regrouping), the exact rebuilds of w̃, the objectives and the
final checks, and what is left (setup and the driver); and how many threads the last round used
(fewer when shrinking left little work, one after the busy-machine fallback). ``--busy`` runs a
CPU-bound competing process beside the timed solves; ``--rows`` makes a smaller set of the same
law (the 2-core development machine: ``--rows 2000000``).

    python3 benchmarks/bench_scaling16.py --out "$OUT/scaling16.md"   # bench_parallel_16.sh
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_parallel import spin  # noqa: E402

from solvers.binary import parallel, solve_binary  # noqa: E402
from solvers.binary import parallel_kernels as pk  # noqa: E402

LIBLINEAR = """
import sys, time, numpy as np, scipy.sparse as sp
from liblinear.liblinear import liblinear, parameter, problem
d = np.load(sys.argv[1])
X = sp.csr_matrix((d["data"], d["indices"], d["indptr"]), shape=tuple(d["shape"]))
prob = problem(d["y"], X)
param = parameter("-s 1 -c 1 -e 0.1 -q"); liblinear.set_print_string_function(param.print_func)
t = time.perf_counter(); liblinear.train(prob, param); print(time.perf_counter() - t)
"""


def uniform_set(n, d=1_000_000, per_row=40, seed=1):
    """The set of the module docstring, made in a few vectorised steps (tens of seconds)."""
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    cols = rng.integers(0, d, size=(n, per_row), dtype=np.int32)
    cols.sort(axis=1)
    vals = rng.random((n, per_row))
    vals /= np.sqrt((vals * vals).sum(axis=1))[:, None]
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    X = sp.csr_matrix((vals.ravel(), cols.ravel(), indptr), shape=(n, d))
    del cols, vals
    X.sum_duplicates()  # the rare repeated index of a row
    scores = X @ rng.normal(size=d)
    noise = 0.1 * scores.std() * rng.normal(size=n)
    return X, np.where(scores + noise > 0, 1.0, -1.0)


class Anatomy:
    """Wall time of the parallel rounds' parts, by wrapping their methods for one solve."""

    PARTS = {"resync": "resync", "objectives": "objectives", "full_range": "checks"}

    def __init__(self):
        self.seconds = dict.fromkeys(["rounds", "resync", "objectives", "checks"], 0.0)
        self.epochs = []  # (thread id, seconds) of the current round's compiled epochs
        self.slowest = self.excess = 0.0
        self.last_threads = 0
        self.originals = {}
        self.busy = False  # a timed part in progress: the parts it calls count as its own
        self.shares = []  # (threads, the least share of a thread's span on a core in the round)

    def __enter__(self):
        self._wrap(pk, "block_epoch", self._epoch)
        self._wrap(parallel._Round, "run", self._round)
        self._wrap(parallel._Round, "_watch_crowding", self._crowding)
        for name, part in self.PARTS.items():
            self._wrap(parallel._Round, name, self._timed(part))
        return self

    def __exit__(self, *exc):
        for (owner, name), fn in self.originals.items():
            setattr(owner, name, fn)

    def _wrap(self, owner, name, make):
        self.originals[(owner, name)] = fn = getattr(owner, name)
        setattr(owner, name, make(fn))

    def _epoch(self, fn):
        def epoch(*args):
            t = time.perf_counter()
            out = fn(*args)
            self.epochs.append(time.perf_counter() - t)
            return out

        return epoch

    def _round(self, fn):
        def run(rounds, *args):
            self.epochs = []
            parts_before = sum(self.seconds.values())  # a rebuild inside the round is its own
            t = time.perf_counter()
            out = fn(rounds, *args)
            inner = sum(self.seconds.values()) - parts_before
            self.seconds["rounds"] += time.perf_counter() - t - inner
            if self.epochs:
                self.slowest += max(self.epochs)
                self.excess += max(self.epochs) - sum(self.epochs) / len(self.epochs)
            self.last_threads = len(self.epochs)
            return out

        return run

    def _crowding(self, fn):
        def watch(rounds, K, shares):
            judged = None not in shares
            self.shares.append((K, min(shares) if judged else None))
            return fn(rounds, K, shares)

        return watch

    def crowding(self):
        """The rounds' thread counts in order, and each round's least share of a thread's span on
        a core ("-": a round not judged: too short, or after the fall to one thread)."""
        runs = []
        for k, _ in self.shares:
            if runs and runs[-1][0] == k:
                runs[-1][1] += 1
            else:
                runs.append([k, 1])
        threads = ", ".join(f"{k}×{n}" for k, n in runs)
        shares = " ".join("-" if share is None else f"{share:.2f}" for _, share in self.shares)
        return f"threads by round {threads}; least share of a thread's span on a core {shares}"

    def _timed(self, part):
        def wrap(fn):
            def timed(*args):
                if self.busy:
                    return fn(*args)
                self.busy, t = True, time.perf_counter()
                try:
                    return fn(*args)
                finally:
                    self.seconds[part] += time.perf_counter() - t
                    self.busy = False

            return timed

        return wrap

    def cells(self, wall):
        s = self.seconds
        if s["rounds"] == 0.0:  # one thread: the serial passes, not the rounds
            return "serial passes | | | | | | 1"
        rest = wall - sum(s.values())
        return (f"{self.slowest:.2f} (+{self.excess:.2f}) | {s['rounds'] - self.slowest:.2f} | "
                f"{s['resync']:.2f} | {s['objectives']:.2f} | {s['checks']:.2f} | {rest:.2f} | "
                f"{self.last_threads}")  # fmt: skip


def liblinear_time(X, y, limit):
    path = Path(os.environ.get("TMPDIR", "/tmp")) / "scaling16.npz"
    np.savez(path, data=X.data, indices=X.indices, indptr=X.indptr, shape=X.shape, y=y)
    try:
        out = subprocess.run([sys.executable, "-c", LIBLINEAR, str(path)], capture_output=True,
                             text=True, timeout=limit)  # fmt: skip
        return out.stdout.strip() or f"failed: {out.stderr.strip()[-200:]}"
    except subprocess.TimeoutExpired:
        return f"> {limit} s"
    finally:
        path.unlink(missing_ok=True)


def timed_rows(X, y, args, lines):
    """Time the solves, a row each appended to ``lines`` (and the file written after each);
    returns the lines on the rounds' threads."""
    crowding = []
    for loss in ("squared_hinge", "hinge"):
        base = None
        for k in args.threads if loss == "squared_hinge" else args.hinge_threads:
            with Anatomy() as anatomy:
                t = time.perf_counter()
                r = solve_binary(X, y, loss=loss, tol=0.1, n_jobs=k)
                s = time.perf_counter() - t
            base = base or s
            lines.append(f"| {loss} | {k} | {s:.2f} | {r.n_iter} | {base / s:.2f} | "
                         f"{r.status.value} | {anatomy.cells(s)} |")  # fmt: skip
            if anatomy.shares:
                crowding.append(f"- {loss}, {k} threads: {anatomy.crowding()}")
            print(lines[-1], flush=True)
            Path(args.out).write_text("\n".join(lines + [""] + crowding) + "\n")
    return crowding


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--hinge-threads", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--liblinear-limit", type=int, default=150, help="0: LIBLINEAR not run")
    parser.add_argument("--busy", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    lines = [f"# {os.cpu_count()} cores, busy={args.busy}; "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"]  # fmt: skip
    t = time.perf_counter()
    X, y = uniform_set(args.rows)
    lines.append(f"set: {X.shape[0]:,} x {X.shape[1]:,}, {X.nnz:,} non-zeros, made in "
                 f"{time.perf_counter() - t:.0f} s")  # fmt: skip
    # compile every kernel a timed run uses, the final checks' too (a solve that converges): the
    # parallel ones need a problem worth 2+ threads
    for deterministic in (False, True):
        for loss in ("squared_hinge", "hinge"):
            solve_binary(X[:100_000], y[:100_000], loss=loss, n_jobs=max(args.threads),
                         deterministic=deterministic, tol=1.0)  # fmt: skip
    solve_binary(X[:5000], y[:5000], n_jobs=1, tol=1.0)
    lines += ["", "| loss | threads | s | passes | speed-up | status | epochs, slowest thread "
              "(its excess over the mean) | rest of the rounds | w̃ rebuilds | objectives | "
              "final checks | setup and driver | threads in the last round |"]  # fmt: skip
    lines += ["|---" * 13 + "|"]
    competitor = spin() if args.busy else None
    try:
        crowding = timed_rows(X, y, args, lines)
    finally:
        if competitor is not None:
            competitor.kill()
    lines += [""] + crowding
    if args.liblinear_limit > 0:
        reference = liblinear_time(X, y, args.liblinear_limit)
        lines += ["", f"LIBLINEAR -s 1 -e 0.1, 1 thread: {reference} s"]
    lines.append(f"load average at the end {os.getloadavg()[0]:.2f}")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
