"""Compile (or load) every solver kernel present by fitting tiny problems: `margin warm`.

Run at image build time (as the runtime user, with NUMBA_CACHE_DIR set) and by `make serve`, so
that the compile happens once, into Numba's on-disk cache; every worker process runs it again at
start, before it takes jobs (loading the cached kernels, about a second), so that no job's
`train_time_s` includes a compile and a worker reports ready only once it is warm.

Each step fits a tiny synthetic problem through the same entry points the service uses; a step
whose solver module is not part of this build is skipped and named, any other failure fails.

The cache is specific to the CPU model that compiled it: on a host with another CPU, Numba
compiles once more into the same (writable) cache directory.
"""

import importlib.util
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

N_ROWS, N_FEATURES = 60, 8
FAST = {"max_iter": 20, "tol": 0.5}


def _present(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _data(n_classes: int, seed: int = 0):
    """A small sparse problem: (X csr float64, labels) with n_classes classes (0 = regression)."""
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((N_ROWS, N_FEATURES)) * (rng.random((N_ROWS, N_FEATURES)) < 0.6)
    X = sp.csr_matrix(dense)
    if n_classes == 0:
        y = dense @ rng.standard_normal(N_FEATURES)
    else:
        y = (np.arange(N_ROWS) % n_classes).astype(np.float64) + 1.0
    return X, y


def _through_reader(X, y):
    """Round-trip through read_libsvm so the reader's kernels and the service's dtypes are used."""
    if not (_present("solvers.io")):
        return X, y
    import solvers

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "warm.svm"
        solvers.write_libsvm(path, X, y)
        X, y = solvers.read_libsvm(path)[:2]
    return X, y


def _linear_svc(X, y):
    import solvers

    for multi_class in ("ovr", "crammer_singer", "weston_watkins"):
        if multi_class != "ovr" and not _present(f"solvers.multiclass.{multi_class}"):
            continue  # not in this build
        for loss in ("squared_hinge", "hinge"):
            if multi_class != "ovr" and loss == "hinge":
                continue
            solvers.LinearSVC(loss=loss, multi_class=multi_class, **FAST).fit(X, y)


def _linear_svr(X, y):
    import solvers

    for loss in ("epsilon_insensitive", "squared_epsilon_insensitive"):
        solvers.LinearSVR(loss=loss, **FAST).fit(X, y)


def _structural(X, y):
    import solvers

    groups = np.arange(X.shape[0]) // 3
    margins = np.abs(y) + 1.0
    solvers.fit_structural(X, margins, groups, **FAST)


def _binary_core(X, y):
    import solvers

    signs = np.where(y > np.median(y), 1.0, -1.0)
    for loss in ("squared_hinge", "hinge"):
        solvers.solve_binary(X, signs, loss=loss, **FAST)
    solvers.solve_binary(X, y, loss="squared_error", **FAST)


def _newton_finish(X, y):
    """Fits that stall on purpose (a tolerance no pass meets): after the stall detector's cap of
    passes the primal Newton finish runs, for the binary, one-vs-rest and SVR squared losses."""
    import solvers

    stall = {"max_iter": 320, "tol": 1e-15, "C": 1e3}
    signs = np.where(y > np.median(y), 1.0, -1.0)
    solvers.solve_binary(X, signs, loss="squared_hinge", **stall)
    classes = np.arange(X.shape[0]) % 3
    solvers.LinearSVC(loss="squared_hinge", **stall).fit(X, classes)
    solvers.LinearSVR(loss="squared_epsilon_insensitive", **stall).fit(X, y)


def _parallel_binary(X, y):
    """The parallel kernels run only on problems large enough for two threads: one pass of each
    mode on such a problem."""
    import solvers
    from solvers.binary import parallel

    n_rows = 2 * parallel.MIN_NNZ_PER_THREAD // 40 + 2_000
    rng = np.random.default_rng(0)
    big = sp.random(n_rows, 1_000, density=0.04, format="csr", random_state=rng)
    signs = np.where(rng.random(n_rows) < 0.5, 1.0, -1.0)
    for deterministic in (False, True):
        for loss in ("squared_hinge", "hinge"):
            solvers.solve_binary(big, signs, loss=loss, n_jobs=2, deterministic=deterministic,
                                 max_iter=2, tol=0.5)  # fmt: skip


# (name, modules it needs, n_classes of its data, function)
STEPS = [
    ("binary solver (all losses)", ["solvers.binary"], 0, _binary_core),
    ("LinearSVC, two classes", ["solvers.estimators.linear_svc"], 2, _linear_svc),
    ("LinearSVC, three classes", ["solvers.estimators.linear_svc", "solvers.multiclass"], 3,
     _linear_svc),
    ("LinearSVR", ["solvers.estimators.linear_svr"], 0, _linear_svr),
    ("structural", ["solvers.structural"], 0, _structural),
    ("Newton finish", ["solvers._core.newton"], 0, _newton_finish),
    ("parallel binary solver", ["solvers.binary.parallel"], 0, _parallel_binary),
]


def _cache_files(cache_dir: str | None) -> int:
    if not cache_dir or not Path(cache_dir).is_dir():
        return 0
    return sum(1 for p in Path(cache_dir).rglob("*") if p.suffix in (".nbi", ".nbc"))


def main(quiet: bool = False) -> int:
    """Run every step; 1 when kernels were compiled but no cache file appeared."""
    cache_dir = os.environ.get("NUMBA_CACHE_DIR")
    say = (lambda *a, **k: None) if quiet else print
    ran = 0
    for name, modules, n_classes, step in STEPS:
        missing = [m for m in modules if not _present(m)]
        if missing:
            say(f"skipped {name}: {', '.join(missing)} not in this build")
            continue
        start = time.perf_counter()
        with warnings.catch_warnings():
            # A few passes compile the kernels; the fits are not meant to converge.
            warnings.simplefilter("ignore")
            step(*_through_reader(*_data(n_classes)))
        ran += 1
        say(f"warmed {name} in {time.perf_counter() - start:.1f} s")
    files = _cache_files(cache_dir)
    say(f"{ran} of {len(STEPS)} steps ran; {files} cache files in {cache_dir or '(default)'}")
    if ran and cache_dir and files == 0:
        print(f"expected Numba cache files under {cache_dir}, found none", file=sys.stderr)
        return 1
    return 0


def warm_worker(log) -> float:
    """Warm this worker process before it takes jobs (and before it reports ready): load, or
    compile, every kernel. Returns the seconds it took."""
    start = time.perf_counter()
    try:
        main(quiet=True)
    except Exception:  # a worker without a warm cache still works: its first job compiles
        log.exception("warming the solver kernels failed")
    took = time.perf_counter() - start
    log.info("solver kernels warm in %.1f s", took)
    return took


if __name__ == "__main__":
    sys.exit(main())
