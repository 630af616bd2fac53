"""A solve stopped part-way and resumed from its dual iterate (warm_start with a stored
`dual_coef_` on a fresh estimator, as a retried job does) reaches the same certified optimum as
one uninterrupted solve: the same status and tolerance, the same objective and weights."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import LinearSVC, LinearSVR


def _data(n_classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = sp.random(400, 30, density=0.3, random_state=seed, format="csr")
    if n_classes == 0:
        return X, X @ rng.standard_normal(30) + 0.1 * rng.standard_normal(400)
    return X, rng.integers(0, n_classes, 400).astype(float)


def _stop_after(n):
    seen = []

    def callback(progress):
        seen.append(progress.iteration)
        return False if len(seen) >= n else None

    return callback


def _resumed(make, X, y, stops=(2, 3)):
    alpha = None
    for n in stops:  # a few interrupted attempts, each on a fresh estimator
        part = make(callback=_stop_after(n), warm_start=True)
        if alpha is not None:
            part.dual_coef_ = alpha
        part.fit(X, y)
        assert part.status_ == "stopped"
        alpha = part.dual_coef_
    final = make(warm_start=True)
    final.dual_coef_ = alpha
    return final.fit(X, y)


@pytest.mark.parametrize(
    "n_classes, options",
    [
        (2, {"loss": "hinge"}),
        (2, {"loss": "squared_hinge"}),
        (4, {"multi_class": "ovr"}),
        (4, {"multi_class": "crammer_singer"}),
    ],
)
def test_resumed_classifier_reaches_the_same_optimum(n_classes, options):
    X, y = _data(n_classes)

    def make(**kw):
        return LinearSVC(C=1.0, tol=1e-6, max_iter=5000, **options, **kw)

    straight = make().fit(X, y)
    resumed = _resumed(make, X, y)
    assert straight.status_ == resumed.status_ == "converged"
    assert resumed.gap_ <= 1e-6
    np.testing.assert_allclose(resumed.coef_, straight.coef_, atol=1e-4)
    np.testing.assert_allclose(resumed.objective_, straight.objective_, rtol=1e-6)


def test_resumed_regressor_reaches_the_same_optimum():
    X, y = _data(0)

    def make(**kw):
        return LinearSVR(
            C=1.0, epsilon=0.05, tol=1e-5, max_iter=50000, loss="squared_epsilon_insensitive", **kw
        )

    straight = make().fit(X, y)
    resumed = _resumed(make, X, y)
    assert straight.status_ == resumed.status_ == "converged"
    # the same tolerance on the violations; both primal objectives agree to its accuracy
    np.testing.assert_allclose(resumed.coef_, straight.coef_, atol=1e-3)
    np.testing.assert_allclose(resumed.objective_, straight.objective_, rtol=1e-6)


def test_a_resumed_solve_starts_where_the_stored_iterate_is():
    """Warm from a near-optimal iterate, the solve needs far fewer passes than from zero."""
    X, y = _data(2, seed=3)
    cold = LinearSVC(C=1.0, tol=1e-6, max_iter=5000).fit(X, y)
    warm = LinearSVC(C=1.0, tol=1e-6, max_iter=5000, warm_start=True)
    warm.dual_coef_ = cold.dual_coef_
    warm.fit(X, y)
    assert warm.n_iter_ <= 2 < cold.n_iter_
