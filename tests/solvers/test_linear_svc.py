"""solvers.LinearSVC: scikit-learn conformance, fitted attributes, weights, multi-class wiring."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

import solvers
from solvers.binary import solve_binary
from solvers.estimators.linear_svc import LinearSVC
from tests.solvers._binary_helpers import augmented, load, primal, synthetic
from tests.solvers.test_binary_references import liblinear_w_tilde

EXPECTED_FAILED_CHECKS = {
    # as for scikit-learn's own LinearSVC: at the default tol = 0.1 the dual solver stops at a
    # different point when a row is repeated instead of weighted (the optimum is the same)
    "check_sample_weight_equivalence_on_dense_data": "equivalent only at the optimum, not at tol",
    "check_sample_weight_equivalence_on_sparse_data": "equivalent only at the optimum, not at tol",
}


@parametrize_with_checks(
    [LinearSVC(), LinearSVC(multi_class="crammer_singer"), LinearSVC(multi_class="weston_watkins")],
    expected_failed_checks=lambda e: EXPECTED_FAILED_CHECKS,
)
def test_scikit_learn_conformance(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def test_binary_attributes_with_string_labels():
    X, y = load("heart_scale")
    labels = np.where(y > 0, "sick", "healthy")  # classes_ sorted: ["healthy", "sick"]
    clf = LinearSVC(C=0.5, loss="hinge", intercept_scaling=3.0, tol=1e-6, max_iter=100_000)
    clf.fit(X, labels)
    np.testing.assert_array_equal(clf.classes_, ["healthy", "sick"])
    assert clf.coef_.shape == (1, X.shape[1]) and clf.intercept_.shape == (1,)
    assert clf.dual_coef_.shape == (X.shape[0],) and clf.dual_coef_.min() >= 0
    assert clf.status_ == "converged" and clf.n_iter_ == len(clf.history_)
    assert clf.history_[-1]["gap"] == pytest.approx(clf.gap_) and clf.gap_ <= 1e-6
    # w̃ = Σ α_i y_i x̃_i with y_i = +1 for classes_[1]; intercept_ = intercept_scaling · w_bias
    y_pm = np.where(labels == "sick", 1.0, -1.0)
    w_tilde = augmented(X, 3.0).T @ (clf.dual_coef_ * y_pm)
    np.testing.assert_allclose(clf.coef_[0], w_tilde[:-1], atol=1e-10)
    assert clf.intercept_[0] == pytest.approx(3.0 * w_tilde[-1])
    assert clf.objective_ == pytest.approx(primal(X, y_pm, w_tilde, 0.5, "hinge", 3.0))
    scores = clf.decision_function(X)
    np.testing.assert_array_equal(clf.predict(X), np.where(scores > 0, "sick", "healthy"))
    assert clf.score(X, labels) > 0.8


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_matches_scikit_learn_linear_svc(loss):
    from sklearn.svm import LinearSVC as SkLinearSVC

    X, y = load("breast-cancer")
    labels = np.where(y > 0, 4, 2)
    ours = LinearSVC(loss=loss, C=0.3, tol=1e-7, max_iter=100_000).fit(X, labels)
    # seeded: unseeded, its pass order comes from numpy's global RNG, which earlier tests move
    ref = SkLinearSVC(
        loss=loss, C=0.3, dual=True, tol=1e-7, max_iter=1_000_000, random_state=0
    ).fit(X, labels)
    y_pm = np.where(labels == 4, 1.0, -1.0)

    def objective(clf):
        return primal(X, y_pm, np.append(clf.coef_[0], clf.intercept_[0]), 0.3, loss, 1.0)

    assert ours.objective_ <= objective(ref) * (1 + 1e-9)
    assert ours.objective_ == pytest.approx(objective(ref), rel=1e-5)
    assert (ours.predict(X) == ref.predict(X)).mean() > 0.99


@pytest.mark.parametrize("class_weight", [{1: 3.0, -1: 0.5}, "balanced"])
def test_binary_class_weight_matches_liblinear_wi(class_weight):
    X, y = load("breast-cancer")
    clf = LinearSVC(C=0.7, class_weight=class_weight, tol=1e-6, max_iter=100_000).fit(X, y)
    if class_weight == "balanced":
        counts = {c: np.sum(y == c) for c in (-1.0, 1.0)}
        class_weight = {c: float(len(y) / (2 * counts[c])) for c in counts}
    C = 0.7 * np.where(y > 0, class_weight[1], class_weight[-1])
    ref = liblinear_w_tilde(
        X, y, f"-s 2 -c 0.7 -w1 {class_weight[1]!r} -w-1 {class_weight[-1]!r} -e 1e-8", 1.0
    )
    assert clf.objective_ == pytest.approx(primal(X, y, ref, C, "squared_hinge", 1.0), rel=1e-6)


def test_ovr_class_weights_follow_liblinear():
    # LIBLINEAR's -wi in one-vs-rest: class j's problem weighs its positives by w_j, rest by 1
    X, y = load("heart_scale")
    rng = np.random.default_rng(0)
    labels = np.where(y > 0, 1, rng.choice([2, 3], size=y.shape))
    weights = {1: 2.0, 2: 0.5, 3: 1.5}
    clf = LinearSVC(loss="hinge", C=0.4, class_weight=weights, tol=1e-7, max_iter=100_000)
    clf.fit(X, labels)
    assert clf.coef_.shape == (3, X.shape[1]) and clf.dual_coef_.shape == (3, X.shape[0])
    # scikit-learn's copy of LIBLINEAR, seeded and run to convergence: its one-vs-rest class
    # weights are LIBLINEAR's -wi
    from sklearn.svm import LinearSVC as SkLinearSVC

    converged = SkLinearSVC(loss="hinge", C=0.4, class_weight=weights, tol=1e-10,
                            max_iter=1_000_000, random_state=0).fit(X, labels)  # fmt: skip
    for j, label in enumerate(clf.classes_):
        y_j = np.where(labels == label, 1.0, -1.0)
        C_j = 0.4 * np.where(labels == label, weights[label], 1.0)
        ref = liblinear_w_tilde(X, y_j, f"-s 3 -c 0.4 -w1 {weights[label]} -e 1e-7", 1.0)
        p_ref = primal(X, y_j, ref, C_j, "hinge", 1.0)
        p_ours = primal(X, y_j, np.append(clf.coef_[j], clf.intercept_[j]), C_j, "hinge", 1.0)
        # LIBLINEAR -s 3 stops at its pass cap, where depends on its process-wide RNG state
        # (class 1: 0.0004% to 0.46% above ours over 1,000 orders, against the 0.5% that was
        # asked): never worse than it, and at the converged weighted optimum
        assert p_ours <= p_ref * (1 + 1e-6)
        w_converged = np.append(converged.coef_[j], converged.intercept_[j])
        assert p_ours == pytest.approx(primal(X, y_j, w_converged, C_j, "hinge", 1.0), rel=1e-6)
        exact = solve_binary(X, y_j, loss="hinge", C=C_j, bias=1.0, tol=1e-7, max_iter=100_000)
        assert p_ours == pytest.approx(exact.primal, rel=1e-6)


def test_sample_weight_zero_ignores_rows():
    X, y = synthetic(n=200, seed=9)
    sw = np.ones(200)
    sw[:50] = 0.0
    a = LinearSVC(tol=1e-8, max_iter=100_000).fit(X, y, sample_weight=sw)
    b = LinearSVC(tol=1e-8, max_iter=100_000).fit(X[50:], y[50:])
    np.testing.assert_allclose(a.coef_, b.coef_, rtol=1e-6, atol=1e-9)
    np.testing.assert_array_equal(a.dual_coef_[:50], 0.0)


@pytest.mark.parametrize("multi_class", ["crammer_singer", "weston_watkins"])
def test_joint_formulations_with_two_classes_equal_binary_hinge_at_2C(multi_class):
    X, y = load("heart_scale")
    joint = LinearSVC(multi_class=multi_class, C=0.5, tol=1e-6, max_iter=100_000).fit(X, y)
    binary = LinearSVC(loss="hinge", C=1.0, tol=1e-7, max_iter=100_000).fit(X, y)
    assert joint.coef_.shape == (1, X.shape[1]) and joint.intercept_.shape == (1,)
    assert joint.dual_coef_.shape == (X.shape[0], 2)
    y_pm = np.where(y > 0, 1.0, -1.0)
    p_joint = primal(X, y_pm, np.append(joint.coef_[0], joint.intercept_[0]), 1.0, "hinge", 1.0)
    assert p_joint == pytest.approx(binary.objective_, rel=1e-4)
    np.testing.assert_array_equal(joint.predict(X), binary.predict(X))


def test_convergence_warning_and_status():
    X, y = load("heart_scale")
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        clf = LinearSVC(tol=1e-12, max_iter=2).fit(X, y)
    assert clf.status_ == "max_iter" and clf.n_iter_ == 2 and clf.gap_ > 1e-12


def test_callback_stops_without_warning():
    X, y = load("heart_scale")
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        clf = LinearSVC(tol=1e-12, callback=lambda p: p.iteration < 2).fit(X, y)
    assert clf.status_ == "stopped" and clf.n_iter_ == 2
    names = {"iteration", "elapsed_s", "gap", "pg_max", "pg_min", "pg_range", "active"}
    assert set(clf.history_[0]) >= names | {"duality_gap"}


def test_warm_start_reuses_dual_coef():
    X, y = load("mushrooms")
    cold = LinearSVC(C=1.0, tol=1e-3, max_iter=10_000).fit(X, y)
    clf = LinearSVC(C=0.5, tol=1e-3, max_iter=10_000, warm_start=True).fit(X, y)
    clf.set_params(C=1.0).fit(X, y)
    assert clf.n_iter_ < cold.n_iter_
    assert clf.objective_ == pytest.approx(cold.objective_, rel=1e-3)


def test_float32_and_sparse_formats():
    X, y = load("breast-cancer")
    ref = LinearSVC(tol=1e-6, max_iter=100_000).fit(X, y)
    for variant in (X.astype(np.float32), X.tocsc(), X.toarray(), sp.coo_matrix(X)):
        clf = LinearSVC(tol=1e-6, max_iter=100_000).fit(variant, y)
        np.testing.assert_allclose(clf.coef_, ref.coef_, rtol=1e-4, atol=1e-5)


def test_invalid_combinations():
    X, y = synthetic(n=30, seed=1)
    with pytest.raises(ValueError, match="squared_error"):
        LinearSVC(loss="squared_error", multi_class="crammer_singer").fit(X, y)
    with pytest.raises(ValueError, match="one class"):
        LinearSVC().fit(X, np.ones(30))
    with pytest.raises(ValueError, match="order"):
        LinearSVC(order="sorted").fit(X, y)


def test_squared_error_binary():
    X, y = load("heart_scale")
    clf = LinearSVC(loss="squared_error", C=0.2, tol=1e-8, max_iter=100_000).fit(X, y)
    Xt = augmented(X, 1.0).toarray()
    w_ref = np.linalg.solve(Xt.T @ Xt + np.eye(Xt.shape[1]) / 0.4, Xt.T @ y)
    np.testing.assert_allclose(clf.coef_[0], w_ref[:-1], rtol=1e-6, atol=1e-8)


def test_import_solvers_stays_light():
    code = (
        "import sys, numpy as np, scipy.sparse as sp, solvers\n"
        "X = sp.csr_matrix(np.eye(4)); y = np.array([1., -1., 1., -1.])\n"
        "r = solvers.solve_binary(X, y)\n"
        "assert r.status == 'converged'\n"
        "assert 'sklearn' not in sys.modules, 'scikit-learn imported'\n"
        "assert 'solvers.estimators.linear_svc' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert solvers.LinearSVC is LinearSVC
