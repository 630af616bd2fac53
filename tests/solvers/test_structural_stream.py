"""The online (cache) mode reaches the batch optimum with memory bounded by its cache."""

import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import Status, fit_structural, fit_structural_stream
from solvers.structural.chunks import npy_chunks, save_npy_problem


def make_problem(n_examples=3000, per_example=4, n_features=30, seed=0, shift=3.0):
    """Constraint rows around a hidden w; `shift` leaves most of them satisfied (few SVs)."""
    rng = np.random.default_rng(seed)
    n_rows = n_examples * per_example
    X = sp.random(n_rows, n_features, density=0.3, random_state=rng, format="csr")
    X.data = rng.normal(size=X.nnz)
    w = rng.normal(size=n_features)
    margins = X @ w - shift + 0.2 * rng.normal(size=n_rows)
    return X, margins, np.repeat(np.arange(n_examples), per_example)


@pytest.fixture(scope="module")
def problem():
    X, margins, groups = make_problem(n_examples=2000)
    batch = fit_structural(X, margins, groups, C=0.1, tol=1e-6, max_iter=5000)
    assert batch.converged
    return X, margins, groups, batch


def in_memory_chunks(X, margins, groups, rows):
    def chunks():
        for r in range(0, X.shape[0], rows):
            yield X[r : r + rows], margins[r : r + rows], groups[r : r + rows]

    return chunks


def assert_certifies(res, batch, tol, r=1.0):
    assert res.status is Status.CONVERGED
    assert res.upper_bound - res.lower_bound <= tol * abs(res.upper_bound)
    # Both brackets hold the one optimum.
    assert res.lower_bound <= batch.upper_bound and batch.lower_bound <= res.upper_bound
    # Strong convexity: ½‖(w − w*) ∘ r‖² ≤ primal(w) − OPT ≤ UB − LB, for both solutions.
    dist = np.linalg.norm((res.w - batch.w) * r)
    assert dist <= np.sqrt(2 * (res.upper_bound - res.lower_bound)) + np.sqrt(2 * batch.gap)


def test_online_from_a_qid_file_reaches_the_batch_optimum(problem, tmp_path):
    from solvers.io import write_libsvm

    X, margins, groups, batch = problem
    path = tmp_path / "structural.txt"
    write_libsvm(path, X, margins, qid=groups + 1)
    res = fit_structural_stream(
        path,
        n_features=X.shape[1],
        chunk_rows=X.shape[0] // 10,
        cache_size=0.1,
        C=0.1,
        tol=1e-3,
        passes=6,
    )
    assert_certifies(res, batch, 1e-3)
    assert res.extra["examples"] == 2000 and res.extra["evicted_support_vectors"] == 0
    assert res.history[-1].upper_bound == res.upper_bound
    assert all(p.lower_bound <= batch.upper_bound * (1 + 1e-9) for p in res.history)


