"""Helpers shared by the benchmark scripts: data, synthetic sets, timing, peak memory, LIBLINEAR.

Peak memory is measured in a child process: the child resets the kernel's high-water mark
(/proc/self/clear_refs), runs the function and reports VmHWM minus its resident size before the
call, so the figure is what the call itself added on top of the data it was given.
`peak_net_of_noop` is the method of the solver comparisons (binary and multi-class alike).

A forked child inherits the parent's heap, and allocations below glibc's (adaptive) mmap
threshold reuse pages that are already resident there, so small working sets read low or not at
all; `peak_in_fresh_process` avoids that for the solver comparisons: a spawned interpreter, a
fixed mmap threshold, and a warm-up call on a tiny problem before the measurement, so that the
first use of numpy, Numba and the allocator (about 2 MB in a fresh process, whatever the input)
is not counted either.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("MARGIN_SHARED_DATA", ROOT.parent / "shared" / "data"))
RESULTS = ROOT / "benchmarks" / "results"

DATASETS = {
    "a9a": ("a9a", "a9a.bz2"),
    "w8a": ("w8a", "w8a.bz2"),
    "news20": ("news20", "news20.bz2"),
    "reuters": ("reuters-money-fx", "reuters.trn.bz2"),
    "mushrooms": ("mushrooms", "mushrooms"),
    "heart_scale": ("heart_scale", "heart_scale"),
}


def read_dataset(path, dtype=np.float64):
    """(X CSR, y) of a LIBSVM file by `solvers.read_libsvm` (scikit-learn's reader if it fails)."""
    try:
        from solvers.io import read_libsvm

        return read_libsvm(str(path), dtype=dtype)
    except Exception as exc:  # the reader is not what is measured here
        print(
            f"# solvers.read_libsvm failed ({type(exc).__name__}); using scikit-learn's reader",
            file=sys.stderr,
        )
    from sklearn.datasets import load_svmlight_file

    X, y = load_svmlight_file(str(path), dtype=dtype)
    return X.tocsr(), y


def load_binary(name, dtype=np.float64):
    """A shared dataset as a binary problem with labels in {-1, +1}.

    news20 becomes class 1 against the rest; other sets map their larger label to +1.
    """
    folder, file = DATASETS[name]
    X, y = read_dataset(SHARED_DATA / folder / file, dtype=dtype)
    positive = 1.0 if name == "news20" else y.max()
    return X, np.where(y == positive, 1.0, -1.0)


def synthetic_sparse(
    n_samples, n_features, nnz_per_row, *, seed=0, dtype=np.float64, zipf=1.1, noise=0.1
):
    """A text-like sparse binary problem: power-law feature frequencies, L2-normalised rows.

    Each row draws about ``nnz_per_row`` distinct features (Zipf-like popularity, so a few
    columns are dense and most are rare, as in bag-of-words data), tf-idf-like positive values,
    and the label is the sign of a sparse hidden linear model plus noise.

    Returns (X CSR (n_samples, n_features) of `dtype` with int32 indices, y in {-1, +1}).
    """
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, n_features + 1, dtype=np.float64)
    popularity = ranks ** (-zipf)
    cdf = np.cumsum(popularity / popularity.sum())
    permute = rng.permutation(n_features).astype(np.int64)
    draws = _draws_for_distinct(cdf, nnz_per_row, rng)
    lengths = np.maximum(1, rng.poisson(draws, size=n_samples))
    indptr = np.zeros(n_samples + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    nnz = int(indptr[-1])
    cols = permute[np.minimum(np.searchsorted(cdf, rng.random(nnz)), n_features - 1)]
    rows = np.repeat(np.arange(n_samples, dtype=np.int64), lengths)
    keys = rows * n_features + cols
    keys.sort()
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]  # sorted, duplicates dropped
    del rows, cols
    rows = keys // n_features
    indices = (keys - rows * n_features).astype(np.int32)
    del keys
    counts = np.bincount(rows, minlength=n_samples)
    del rows
    indptr = np.zeros(n_samples + 1, dtype=np.int64 if len(indices) >= 2**31 else np.int32)
    np.cumsum(counts, out=indptr[1:])
    idf = np.log(n_features / (1.0 + np.bincount(indices, minlength=n_features)) + 1.0)
    data = (rng.random(len(indices)) + 0.5) * idf[indices]
    norms = np.sqrt(np.add.reduceat(data * data, indptr[:-1])) if len(data) else data
    norms[counts == 0] = 1.0
    data /= np.repeat(norms, counts)
    X = sp.csr_matrix((data.astype(dtype), indices, indptr), shape=(n_samples, n_features))
    w_true = np.zeros(n_features)
    support = rng.choice(n_features, size=max(1, n_features // 10), replace=False)
    w_true[support] = rng.standard_normal(support.size)
    score = X @ w_true
    score += noise * score.std() * rng.standard_normal(n_samples)
    y = np.where(score > np.median(score), 1.0, -1.0)
    return X, y


def _draws_for_distinct(cdf, target, rng, probe_rows=2000):
    """Draws per row that leave about ``target`` distinct features after duplicates are dropped."""
    draws = float(target)
    for _ in range(3):
        picks = np.searchsorted(cdf, rng.random((probe_rows, int(round(draws)))))
        picks.sort(axis=1)
        distinct = 1.0 + np.mean(np.sum(picks[:, 1:] != picks[:, :-1], axis=1))
        draws *= target / distinct
    return draws


def rcv1_like(scale=1.0, dtype=np.float64, seed=0):
    """About 677k × 47k with 49M non-zeros (×scale rows), L2-normalised rows, like rcv1."""
    return synthetic_sparse(int(677_399 * scale), 47_236, 73, seed=seed, dtype=dtype)


def news20_like(scale=1.0, dtype=np.float64, seed=0):
    """About 20k × 1.36M with 9M non-zeros (×scale rows), like news20.binary."""
    return synthetic_sparse(int(19_996 * scale), 1_355_191, 455, seed=seed, dtype=dtype, zipf=0.9)


def csr_nbytes(X):
    return X.data.nbytes + X.indices.nbytes + X.indptr.nbytes


def best_time(fn, repeat=3):
    """(min wall seconds, min CPU seconds of this process, last result) of ``repeat`` calls.

    CPU time is reported beside wall time because the benchmark machine may be shared: on a
    loaded machine the wall clock also counts the time spent waiting for a core.
    """
    best, best_cpu, out = np.inf, np.inf, None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best, best_cpu, out


def _status_kib(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def _child(fn, args, warmup_args, conn):
    """Measure ``fn(*args)`` in this (child) process and send (kind, result, peak bytes)."""
    try:
        if warmup_args is not None:
            fn(*warmup_args)
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = _status_kib("VmRSS")
        out = fn(*args)
        conn.send(("ok", out, (_status_kib("VmHWM") - before) * 1024))
    except BaseException:
        conn.send(("error", traceback.format_exc(), 0))
    finally:
        conn.close()


def _measure_in(ctx, fn, args, warmup_args):
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, args, warmup_args, child))
    proc.start()
    child.close()
    kind, out, peak = parent.recv()
    proc.join()
    if kind != "ok":
        raise RuntimeError(f"measured call failed in the child:\n{out}")
    return out, peak


def run_measured(fn):
    """Run ``fn()`` in a forked child; return (its result, extra peak resident bytes)."""
    return _measure_in(mp.get_context("fork"), fn, (), None)


def _noop(*args):
    return None


def peak_net_of_noop(fn, *args, warmup_args=None):
    """`peak_in_fresh_process` of ``fn(*args)`` minus that of a call doing nothing on the same
    arguments (measured the same way): what the call itself adds, net of the measurement's own
    cost. Returns (the result, extra peak resident bytes, at least 0)."""
    out, peak = peak_in_fresh_process(fn, *args, warmup_args=warmup_args)
    _, baseline = peak_in_fresh_process(_noop, *args, warmup_args=warmup_args)
    return out, max(0, peak - baseline)


def peak_in_fresh_process(fn, *args, warmup_args=None):
    """Run ``fn(*args)`` in a new interpreter; return (its result, extra peak resident bytes).

    ``fn`` must be a module-level function (it travels by name). ``warmup_args``, when given, are
    the arguments of a first call, outside the measurement. Allocations of 128 KiB and more are
    served by fresh mappings (a fixed glibc mmap threshold), so each one counts in full.
    """
    saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(128 << 10)  # read by the new interpreter at start
    try:
        return _measure_in(mp.get_context("spawn"), fn, args, warmup_args)
    finally:
        if saved is None:
            del os.environ["MALLOC_MMAP_THRESHOLD_"]
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = saved


# --- LIBLINEAR (liblinear-official) -------------------------------------------------------------


def liblinear_problem(X, y, bias=0.0):
    """LIBLINEAR's own copy of the data (the conversion timed apart from training)."""
    from liblinear.liblinear import problem

    prob = problem(np.asarray(y, dtype=np.float64), sp.csr_matrix(X, dtype=np.float64))
    prob.set_bias(bias if bias > 0 else -1)
    return prob


def liblinear_train(prob, solver, C=1.0, tol=0.1, bias=0.0, weights=None):
    """Train on a converted problem; returns (w, intercept, labels, train seconds).

    The CPU seconds of the same call are left in ``liblinear_train.cpu_s``.

    ``solver`` is LIBLINEAR's -s number; ``weights`` maps a label to its -wi multiplier. For a
    binary model the decision value w·x + intercept > 0 means ``labels[0]``.
    """
    from liblinear.liblinear import liblinear, parameter, toPyModel

    opts = f"-s {solver} -c {C!r} -e {tol!r} -B {bias if bias > 0 else -1!r} -q"
    for label, weight in (weights or {}).items():
        opts += f" -w{int(label)} {weight!r}"
    param = parameter(opts)
    liblinear.set_print_string_function(param.print_func)
    t0, c0 = time.perf_counter(), time.process_time()
    model = toPyModel(liblinear.train(prob, param))
    seconds = time.perf_counter() - t0
    liblinear_train.cpu_s = time.process_time() - c0
    n = model.get_nr_feature()
    k = model.get_nr_class()
    n_w = n + (1 if model.bias >= 0 else 0)
    cols = 1 if k == 2 and solver != 4 else k
    W = np.ctypeslib.as_array(model.w, shape=(n_w * cols,)).reshape(n_w, cols).T.copy()
    labels = model.get_labels()
    w = W[:, :n]
    intercept = W[:, n] * model.bias if model.bias >= 0 else np.zeros(cols)
    if cols == 1:
        return w[0], float(intercept[0]), labels, seconds
    return w, intercept, labels, seconds


def binary_primal(X, y, w, intercept, C, loss, bias):
    """½‖w̃‖² + C Σ ξ_i with w̃ = [w, intercept / bias] (the bias weight is regularized)."""
    w_bias = intercept / bias if bias > 0 else 0.0
    margin = y * (X @ w + intercept)
    slack = np.maximum(0.0, 1.0 - margin)
    losses = slack if loss == "hinge" else slack**2
    return 0.5 * (w @ w + w_bias**2) + float(np.sum(C * losses))


def liblinear_binary_w(X, y, solver, C, tol, bias):
    """LIBLINEAR on ±1 labels, oriented so that the decision value > 0 means +1."""
    t0 = time.perf_counter()
    prob = liblinear_problem(X, y, bias)
    convert = time.perf_counter() - t0
    w, b, labels, train = liblinear_train(prob, solver, C, tol, bias)
    if labels[0] != 1:
        w, b = -w, -b
    return w, b, convert, train


# --- results fragments --------------------------------------------------------------------------


class _Tee:
    def __init__(self, stream):
        self.stream, self.lines = stream, []

    def write(self, text):
        self.stream.write(text)
        self.lines.append(text)
        return len(text)

    def flush(self):
        self.stream.flush()


def command_line() -> str:
    """The command that runs this script, as BENCHMARKS.md shows it."""
    script = Path(sys.argv[0]).resolve().relative_to(ROOT)
    return " ".join([".venv/bin/python", str(script), *sys.argv[1:]])


def _markdown(text: str) -> str:
    """A script's output as Markdown: its ``# ...`` comment lines become plain lines (not
    headings), tables are set apart from the lines around them by blank lines, and a table that
    resumes after such a line gets its header again."""
    lines = [line[2:] if line.startswith("# ") else line for line in text.rstrip().splitlines()]
    out, header = [], None
    for k, line in enumerate(lines):
        is_table = line.startswith("|")
        if is_table and k + 1 < len(lines) and lines[k + 1].startswith("|---"):
            header = (line, lines[k + 1])
        starts_table = is_table and not (out and out[-1].startswith("|"))
        if out and out[-1] and line and out[-1].startswith("|") != is_table:
            out.append("")
        if starts_table and header is not None and not line.startswith("|---"):
            if line != header[0]:
                out += list(header)
        out.append(line)
    return "\n".join(out)


class output_block:
    """Tee what the script prints into ``fragment`` (a file of benchmarks/results/), between
    markers naming the command: a later run of the same command replaces its block, so the
    tables there are always a run's own output. Does nothing when ``fragment`` is None."""

    def __init__(self, fragment):
        self.fragment = None if fragment is None else Path(fragment)

    def __enter__(self):
        self.command = command_line()
        self.tee = _Tee(sys.stdout)
        if self.fragment is not None:
            sys.stdout = self.tee
        return self

    def __exit__(self, *exc):
        if self.fragment is None:
            return False
        sys.stdout = self.tee.stream
        if exc[0] is not None:
            return False
        start = f"<!-- output of `{self.command}` -->"
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        machine = f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the end"
        body = _markdown("".join(self.tee.lines))
        block = (
            f"{start}\n\n`{self.command}` ({stamp}, {machine})\n\n{body}\n\n<!-- end of output -->"
        )
        text = self.fragment.read_text() if self.fragment.exists() else ""
        if start in text:
            head, rest = text.split(start, 1)
            tail = rest.split("<!-- end of output -->", 1)[1]
            text = head + block + tail
        else:
            text = text.rstrip() + "\n\n" + block + "\n"
        self.fragment.write_text(text)
        return False
