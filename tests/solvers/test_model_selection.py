"""LinearSVCCV / LinearSVRCV against scikit-learn's cross-validation of the same models.

Per (C, fold), the warm-started path's held-out score equals that of `cross_validate` over our
cold `LinearSVC` at that C on the same folds (both at a tight tol, so that they reach the same
optimum), except on held-out rows whose decision is within 1e-8 of a tie; the chosen C is
GridSearchCV's over scikit-learn's own LinearSVC, or scores within 0.2 points of it. Every solve
on the path is certified by its duality gap.
"""

from __future__ import annotations

import threading
import warnings
from functools import cache

import numpy as np
import pytest
from sklearn import svm
from sklearn.datasets import load_svmlight_file
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_validate
from sklearn.utils.estimator_checks import parametrize_with_checks

from solvers import LinearSVC, LinearSVCCV, LinearSVR, LinearSVRCV
from solvers._core.problem import csr_arrays
from solvers.selection.search import (
    NEWTON_AFTER_PASSES,
    PRIMAL_AFTER_PASSES,
    PRIMAL_MAX_STEPS,
    WarmStarts,
    held_out_decisions,
    thread_budget,
)
from tests.conftest import shared_file
from tests.solvers import multiclass_data

TIE = 1e-8


@cache
def _a9a(n=1500):
    X, y = load_svmlight_file(str(shared_file("a9a", "a9a.t")), n_features=123)
    rows = np.random.default_rng(0).permutation(X.shape[0])[:n]
    return X.tocsr()[rows], y[rows]


def _multiclass(name, n):
    X, labels, _, _ = multiclass_data.load(name)
    rows = np.random.default_rng(1).permutation(X.shape[0])[:n]
    return X[rows], labels[rows]


# Inherent, not defects: the folds of repeated rows differ from those of weighted rows; and
# Platt's sigmoid is not centred at a zero decision value (LIBSVM's probabilities share this),
# so the most probable class can differ from the predicted one near the boundary.
EXPECTED_FAILED_CHECKS = {
    "check_sample_weight_equivalence_on_dense_data": "folds of repeated rows differ",
    "check_sample_weight_equivalence_on_sparse_data": "folds of repeated rows differ",
    "check_classifiers_train": "Platt's argmax may differ from predict near the boundary",
}