def test_memory_is_bounded_by_the_cache_not_the_data(tmp_path):
    X, margins, groups = make_problem(n_examples=8000, per_example=4, seed=1)
    data_bytes = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes + margins.nbytes
    save_npy_problem(tmp_path, X, margins, groups)
    source = npy_chunks(tmp_path, X.shape[0] // 10)
    del X, margins, groups
    fit_structural_stream(source, n_features=30, cache_size=0.1, C=0.1, passes=1)  # compile
    tracemalloc.start()
    try:
        res = fit_structural_stream(
            source, n_features=30, cache_size=0.1, C=0.1, tol=1e-3, passes=6
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.converged
    assert res.extra["cache_bytes"] <= 0.1 * 2**20 * 1.05
    # Two chunks (one in flight, one split example) plus the cache; far below the data.
    assert peak < 0.45 * data_bytes, (peak, data_bytes)


def test_chunk_boundaries_inside_examples_do_not_matter(problem):
    X, margins, groups, _ = problem
    X, margins, groups = X[:2000], margins[:2000], groups[:2000]
    runs = [
        fit_structural_stream(
            in_memory_chunks(X, margins, groups, rows),
            n_features=30,
            cache_size=0.5,
            C=0.1,
            tol=1e-4,
            passes=4,
        )
        for rows in (7, 500, 2000)
    ]
    for other in runs[1:]:
        np.testing.assert_allclose(other.w, runs[0].w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("nonneg", [False, True])
def test_prior_and_bound_match_batch(problem, nonneg):
    X, margins, groups, _ = problem
    X, margins, groups = X[:4000], margins[:4000], groups[:4000]
    rng = np.random.default_rng(3)
    w0 = rng.normal(0, 0.3, 30)
    r = rng.uniform(0.5, 2.0, 30)
    opts = dict(C=0.1, nonneg=nonneg, w0=w0, reg_scale=r)
    batch = fit_structural(X, margins, groups, tol=1e-6, max_iter=5000, **opts)
    res = fit_structural_stream(
        in_memory_chunks(X, margins, groups, 400),
        n_features=30,
        cache_size=0.5,
        tol=1e-3,
        passes=6,
        **opts,
    )
    assert_certifies(res, batch, 1e-3, r)
    if nonneg:
        assert np.all(res.w >= 0) and np.any(res.w == 0)


def test_cache_too_small_for_the_support_vectors_keeps_valid_bounds():
    X, margins, groups = make_problem(n_examples=1000, shift=0.0, seed=4)
    ref = fit_structural(X, margins, groups, C=0.1, tol=1e-4, max_iter=5000)
    res = fit_structural_stream(
        in_memory_chunks(X, margins, groups, 400),
        n_features=30,
        cache_size=0.02,
        C=0.1,
        tol=1e-3,
        passes=2,
    )
    assert res.extra["evicted_support_vectors"] > 0
    assert res.status is Status.MAX_ITER
    assert res.lower_bound <= ref.upper_bound and ref.lower_bound <= res.upper_bound


def test_callback_stop_and_errors(problem):
    X, margins, groups, _ = problem
    source = in_memory_chunks(X, margins, groups, 1200)
    res = fit_structural_stream(
        source, n_features=30, C=0.1, tol=1e-12, passes=5, callback=lambda p: False
    )
    assert res.status is Status.STOPPED and res.n_iter == 1 and res.upper_bound is not None
    with pytest.raises(ValueError, match="n_features"):
        fit_structural_stream(source)
    with pytest.raises(TypeError, match="source must be"):
        fit_structural_stream(42, n_features=30)
    with pytest.raises(ValueError, match="C must be a positive scalar"):
        fit_structural_stream(source, n_features=30, C=np.ones(3))


@pytest.mark.parametrize("stop_by", ["callback", "time_limit"])
def test_a_long_pass_is_stopped_within_it(problem, monkeypatch, stop_by):
    """With tol 1e-300 each optimization of the cache ran max_iter epochs, and a job's pass
    lasted minutes past its time_limit of 5 s (a cancel was not heard either): the monitor
    was asked only at a pass's end. Inside a pass it is asked every _PASS_REPORT_S (here: at
    every epoch and chunk); the solve returns the state it reached, with exact bounds."""
    from solvers.structural import stream

    monkeypatch.setattr(stream, "_PASS_REPORT_S", 0.0)
    X, margins, groups, batch = problem
    seen = []
    stop = stop_by == "callback"
    options = {"callback": lambda p: seen.append(p) or not stop}
    if not stop:
        options["time_limit"] = 1e-9
    res = fit_structural_stream(
        in_memory_chunks(X, margins, groups, 1200), n_features=30, C=0.1, tol=1e-300,
        max_iter=20_000, passes=5, **options,
    )  # fmt: skip
    assert res.status is (Status.STOPPED if stop else Status.TIME_LIMIT) and res.n_iter == 1
    first = seen[0]  # from inside the first pass: no gap yet
    assert first.gap is None and first.iteration == 1 and first.lower_bound is not None
    assert res.extra["examples"] < 2000  # stopped before the pass's end
    # valid bounds of the returned state: LB <= OPT <= UB
    assert res.lower_bound <= batch.upper_bound and batch.lower_bound <= res.upper_bound


def test_warm_start_restores_the_cache(problem):
    X, margins, groups, batch = problem
    source = in_memory_chunks(X, margins, groups, 1200)
    first = fit_structural_stream(source, n_features=30, C=0.1, tol=1e-3, passes=1)
    assert first.status is Status.MAX_ITER
    cold = fit_structural_stream(source, n_features=30, C=0.1, tol=1e-4, passes=10)
    warm = fit_structural_stream(source, n_features=30, C=0.1, tol=1e-4, passes=10,
                                 warm_start=first)  # fmt: skip
    assert cold.converged and warm.converged and warm.n_iter < cold.n_iter
    assert_certifies(warm, batch, 1e-4)


def test_qid_file_read_whole_gives_the_batch_problem(problem, tmp_path):
    from solvers import read_libsvm
    from solvers.io import write_libsvm

    X, margins, groups, batch = problem
    path = tmp_path / "structural.txt"
    write_libsvm(path, X, margins, qid=groups + 7)
    Xr, lr, qid = read_libsvm(path, n_features=X.shape[1], query_id=True)
    res = fit_structural(Xr, lr, qid, C=0.1, tol=1e-6, max_iter=5000)
    assert res.upper_bound == pytest.approx(batch.upper_bound, rel=1e-5)
    np.testing.assert_allclose(res.w, batch.w, atol=1e-2 * np.abs(batch.w).max())
