"""The multi-class formulations through solvers.LinearSVC: labels, shapes, objectives."""

import numpy as np
import pytest

from tests.solvers.multiclass_data import blobs, cs_primal, load, ww_primal


def _string_labels(y):
    names = np.array(["zeta", "alpha", "mu", "beta", "omega", "kappa"])
    return names[y]


@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer", "weston_watkins"])
def test_string_labels_and_shapes(multi_class):
    from solvers import LinearSVC

    X, y = blobs(120, 7, 4, seed=9)
    labels = _string_labels(y)
    est = LinearSVC(multi_class=multi_class, C=0.5, tol=1e-4, max_iter=10_000).fit(X, labels)
    np.testing.assert_array_equal(est.classes_, np.sort(np.unique(labels)))
    assert est.coef_.shape == (4, 7) and est.intercept_.shape == (4,)
    expected_dual = (4, 120) if multi_class == "ovr" else (120, 4)
    assert est.dual_coef_.shape == expected_dual
    assert est.status_ == "converged"
    assert set(est.predict(X)) <= set(labels)
    assert est.score(X, labels) > 0.8
    scores = est.decision_function(X)
    np.testing.assert_array_equal(est.predict(X), est.classes_[scores.argmax(axis=1)])


def test_objectives_are_the_formulations_primal():
    from solvers import LinearSVC

    X, _, y, classes = load("wine")
    labels = classes[y]
    cs = LinearSVC(multi_class="crammer_singer", C=0.8, tol=1e-4, max_iter=10_000).fit(X, labels)
    assert cs.objective_ == pytest.approx(cs_primal(X, y, cs.coef_, cs.intercept_, 0.8, 1.0))
    ww = LinearSVC(multi_class="weston_watkins", C=0.8, tol=1e-4, max_iter=10_000).fit(X, labels)
    assert ww.objective_ == pytest.approx(ww_primal(X, y, ww.coef_, ww.intercept_, 0.8, 1.0))
    # dual_coef_ conventions: CS α_i^m ≤ C at y_i and ≤ 0 elsewhere; WW α_i^m ≥ 0 off y_i
    idx = np.arange(len(y))
    assert np.all(np.delete(cs.dual_coef_.ravel(), idx * 3 + y) <= 1e-12)
    assert np.all(np.delete(ww.dual_coef_.ravel(), idx * 3 + y) >= 0)
    np.testing.assert_allclose(ww.dual_coef_.sum(axis=1), 0.0, atol=1e-9)


@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer", "weston_watkins"])
def test_two_classes_have_binary_shapes(multi_class):
    from solvers import LinearSVC

    X, y = blobs(100, 5, 2, seed=4, spread=0.8)
    labels = np.where(y == 1, "yes", "no")
    est = LinearSVC(multi_class=multi_class, loss="hinge", C=0.5, tol=1e-6, max_iter=100_000)
    est.fit(X, labels)
    assert est.coef_.shape == (1, 5) and est.intercept_.shape == (1,)
    assert list(est.classes_) == ["no", "yes"]
    ref = LinearSVC(multi_class="ovr", loss="hinge", C=1.0, tol=1e-6, max_iter=100_000)
    if multi_class != "ovr":
        # both joint formulations equal the binary hinge solution at 2C for w = w_1 − w_0
        ref.fit(X, labels)
        np.testing.assert_allclose(est.coef_, ref.coef_, atol=1e-4)
        np.testing.assert_allclose(est.intercept_, ref.intercept_, atol=1e-4)
