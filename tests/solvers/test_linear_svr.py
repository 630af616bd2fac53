"""`solvers.LinearSVR`: scikit-learn conformance and agreement with scikit-learn's LinearSVR."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_diabetes
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVR as SkLinearSVR
from sklearn.utils.estimator_checks import parametrize_with_checks

from solvers import LinearSVR

# Weights equal repetition only up to the stopping tolerance (scikit-learn marks the same checks
# for its own LinearSVR); test_sample_weights_equal_repetition checks it at a tight tolerance.
WEIGHT_CHECKS = {
    name: "sample weights equal repetition only to the solver's tolerance"
    for name in (
        "check_sample_weight_equivalence_on_dense_data",
        "check_sample_weight_equivalence_on_sparse_data",
    )
}


@parametrize_with_checks(
    [LinearSVR(), LinearSVR(loss="squared_epsilon_insensitive")],
    expected_failed_checks=lambda est: WEIGHT_CHECKS,
)
def test_sklearn_conformance(estimator, check):
    check(estimator)


def scaled_diabetes():
    X, y = load_diabetes(return_X_y=True)
    return X / X.std(axis=0), y


@pytest.mark.parametrize("loss", ["epsilon_insensitive", "squared_epsilon_insensitive"])
def test_agrees_with_sklearn(loss):
    X, y = scaled_diabetes()
    C = 0.1 if loss == "epsilon_insensitive" else 1.0
    ours = LinearSVR(C=C, epsilon=0.5, loss=loss, tol=1e-10, max_iter=20000).fit(X, y)
    ref = SkLinearSVR(
        C=C, epsilon=0.5, loss=loss, tol=1e-10, max_iter=100000, dual=True, random_state=0
    ).fit(X, y)
    scale = np.abs(ref.coef_).max()
    np.testing.assert_allclose(ours.coef_, ref.coef_, atol=1e-6 * scale)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, atol=1e-6 * scale)
    assert ours.status_ == "converged" and ours.gap_ <= 1e-10
    np.testing.assert_allclose(ours.predict(X), ref.predict(X), atol=1e-5 * np.abs(y).max())


def test_sparse_input_float32_and_no_intercept():
    X, y = scaled_diabetes()
    dense = LinearSVR(C=0.1, fit_intercept=False, tol=1e-8).fit(X, y)
    sparse = LinearSVR(C=0.1, fit_intercept=False, tol=1e-8).fit(sp.csr_matrix(X), y)
    np.testing.assert_allclose(dense.coef_, sparse.coef_, atol=1e-8)
    assert dense.intercept_[0] == 0.0
    low = LinearSVR(C=0.1, tol=1e-8).fit(X.astype(np.float32), y)
    assert low.predict(X.astype(np.float32)).dtype == np.float64


def test_non_convergence_is_a_status_and_a_warning():
    X, y = scaled_diabetes()
    with pytest.warns(ConvergenceWarning):
        est = LinearSVR(C=10.0, tol=1e-12, max_iter=2).fit(X, y)
    assert est.status_ == "max_iter" and est.n_iter_ == 2 and len(est.history_) == 3
    assert est.history_[-1]["gap"] == est.gap_ > 1e-12


def test_sample_weights_equal_repetition():
    X, y = scaled_diabetes()
    sw = np.where(np.arange(len(y)) % 4 == 0, 3.0, 1.0)
    sw[::7] = 0.0
    rep = np.repeat(np.arange(len(y)), sw.astype(int))
    est = LinearSVR(C=0.1, epsilon=0.3, tol=1e-10, max_iter=50000)
    weighted = est.fit(X, y, sample_weight=sw).coef_.copy()
    repeated = est.fit(X[rep], y[rep]).coef_
    np.testing.assert_allclose(weighted, repeated, atol=1e-7 * np.abs(repeated).max())


def test_callback_stop_and_warm_start():
    X, y = scaled_diabetes()
    est = LinearSVR(C=0.1, tol=1e-12, callback=lambda p: False).fit(X, y)
    assert est.status_ == "stopped" and est.n_iter_ == 1
    est = LinearSVR(C=0.1, tol=1e-8, max_iter=10000, warm_start=True).fit(X, y)
    first = est.n_iter_
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.fit(X, y)
    assert est.n_iter_ < first