@parametrize_with_checks(
    [LinearSVCCV(Cs=[0.1, 1.0], cv=2), LinearSVRCV(Cs=[0.1, 1.0], cv=2)],
    expected_failed_checks=lambda e: EXPECTED_FAILED_CHECKS,
)
def test_scikit_learn_conformance(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


def _near_ties(decisions) -> np.ndarray:
    if decisions.ndim == 1:
        return np.abs(decisions) <= TIE
    top = np.sort(decisions, axis=1)
    return top[:, -1] - top[:, -2] <= TIE


CASES = {
    # name: (data, LinearSVC options, grid)
    "a9a-squared_hinge": (_a9a, {"loss": "squared_hinge"}, [0.01, 0.1, 1.0]),
    "a9a-hinge": (_a9a, {"loss": "hinge"}, [0.01, 0.03, 0.1]),
    "dna-ovr": (lambda: _multiclass("dna", 800), {}, [0.01, 0.1, 1.0]),
    "dna-crammer_singer": (lambda: _multiclass("dna", 800), {"multi_class": "crammer_singer"},
                           [0.01, 0.03, 0.1]),
    "vowel-ovr": (lambda: _multiclass("vowel", 528), {}, [0.03, 0.3, 1.0]),
    "vowel-weston_watkins": (lambda: _multiclass("vowel", 528),
                             {"multi_class": "weston_watkins"}, [0.01, 0.03, 0.1]),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_path_scores_equal_cold_cross_validation_on_the_same_folds(name):
    load, options, Cs = CASES[name]
    X, y = load()
    folds = list(StratifiedKFold(4, shuffle=True, random_state=0).split(X, y))
    tight = {"tol": 1e-6, "max_iter": 20_000, **options}
    search = LinearSVCCV(Cs=Cs, cv=folds, n_jobs=2, **tight).fit(X, y)
    table = search.cv_results_
    np.testing.assert_allclose(table["param_C"], Cs)
    for i, C in enumerate(Cs):
        cold = cross_validate(LinearSVC(C=C, **tight), X, y, cv=folds, return_estimator=True)
        for f, (_, test) in enumerate(folds):
            assert table[f"split{f}_status"][i] == "converged"
            assert abs(table[f"split{f}_duality_gap"][i]) < 1e-4  # each solve is certified
            ties = _near_ties(cold["estimator"][f].decision_function(X[test]))
            difference = abs(table[f"split{f}_test_score"][i] - cold["test_score"][f])
            assert difference <= ties.sum() / len(test) + 1e-12, (C, f)
    best = int(np.argmax(table["mean_test_score"]))
    assert search.C_ == Cs[best]
    assert search.best_score_ == table["mean_test_score"][best]
    assert search.status_ == "converged" and abs(search.duality_gap_) < 1e-4


@pytest.mark.parametrize("name", ["a9a-squared_hinge", "dna-ovr", "vowel-ovr"])
def test_chosen_C_matches_grid_search_over_scikit_learn(name):
    load, options, _ = CASES[name]
    X, y = load()
    Cs = [0.001, 0.01, 0.1, 1.0, 10.0]
    folds = list(StratifiedKFold(5, shuffle=True, random_state=3).split(X, y))
    ours = LinearSVCCV(Cs=Cs, cv=folds, tol=1e-5, max_iter=20_000, n_jobs=2, **options).fit(X, y)
    reference = GridSearchCV(svm.LinearSVC(dual=True, tol=1e-5, max_iter=100_000, random_state=0),
                             {"C": Cs}, cv=folds).fit(X, y)  # fmt: skip
    if ours.C_ != reference.best_params_["C"]:
        assert abs(ours.best_score_ - reference.best_score_) <= 0.002
    np.testing.assert_allclose(ours.cv_results_["mean_test_score"],
                               reference.cv_results_["mean_test_score"], atol=0.01)  # fmt: skip


def test_an_int_grid_starts_at_liblinears_start_C_and_stops_when_the_score_falls():
    X, y = _a9a()
    search = LinearSVCCV(Cs=12, cv=3, n_jobs=2).fit(X, y)
    largest = float(X.multiply(X).sum(axis=1).max()) + 1.0  # the bias feature counts
    start = search.Cs_[0]
    assert start <= 1.0 / (2 * len(y) * 2 / 3 * largest) < 2 * start * 1.01
    assert search.Cs_[-1] == pytest.approx(1024.0)
    scores = search.cv_results_["mean_test_score"]
    best = int(np.argmax(scores))
    # it ran until 3 values after the best failed to improve on it, and no further
    assert len(scores) == min(best + 4, len(search.Cs_))
    assert np.all(scores[best + 1 :] <= scores[best])


def test_large_C_goes_on_by_primal_newton_certified_and_scored_like_cold_fits():
    """Where the dual passes slow down, each fold's path goes on by Newton from the previous
    w̃: every such solve is certified by its duality gap, and scores as the cold fit does."""
    X, y = _a9a()
    folds = list(StratifiedKFold(4, shuffle=True, random_state=0).split(X, y))
    Cs = [0.1, 1.0, 10.0, 100.0]
    tight = {"tol": 1e-6, "max_iter": 20_000}
    search = LinearSVCCV(Cs=Cs, cv=folds, n_jobs=2, **tight).fit(X, y)
    table = search.cv_results_
    for f in range(len(folds)):
        assert table[f"split{f}_method"][0] == "dcd"
        assert table[f"split{f}_method"][-1] == "newton"
        for i in range(len(Cs)):
            assert table[f"split{f}_status"][i] == "converged"
            assert 0 <= table[f"split{f}_duality_gap"][i] < 1e-4
    for i, C in enumerate(Cs):
        cold = cross_validate(LinearSVC(C=C, **tight), X, y, cv=folds, return_estimator=True)
        for f, (_, test) in enumerate(folds):
            ties = _near_ties(cold["estimator"][f].decision_function(X[test]))
            difference = abs(table[f"split{f}_test_score"][i] - cold["test_score"][f])
            assert difference <= ties.sum() / len(test) + 1e-12, (C, f)
    assert abs(search.duality_gap_) < 1e-4


@pytest.mark.parametrize("classes", [2, 3])
def test_path_solves_finish_by_liblinears_rule_and_the_refit_by_the_fits(monkeypatch, classes):
    """The path's solves only rank the Cs: a Newton finish there stops at LIBLINEAR's own rule
    (``newton_tol`` = 0.1 · tol); the refit, the model returned, keeps the fit's rule."""
    import solvers.binary as binary
    import solvers.multiclass.ovr as ovr

    X, y = _a9a()
    if classes == 3:
        y = np.where(X[:, 0].toarray().ravel() > 0, 2.0, y)
    asked = []
    for module, name in ((binary, "solve_binary"), (ovr, "solve_ovr")):
        real = getattr(module, name)

        def spy(*args, _real=real, **kwargs):
            asked.append((kwargs.get("rows") is not None, kwargs.get("newton_tol")))
            return _real(*args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    LinearSVCCV(Cs=[0.1, 1.0], cv=3, tol=0.05, n_jobs=1).fit(X, y)
    assert len(asked) == 7
    assert [t for on_path, t in asked if on_path] == [pytest.approx(0.005)] * 6
    assert [t for on_path, t in asked if not on_path] == [None]


def test_a_primal_solve_of_the_path_takes_at_least_one_newton_step():
    """The Newton rule is relative to ‖∇P(0)‖, which grows with C while the gradient at the
    previous C's w̃ does not: at the default tol a larger C's solve would otherwise end where it
    began, and the path would score the previous C's model again under the new C."""
    X, y = _a9a(6000)
    search = LinearSVCCV(Cs=list(np.logspace(-1, 2, 6)), cv=3, n_jobs=2).fit(X, y)
    table = search.cv_results_
    solves = [(table[f"split{f}_{name}"][i] for name in ("method", "n_iter", "status"))
              for f in range(3) for i in range(6)]  # fmt: skip
    newton = [(steps, status) for method, steps, status in solves if method == "newton"]
    assert len(newton) >= 6
    assert all(steps >= 1 and status == "converged" for steps, status in newton)


class _Result:
    def __init__(self, method, n_iter):
        self.method, self.n_iter = method, n_iter
        self.w, self.bias = np.array([1.0, 2.0]), 0.5


def test_warm_start_rule_turns_primal_after_slow_dual_solves_and_back_after_slow_newton():
    starts = WarmStarts(2, primal=True, bias=0.5)
    assert starts.primal_start(0, None) is None
    assert starts.primal_start(0, _Result("dcd", PRIMAL_AFTER_PASSES - 1)) is None
    np.testing.assert_array_equal(starts.primal_start(0, _Result("dcd", PRIMAL_AFTER_PASSES)),
                                  [1.0, 2.0, 1.0])  # fmt: skip
    assert starts.primal_start(1, _Result("newton", 3)) is not None
    starts.record(0, True, _Result("newton", PRIMAL_MAX_STEPS))
    assert starts.primal_start(0, _Result("newton", 3)) is not None
    starts.record(0, True, _Result("newton", PRIMAL_MAX_STEPS + 1))
    assert starts.primal_start(0, _Result("newton", 3)) is None  # for good, on that fold only
    assert starts.primal_start(1, _Result("newton", 3)) is not None
    assert WarmStarts(1, primal=False, bias=0.0).primal_start(0, _Result("newton", 1)) is None
    # a dual start after a Newton finish caps its passes; after a dual solve it does not
    assert starts.newton_after(None) is None
    assert starts.newton_after(_Result("dcd", 500)) is None
    assert starts.newton_after(_Result("newton", 120)) == NEWTON_AFTER_PASSES


def test_held_out_decisions_read_the_rows_in_place_as_scipy_computes_them():
    X, _ = _a9a()
    rows = np.random.default_rng(2).permutation(X.shape[0])[:300]
    coef = np.random.default_rng(3).normal(size=(3, X.shape[1]))
    intercept = np.array([0.5, -1.0, 2.0])
    expected = X[rows] @ coef.T + intercept
    X32 = csr_arrays(X.astype(np.float32))
    np.testing.assert_allclose(held_out_decisions(csr_arrays(X), rows, coef, intercept), expected)
    np.testing.assert_allclose(held_out_decisions(X32, rows, coef, intercept), expected, rtol=1e-6)
    # one-vs-rest's weights: the transpose of a row-major (n_features, k) array, read as such
    by_feature = np.ascontiguousarray(coef.T).T
    np.testing.assert_allclose(held_out_decisions(csr_arrays(X), rows, by_feature, intercept),
                               expected)  # fmt: skip
    one = held_out_decisions(csr_arrays(X), rows, coef[:1], intercept[:1])
    np.testing.assert_allclose(one, expected[:, 0])


def test_folds_run_within_the_thread_budget():
    X, y = _multiclass("dna", 800)
    threads: set[int] = set()
    records = []

    def record(progress):
        if progress.stage == "path":
            threads.add(threading.get_ident())
        records.append(progress)

    LinearSVCCV(Cs=[0.01, 0.1], cv=5, n_jobs=2, callback=record).fit(X, y)
    assert len(threads) == 2  # the 5 folds share the 2 threads (the refit then has them both)
    path = [r for r in records if r.stage == "path"]
    assert {r.fold for r in path} == set(range(5)) and {r.c_index for r in path} == {0, 1}
    assert records[-1].stage == "refit" and records[-1].solves_done == 11
    assert all(r.solves_total == 11 and r.progress.gap is not None for r in records)
    assert {(r.folds_total, r.cs_total) for r in records} == {(5, 2)}  # the path's size
    done = [r.solves_done for r in records]
    assert done == sorted(done)  # read in the order of the calls, though folds run at once
    assert thread_budget(2, 5) == (2, 1) and thread_budget(8, 3) == (3, 2)
    assert thread_budget(1, 5) == (1, 1)


@pytest.mark.parametrize("every", [None, 1])
def test_objectives_mid_solve_as_often_as_the_callback_asks(every):
    """Each costs a pass: a callback without ``objective_every`` gets them every 10 passes, one
    with None only with the last record of a solve, and the search's own hook (no user
    callback) never asks for them."""
    X, y = _a9a()
    records = []

    def record(progress):
        records.append(progress)

    record.objective_every = every
    LinearSVCCV(Cs=[0.1, 1.0], cv=3, callback=record).fit(X, y)
    # a Newton step has them; a solve's end repeats its last pass (the same record)
    passes, seen = [], set()
    for r in records:
        if id(r.progress) not in seen and r.progress.method != "newton":
            passes.append(r)
        seen.add(id(r.progress))
    solves = {(r.stage, r.fold, r.c_index) for r in passes}
    with_objectives = [r for r in passes if r.progress.primal is not None]
    if every is None:
        assert len(with_objectives) <= len(solves) < len(passes)
    else:
        assert len(with_objectives) == len(passes)


def test_a_callback_returning_false_stops_the_search():
    X, y = _a9a()
    calls = []

    def stop(progress):
        calls.append(progress)
        return False

    search = LinearSVCCV(Cs=[0.1, 1.0], cv=3, callback=stop).fit(X, y)
    assert search.search_status_ == "stopped" and search.status_ == "stopped"
    assert len(search.cv_results_["mean_test_score"]) == 0


def test_the_refit_starts_from_the_folds_and_reaches_the_cold_optimum():
    X, y = _multiclass("dna", 800)
    for multi_class in ("ovr", "crammer_singer"):
        search = LinearSVCCV(Cs=[0.05], cv=4, tol=1e-6, max_iter=20_000,
                             multi_class=multi_class).fit(X, y)  # fmt: skip
        cold = LinearSVC(C=0.05, tol=1e-6, max_iter=20_000, multi_class=multi_class).fit(X, y)
        bound = (abs(search.duality_gap_) + abs(cold.duality_gap_)) * max(1.0, cold.objective_)
        assert abs(search.objective_ - cold.objective_) <= bound + 1e-9
        assert search.n_iter_ < cold.n_iter_  # the warm start saves passes


def test_svr_searches_C_and_epsilon_like_cross_validate():
    X, labels, _, _ = multiclass_data.load("vowel")
    y = np.asarray(X @ np.linspace(-1, 1, X.shape[1])).ravel() + 0.1 * labels
    Cs, epsilons = [0.1, 1.0], [0.0, 0.2]
    from sklearn.model_selection import KFold

    folds = list(KFold(4, shuffle=True, random_state=0).split(X))
    tight = {"tol": 1e-5, "max_iter": 20_000}
    search = LinearSVRCV(Cs=Cs, epsilons=epsilons, cv=folds, **tight).fit(X, y)
    table = search.cv_results_
    assert len(table["mean_test_score"]) == 4
    for i in range(4):
        C, eps = table["param_C"][i], table["param_epsilon"][i]
        cold = cross_validate(LinearSVR(C=C, epsilon=eps, **tight), X, y, cv=folds,
                              scoring="neg_mean_squared_error")  # fmt: skip
        np.testing.assert_allclose([table[f"split{f}_test_score"][i] for f in range(4)],
                                   cold["test_score"], rtol=2e-3)  # fmt: skip
        assert all(table[f"split{f}_status"][i] == "converged" for f in range(4))
    reference = GridSearchCV(svm.LinearSVR(dual=True, tol=1e-5, max_iter=100_000, random_state=0),
                             {"C": Cs, "epsilon": epsilons}, cv=folds,
                             scoring="neg_mean_squared_error").fit(X, y)  # fmt: skip
    assert (search.C_, search.epsilon_) == (reference.best_params_["C"],
                                            reference.best_params_["epsilon"])  # fmt: skip


def test_scorers_by_name_and_callable():
    X, y = _a9a()
    folds = list(StratifiedKFold(3, shuffle=True, random_state=0).split(X, y))
    for scoring in ("roc_auc", "f1_macro", "balanced_accuracy", "average_precision"):
        ours = LinearSVCCV(Cs=[0.1], cv=folds, scoring=scoring, tol=1e-6).fit(X, y)
        cold = cross_validate(LinearSVC(C=0.1, tol=1e-6), X, y, cv=folds, scoring=scoring)
        np.testing.assert_allclose(ours.scores_[0], cold["test_score"], atol=1e-3)


@pytest.mark.parametrize(
    ("params", "message"),
    [({"Cs": 0}, "Cs must be"), ({"Cs": [0.1, -1.0]}, "Cs must be"), ({"cv": 1}, "cv must be"),
     ({"calibration": "platt"}, "calibration. parameter of LinearSVCCV must be"),
     ({"scoring": "nope"}, "nope")],
)  # fmt: skip
def test_bad_search_parameters_are_refused(params, message):
    X, y = _a9a()
    with pytest.raises(ValueError, match=message):
        LinearSVCCV(**params).fit(X, y)


def test_fold_class_weights_are_computed_over_the_classes_each_fold_holds():
    from sklearn.utils import compute_class_weight

    from solvers.selection.cv import fold_class_weights

    classes = np.array([1, 2, 3])
    fold = np.array([1, 1, 1, 2])  # class 3 has no row here
    got = fold_class_weights("balanced", classes, fold)
    expected = compute_class_weight("balanced", classes=np.array([1, 2]), y=fold)
    np.testing.assert_array_equal(got, [*expected, 1.0])
    weights = {1: 2.0, 2: 0.5, 3: 4.0}  # a dict weighs the same in every fold
    np.testing.assert_array_equal(fold_class_weights(weights, classes, fold), [2.0, 0.5, 4.0])
    np.testing.assert_array_equal(fold_class_weights(None, classes, fold), [1.0, 1.0, 1.0])


def test_balanced_weights_with_a_class_of_one_row():
    """A class with fewer rows than folds is absent from some training folds: "balanced" is
    then computed per fold over the classes there, as cross_validate's fits of our LinearSVC
    on those rows do (it failed in scikit-learn's compute_class_weight before)."""
    rng = np.random.default_rng(0)
    X = csr_arrays(rng.random((41, 2))).to_scipy()
    y = np.array([1, 2] * 20 + [3])
    folds = list(StratifiedKFold(5, shuffle=True, random_state=0).split(X, y))
    tight = dict(class_weight="balanced", tol=1e-8, max_iter=100_000)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the one-row class: fewer than 5 members
        search = LinearSVCCV(Cs=[0.1, 1.0], cv=folds, calibration="none", **tight).fit(X, y)
        cold = cross_validate(LinearSVC(C=1.0, **tight), X, y, cv=folds)
        calibrated = LinearSVC(probability=True, class_weight="balanced").fit(X, y)
    np.testing.assert_allclose(search.scores_[1], cold["test_score"])
    np.testing.assert_allclose(calibrated.predict_proba(X).sum(axis=1), 1.0)


@pytest.mark.parametrize("multi_class", ["crammer_singer", "weston_watkins"])
def test_a_joint_formulation_with_balanced_weights_refits_from_its_folds(multi_class):
    """"balanced" weighs each fold's classes by the fold's own counts, so a class may weigh
    more in a fold than over all rows; the folds' averaged α, the refit's start, then exceeded
    the refit's bound C·w(y_i) on that class's rows, and the joint formulations' refit raised
    "warm_start is infeasible" (a search or probability=true of classes of 5, 10 and 7 rows
    failed after its path). The refit reaches the cold fit's optimum."""
    rng = np.random.default_rng(1)
    y = np.repeat([0.0, 1.0, 2.0], [5, 10, 7])
    X = csr_arrays(rng.normal(size=(len(y), 3)) + 0.3 * y[:, None]).to_scipy()
    tight = dict(multi_class=multi_class, class_weight="balanced", tol=1e-8, max_iter=100_000)
    search = LinearSVCCV(Cs=[0.1, 1.0, 10.0], cv=3, random_state=0, **tight).fit(X, y)
    cold = LinearSVC(C=search.C_, **tight).fit(X, y)
    np.testing.assert_allclose(search.decision_function(X), cold.decision_function(X), atol=1e-5)
    calibrated = LinearSVC(C=search.C_, probability=True, random_state=0, **tight).fit(X, y)
    np.testing.assert_allclose(calibrated.decision_function(X), cold.decision_function(X),
                               atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("multi_class", ["crammer_singer", "weston_watkins"])
def test_a_joint_formulation_refits_with_a_class_weighed_zero(multi_class):
    """A class weighed 0 (its rows' C is 0, their α 0 in every fold) made the refit's start
    0/0: each of its rows scaled by NaN, and the search or probability=true raised "warm_start
    contains NaN or infinite values" after its whole path (a cold fit takes the weight, as
    scikit-learn's LinearSVC does). The refit reaches the cold fit's optimum."""
    rng = np.random.default_rng(1)
    y = np.repeat([0.0, 1.0, 2.0], [5, 10, 7])
    X = csr_arrays(rng.normal(size=(len(y), 3)) + 0.3 * y[:, None]).to_scipy()
    weights = {0.0: 0.0, 1.0: 1.0, 2.0: 2.0}
    tight = dict(multi_class=multi_class, class_weight=weights, tol=1e-8, max_iter=100_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # 0/0 warned before it raised
        search = LinearSVCCV(Cs=[0.1, 1.0], cv=3, random_state=0, **tight).fit(X, y)
        calibrated = LinearSVC(C=1.0, probability=True, random_state=0, **tight).fit(X, y)
    cold = LinearSVC(C=search.C_, **tight).fit(X, y)
    np.testing.assert_allclose(search.decision_function(X), cold.decision_function(X), atol=1e-5)
    at_one = LinearSVC(C=1.0, **tight).fit(X, y)
    np.testing.assert_allclose(calibrated.decision_function(X), at_one.decision_function(X),
                               atol=1e-5)  # fmt: skip
