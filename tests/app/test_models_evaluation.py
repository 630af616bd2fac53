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


def test_probability_scores_match_scikit_learn_chunk_by_chunk():
    from sklearn.metrics import brier_score_loss, log_loss

    from app.services.dataset_scores import ProbabilityScores
    from app.services.prediction import LinearModel
    from solvers.selection import fit_calibration

    rng = np.random.default_rng(2)
    classes = [-1, 2, 5]
    D = rng.normal(size=(300, 3))
    y_index = (D + 0.8 * rng.normal(size=D.shape)).argmax(axis=1)
    calibration = fit_calibration(D, y_index, "sigmoid")
    model = LinearModel("m", "classifier", classes, 3, False, np.eye(3), np.zeros(3),
                        calibration=calibration.to_dict())  # fmt: skip
    y = np.asarray(classes, dtype=float)[y_index]
    y[:7] = 9.0  # a label the model does not know: left out of both scores
    scores = ProbabilityScores(model)
    for start in range(0, 300, 128):
        scores.add(D[start : start + 128], y[start : start + 128])
    report = scores.report()
    P = calibration.probabilities(D)[7:]
    np.testing.assert_allclose(report["log_loss"], log_loss(y[7:], P, labels=classes))
    onehot = np.eye(3)[y_index[7:]]
    np.testing.assert_allclose(report["brier_score"], np.mean(np.sum((P - onehot) ** 2, axis=1)))
    # two classes: the sum over both columns is twice scikit-learn's one-column Brier score
    binary = fit_calibration(D[:, 0], (y_index == 1).astype(int), "sigmoid")
    model2 = LinearModel("b", "classifier", [0, 1], 3, False, np.eye(3)[:1], np.zeros(1),
                         calibration=binary.to_dict())  # fmt: skip
    two = ProbabilityScores(model2)
    two.add(D[:, :1], (y_index == 1).astype(float))
    p1 = binary.probabilities(D[:, 0])[:, 1]
    np.testing.assert_allclose(two.report()["brier_score"],
                               2 * brier_score_loss(y_index == 1, p1))  # fmt: skip
