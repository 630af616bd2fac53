"""Evaluation scores against scikit-learn's metrics."""

import numpy as np
from sklearn.metrics import accuracy_score, confusion_matrix, mean_squared_error, r2_score

from app.services.evaluation import classification_report, regression_report


def test_classification_report_matches_scikit_learn():
    rng = np.random.default_rng(0)
    classes = [3, -1, 7]
    y_true = rng.choice([3, -1, 7, 11], size=200)
    y_pred = rng.choice(classes, size=200)
    report = classification_report(y_true, y_pred, classes)
    assert report["labels"] == [3, -1, 7, 11]
    assert report["n"] == 200
    assert report["accuracy"] == accuracy_score(y_true, y_pred)
    expected = confusion_matrix(y_true, y_pred, labels=[3, -1, 7, 11])
    assert report["confusion_matrix"] == expected.tolist()


def test_classification_report_with_float_labels():
    report = classification_report(np.array([1.0, -1.0, -1.0]), np.array([1.0, 1.0, -1.0]), [-1, 1])
    assert report["confusion_matrix"] == [[1, 1], [0, 1]]
    assert report["accuracy"] == 2 / 3


def test_regression_report_matches_scikit_learn():
    rng = np.random.default_rng(1)
    y = rng.standard_normal(50)
    p = y + 0.3 * rng.standard_normal(50)
    report = regression_report(y, p)
    assert report["n"] == 50
    np.testing.assert_allclose(report["mse"], mean_squared_error(y, p), rtol=1e-12)
    np.testing.assert_allclose(report["r2"], r2_score(y, p), rtol=1e-12)


def test_r2_is_null_for_constant_targets():
    report = regression_report(np.ones(4), np.array([1.0, 2.0, 1.0, 1.0]))
    assert report["r2"] is None and report["mse"] == 0.25
