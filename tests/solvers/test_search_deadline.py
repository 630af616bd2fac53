"""A search's ``time_limit`` bounds the whole fit (`LinearSVCCV`, `LinearSVRCV`): no solve starts
after the deadline, the grid point it cut short is left out of the table, ``C_`` is the best of
the points every fold finished (as a search of those points alone chooses), and the refit at
``C_`` is bounded too but still returns a model after its first pass.

The deadline is made to fall at a known place, not raced against the load of the machine: the
callback sleeps through the whole budget at the first pass of one solve (one fold thread, so the
solves run in the path's order), and for a few milliseconds at the refit's first pass."""

from __future__ import annotations

import time

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file
from sklearn.exceptions import ConvergenceWarning

from solvers import LinearSVC, LinearSVCCV, LinearSVRCV
from tests.conftest import shared_file

CS = [0.001, 0.01, 0.1, 1.0]
BUDGET_S = 1.0  # far more than the two first Cs of heart_scale take (milliseconds each)


@pytest.fixture(scope="module")
def heart():
    X, y = load_svmlight_file(str(shared_file("heart_scale", "heart_scale")))
    return X.tocsr(), y


class SleepAt:
    """A search callback that records every pass and sleeps ``seconds`` at the first pass of the
    path solve (``c_index``, ``fold``) (None: none), and 5 ms at the refit's first pass."""

    def __init__(self, c_index: int | None, fold: int = 0, seconds: float = BUDGET_S):
        self.at, self.seconds, self.records, self.seen = (c_index, fold), seconds, [], set()

    def __call__(self, record):
        self.records.append(record)
        solve = (record.stage, record.c_index, record.fold)
        if solve in self.seen:
            return
        self.seen.add(solve)
        if solve == ("path", *self.at):
            time.sleep(self.seconds)
        if record.stage == "refit":
            time.sleep(0.005)

    def path_solves(self) -> set[tuple[int, int]]:
        return {(r.c_index, r.fold) for r in self.records if r.stage == "path"}


def test_a_search_out_of_time_keeps_the_finished_Cs_and_refits_at_their_best(heart):
    X, y = heart
    options = {"cv": 3, "tol": 1e-6, "n_jobs": 1}
    finished = LinearSVCCV(Cs=CS[:2], **options).fit(X, y)  # also loads the kernels first
    callback = SleepAt(c_index=2)
    with pytest.warns(ConvergenceWarning, match="time_limit"):  # the refit's, cut short
        search = LinearSVCCV(Cs=CS, time_limit=BUDGET_S, callback=callback, **options).fit(X, y)

    assert search.search_status_ == "time_limit"
    # nothing started after the deadline: the path ends at the solve it cut short
    assert callback.path_solves() == {(i, f) for i in range(2) for f in range(3)} | {(2, 0)}
    table = search.cv_results_
    np.testing.assert_allclose(table["param_C"], CS[:2])  # the cut point is left out
    assert all(set(table[f"split{f}_status"]) == {"converged"} for f in range(3))
    np.testing.assert_allclose(table["mean_test_score"], finished.cv_results_["mean_test_score"])
    assert search.C_ == finished.C_ and search.best_score_ == finished.best_score_

    # the refit: at C_, from the folds' solutions, stopped by the deadline after one pass
    assert {r.C for r in callback.records if r.stage == "refit"} == {search.C_}
    assert search.status_ == "time_limit" and search.n_iter_ == 1
    cold = LinearSVC(C=search.C_, tol=1e-8, max_iter=100_000).fit(X, y)
    scale = max(1.0, cold.objective_)
    assert cold.objective_ <= search.objective_ + 1e-9 * scale  # a primal point's objective
    assert search.objective_ - cold.objective_ <= (search.duality_gap_ + 1e-7) * scale
    assert np.mean(search.predict(X) == y) >= np.mean(cold.predict(X) == y) - 0.05


def test_a_search_that_finished_no_C_still_returns_a_model(heart):
    X, y = heart
    callback = SleepAt(c_index=0, seconds=0.5)
    with pytest.warns(ConvergenceWarning, match="time_limit"):
        search = LinearSVCCV(Cs=CS, cv=3, tol=1e-12, n_jobs=1, time_limit=0.5,
                             callback=callback).fit(X, y)  # fmt: skip
    assert search.search_status_ == "time_limit"
    assert callback.path_solves() == {(0, 0)}
    assert len(search.cv_results_["mean_test_score"]) == 0 and np.isnan(search.best_score_)
    assert search.C_ == CS[0] and search.calibration_ is None
    assert search.status_ == "time_limit" and search.n_iter_ == 1
    assert search.coef_.shape == (1, X.shape[1]) and np.all(np.isfinite(search.coef_))


def test_a_search_within_its_budget_is_the_search_without_one(heart):
    X, y = heart
    free = LinearSVCCV(Cs=CS, cv=3, n_jobs=1).fit(X, y)
    bounded = LinearSVCCV(Cs=CS, cv=3, n_jobs=1, time_limit=600).fit(X, y)
    assert bounded.search_status_ == free.search_status_ == "complete"
    np.testing.assert_allclose(bounded.cv_results_["mean_test_score"],
                               free.cv_results_["mean_test_score"])  # fmt: skip
    assert bounded.C_ == free.C_ and bounded.status_ == free.status_ == "converged"
    np.testing.assert_allclose(bounded.coef_, free.coef_)


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_a_regression_search_out_of_time_keeps_its_finished_points(heart):
    X, labels = heart
    y = np.asarray(X @ np.linspace(-1, 1, X.shape[1])).ravel() + 0.1 * labels
    options = {"Cs": [0.1, 1.0, 10.0], "epsilons": [0.0], "cv": 3, "n_jobs": 1}
    finished = LinearSVRCV(**{**options, "Cs": [0.1]}).fit(X, y)
    callback = SleepAt(c_index=1)
    search = LinearSVRCV(**options, time_limit=BUDGET_S, callback=callback).fit(X, y)
    assert search.search_status_ == "time_limit"
    assert callback.path_solves() == {(0, f) for f in range(3)} | {(1, 0)}
    np.testing.assert_allclose(search.cv_results_["param_C"], [0.1])
    assert search.C_ == 0.1 and search.best_score_ == finished.best_score_
    assert search.status_ in ("time_limit", "converged") and np.all(np.isfinite(search.coef_))
