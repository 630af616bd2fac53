"""The trainer behind search jobs and probability=true: what the worker stores (the CV table,
the chosen C, the calibration) equals the library's own fit, and its progress records say where
on the path the search is."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from app.schemas.params import LinearSVCParams
from app.services.trainers import train_linear_svc
from solvers import LinearSVC, LinearSVCCV
from solvers.selection import Calibration
from tests.conftest import shared_file


@pytest.fixture(scope="module")
def heart():
    X, y = load_svmlight_file(str(shared_file("heart_scale", "heart_scale")))
    return X.tocsr(), y


def _params(**given):
    return LinearSVCParams.model_validate(given).model_dump()


def test_a_search_stores_the_table_the_chosen_C_and_the_calibration(heart):
    X, y = heart
    records = []
    params = _params(tol=1e-3, search={"Cs": {"num": 4, "min": 0.001, "max": 1.0}, "cv": 3})
    trained = train_linear_svc(params, X, y, None, records.append, 2)
    direct = LinearSVCCV(Cs=list(np.geomspace(0.001, 1.0, 4)), cv=3, tol=1e-3).fit(X, y)
    assert trained.selection["C"] == direct.C_
    table = trained.selection["table"]
    np.testing.assert_allclose([row["C"] for row in table], direct.Cs_)
    np.testing.assert_allclose([row["mean_score"] for row in table],
                               direct.cv_results_["mean_test_score"])  # fmt: skip
    assert all(len(row["fold_scores"]) == 3 and set(row["status"]) == {"converged"}
               for row in table)  # fmt: skip
    np.testing.assert_allclose(trained.coef, direct.coef_)
    calibration = Calibration.from_dict(trained.calibration)
    np.testing.assert_allclose(calibration.probabilities(direct.decision_function(X)),
                               direct.predict_proba(X))  # fmt: skip
    stages = {r.stage for r in records}
    assert stages == {"path", "refit"} and all(r.solves_total == 13 for r in records)
    assert {(r.fold, r.c_index) for r in records if r.stage == "path"} == {
        (f, i) for f in range(3) for i in range(4)
    }


def test_probability_true_calibrates_at_the_jobs_own_C(heart):
    X, y = heart
    trained = train_linear_svc(_params(C=0.1, probability=True), X, y, None, lambda p: None, 1)
    direct = LinearSVC(C=0.1, probability=True).fit(X, y)
    assert trained.calibration == direct.calibration_.to_dict() and trained.selection is None
    none = train_linear_svc(_params(C=0.1, probability=True, calibration="none"), X, y, None,
                            lambda p: None, 1)  # fmt: skip
    assert none.calibration is None


@pytest.mark.parametrize("method", ["isotonic", "softmax"])
def test_probability_true_uses_the_calibration_asked_for(heart, method):
    X, y = heart
    params = _params(C=0.1, probability=True, calibration=method)
    trained = train_linear_svc(params, X, y, None, lambda p: None, 1)
    direct = LinearSVC(C=0.1, probability=True, calibration=method).fit(X, y)
    # before: the job's calibration was dropped and every such model was Platt-calibrated
    assert trained.calibration["method"] == method
    assert trained.calibration == direct.calibration_.to_dict()


@pytest.mark.parametrize(
    "search",
    [{"Cs": []}, {"Cs": [0.1, -1]}, {"cv": 1}, {"cv": 21}, {"scoring": "r2"},
     {"Cs": {"num": 0}}, {"Cs": {"num": 51}}, {"Cs": [0.1] * 51}, {"folds": 3}],
)  # fmt: skip
def test_bad_search_specs_are_refused_by_name(search):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="search"):
        LinearSVCParams.model_validate({"search": search})
