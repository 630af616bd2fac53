"""One binary problem on several threads (`solvers.binary.parallel`): the same certified optimum.

The sets here are small, so the solver would pick one thread by itself; the tests force the
thread count to exercise the parallel rounds (on 2 cores, 3 threads also test oversubscription).
"""

import numpy as np
import pytest

from solvers._core.problem import csr_arrays
from solvers._core.progress import Status
from solvers.binary import parallel, solve_binary
from solvers.estimators import LinearSVC
from tests.solvers._binary_helpers import load, synthetic
from tests.solvers.test_binary_optimality import TIGHT, _check_certified


@pytest.fixture
def forced_threads(monkeypatch):
    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("shrinking", [True, False])
@pytest.mark.parametrize("bias", [0.0, 1.0])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared_error"])
def test_certified_at_tight_tol(forced_threads, loss, bias, shrinking, deterministic):
    X, y = synthetic(n=2000, d=200, density=0.05)
    tol = TIGHT[loss]
    result = solve_binary(
        X, y, loss=loss, C=0.5, bias=bias, tol=tol, shrinking=shrinking, max_iter=100_000,
        n_jobs=2, deterministic=deterministic, newton=False,
    )  # fmt: skip
    _check_certified(X, y, result, 0.5, loss, bias, tol)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_same_optimum_as_one_thread(forced_threads, loss):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=1)
    one = solve_binary(X, y, loss=loss, bias=1.0, tol=1e-5, max_iter=100_000, newton=False)
    for deterministic in (False, True):
        three = solve_binary(
            X, y, loss=loss, bias=1.0, tol=1e-5, max_iter=100_000, n_jobs=3,
            deterministic=deterministic, newton=False,
        )  # fmt: skip
        assert three.status is Status.CONVERGED
        assert three.primal == pytest.approx(one.primal, rel=1e-6)


def test_deterministic_mode_repeats_exactly(forced_threads):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=3)
    runs = [
        solve_binary(X, y, tol=1e-3, n_jobs=3, deterministic=True, random_state=7) for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].w, runs[1].w)
    np.testing.assert_array_equal(runs[0].alpha, runs[1].alpha)
    assert runs[0].n_iter == runs[1].n_iter


@pytest.mark.parametrize("deterministic", [False, True])
def test_progress_reports_the_projected_gradient_range(forced_threads, deterministic):
    X, y = synthetic(n=2000, d=60)
    seen = []
    result = solve_binary(
        X, y, tol=1e-4, n_jobs=2, callback=seen.append, objective_every=1,
        deterministic=deterministic,
    )  # fmt: skip
    assert result.status is Status.CONVERGED
    passes = [p for p in seen if p.M is not None and p.m is not None]
    assert all(p.gap == pytest.approx(p.M - p.m) for p in passes)
    assert seen[-1].gap <= 1e-4
    if deterministic:  # every accepted round decreases f(α); a rejected one leaves it
        duals = [p.dual for p in seen if p.dual is not None]
        assert all(b <= a + 1e-9 * abs(a) for a, b in zip(duals, duals[1:], strict=False))


def test_estimator_uses_n_jobs_for_two_classes(forced_threads):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=2)
    one = LinearSVC(tol=1e-5, max_iter=100_000).fit(X, y)
    two = LinearSVC(tol=1e-5, max_iter=100_000, n_jobs=2).fit(X, y)
    assert two.status_ == "converged"
    assert two.objective_ == pytest.approx(one.objective_, rel=1e-5)


def test_small_problems_pick_one_thread():
    X, y = load("a9a")  # 32,561 rows, 451,592 non-zeros: too little work per thread
    assert parallel.threads_for(csr_arrays(X), X.shape[0], 16) == 1
    X, y = synthetic(n=300)
    assert parallel.threads_for(csr_arrays(X), X.shape[0], 2) == 1


def test_n_jobs_is_checked():
    X, y = synthetic()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_jobs"):
            solve_binary(X, y, n_jobs=bad)
