"""Calibrated probabilities: Platt's (A, B) against a transcription of Lin, Lin and Weng's
pseudo-code (with LIBSVM's stopping rule), and log loss / Brier score on a9a.t and dna.t against
scikit-learn's `CalibratedClassifierCV(LinearSVC, method="sigmoid")`."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn import svm
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_svmlight_file
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import log_loss

from solvers import LinearSVC, LinearSVCCV
from solvers.selection import Calibration, fit_calibration, platt
from tests.conftest import shared_file
from tests.solvers import multiclass_data


def reference_platt(deci, label):
    """Lin, Lin and Weng (2007), Appendix pseudo-code, one scalar at a time (labels ±1)."""
    prior1 = sum(1 for v in label if v > 0)
    prior0 = len(label) - prior1
    max_iter, min_step, sigma, eps = 100, 1e-10, 1e-12, 1e-5
    hi, lo = (prior1 + 1.0) / (prior1 + 2.0), 1 / (prior0 + 2.0)
    t = [hi if v > 0 else lo for v in label]
    A, B = 0.0, math.log((prior0 + 1.0) / (prior1 + 1.0))

    def objective(A, B):
        total = 0.0
        for d, ti in zip(deci, t, strict=True):
            z = d * A + B
            if z >= 0:
                total += ti * z + math.log(1 + math.exp(-z))
            else:
                total += (ti - 1) * z + math.log(1 + math.exp(z))
        return total

    fval = objective(A, B)
    for _ in range(max_iter):
        h11 = h22 = sigma
        h21 = g1 = g2 = 0.0
        for d, ti in zip(deci, t, strict=True):
            z = d * A + B
            if z >= 0:
                p, q = math.exp(-z) / (1 + math.exp(-z)), 1 / (1 + math.exp(-z))
            else:
                p, q = 1 / (1 + math.exp(z)), math.exp(z) / (1 + math.exp(z))
            d2 = p * q
            h11 += d * d * d2
            h22 += d2
            h21 += d * d2
            d1 = ti - p
            g1 += d * d1
            g2 += d1
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        gd = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            newA, newB = A + step * dA, B + step * dB
            newf = objective(newA, newB)
            if newf < fval + 0.0001 * step * gd:
                A, B, fval = newA, newB, newf
                break
            step /= 2.0
        if step < min_step:
            break
    return A, B


@pytest.mark.parametrize(("seed", "scale", "shift"), [(0, 1.0, 0.0), (1, 5.0, -1.0),
                                                     (2, 0.2, 0.5), (3, 40.0, 3.0)])  # fmt: skip
def test_platt_matches_the_papers_algorithm(seed, scale, shift):
    rng = np.random.default_rng(seed)
    n = 400
    positive = rng.random(n) < 0.3
    decisions = scale * (rng.normal(size=n) + np.where(positive, 1.0, -1.0)) + shift
    A, B = platt(decisions, positive)
    ref_A, ref_B = reference_platt(decisions.tolist(), np.where(positive, 1, -1).tolist())
    assert A == pytest.approx(ref_A, abs=1e-6) and B == pytest.approx(ref_B, abs=1e-6)


def test_separable_values_do_not_overflow():
    decisions = np.concatenate([np.linspace(-50, -5, 50), np.linspace(5, 50, 50)])
    positive = decisions > 0
    A, B = platt(decisions, positive)
    assert np.isfinite([A, B]).all() and A < 0
    ref_A, ref_B = reference_platt(decisions.tolist(), np.where(positive, 1, -1).tolist())
    assert A == pytest.approx(ref_A, abs=1e-6) and B == pytest.approx(ref_B, abs=1e-6)


def test_isotonic_is_scikit_learns_per_class_map_normalized():
    rng = np.random.default_rng(4)
    f = rng.normal(size=(300, 3))
    y = f.argmax(axis=1)
    y[:30] = rng.integers(0, 3, 30)
    cal = fit_calibration(f, y, "isotonic")
    fitted = [IsotonicRegression(out_of_bounds="clip", y_min=0, y_max=1).fit(f[:, j], y == j)
              for j in range(3)]  # fmt: skip
    raw = np.column_stack([iso.predict(f[:, j]) for j, iso in enumerate(fitted)])
    expected = raw / raw.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(cal.probabilities(f), expected, atol=1e-12)


def test_a_calibration_round_trips_through_json_and_rows_sum_to_one():
    import json

    rng = np.random.default_rng(5)
    f = rng.normal(size=(200, 4))
    y = f.argmax(axis=1)
    for method in ("sigmoid", "softmax", "isotonic"):
        cal = fit_calibration(f, y, method)
        again = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())))
        p = again.probabilities(f)
        np.testing.assert_array_equal(p, cal.probabilities(f))
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        assert (p >= 0).all()
    binary = fit_calibration(f[:, 0], (y == 0).astype(int), "sigmoid").probabilities(f[:, 0])
    assert binary.shape == (200, 2)
    with pytest.raises(ValueError, match="calibration method"):
        Calibration.from_dict({"method": "magic"})


def _brier(p, y_index):
    return float(np.mean(np.sum((p - np.eye(p.shape[1])[y_index]) ** 2, axis=1)))


def _sets():
    X, y = load_svmlight_file(str(shared_file("a9a", "a9a.bz2")), n_features=123)
    rows = np.random.default_rng(0).permutation(X.shape[0])[:8000]
    Xt, yt = load_svmlight_file(str(shared_file("a9a", "a9a.t")), n_features=123)
    yield "a9a", X.tocsr()[rows], y[rows], Xt, yt
    X, y, _, _ = multiclass_data.load("dna")
    Xt, yt, _, _ = multiclass_data.load("dna", "test")
    yield "dna", X, y, Xt, yt


def test_log_loss_and_brier_match_calibrated_classifier_cv():
    for name, X, y, Xt, yt in _sets():
        ours = LinearSVC(C=0.1, probability=True, tol=1e-3).fit(X, y)
        # a fixed seed: unseeded, scikit-learn draws its liblinear seed from numpy's global
        # RNG, whose state depends on the tests run before
        plain = svm.LinearSVC(C=0.1, dual=True, tol=1e-3, random_state=0)
        reference = CalibratedClassifierCV(plain, method="sigmoid", cv=5).fit(X, y)
        p, q = ours.predict_proba(Xt), reference.predict_proba(Xt)
        np.testing.assert_array_equal(ours.classes_, reference.classes_)
        yi = np.searchsorted(ours.classes_, yt)
        labels = ours.classes_
        assert log_loss(yt, p, labels=labels) <= 1.05 * log_loss(yt, q, labels=labels), name
        assert _brier(p, yi) <= 1.05 * _brier(q, yi), name
        np.testing.assert_allclose(p.sum(axis=1), 1.0)
        # the classifier itself is the plain fit at that C
        plain = LinearSVC(C=0.1, tol=1e-3).fit(X, y)
        assert np.mean(ours.predict(Xt) == plain.predict(Xt)) > 0.995


def test_cv_estimators_calibrate_every_formulation():
    X, y, _, _ = multiclass_data.load("dna")
    Xt, yt, _, _ = multiclass_data.load("dna", "test")
    for multi_class, method in (("ovr", "sigmoid"), ("crammer_singer", "softmax"),
                                ("weston_watkins", "softmax")):  # fmt: skip
        search = LinearSVCCV(Cs=[0.03, 0.3], cv=3, multi_class=multi_class).fit(X, y)
        assert search.calibration_.method == method
        p = search.predict_proba(Xt)
        assert log_loss(yt, p, labels=search.classes_) < 0.3
    unc = LinearSVC().fit(X, y)
    assert not hasattr(unc, "predict_proba")
