"""Scores of a model on a stored dataset: accuracy and confusion matrix for classifiers (with log
loss and Brier score when the model is calibrated), MSE and R² for regressors."""

from __future__ import annotations

import numpy as np

from app.services.dataset_source import DatasetMismatch, DatasetSource, finite_rows
from app.services.evaluation import classification_report, regression_report
from app.services.prediction import (
    LinearModel,
    decision_function,
    labels_from_decision,
    probabilities_of,
)


def check_labels(model: LinearModel, dataset) -> None:
    """DatasetMismatch unless a ``tables.Dataset``'s labels can score a classifier: the dataset
    must have class labels, one of them at least a class of the model (an unrelated dataset
    would otherwise score an accuracy of 0 without a word). Regressors take any target."""
    if model.is_regressor:
        return
    if dataset.label_kind != "classes":
        raise DatasetMismatch(
            f"dataset {dataset.id!r} has real-valued targets; a classifier is evaluated on a "
            "dataset whose labels are classes"
        )
    labels = [c["label"] for c in dataset.classes or []]
    known = {float(c) for c in model.classes}
    if not any(float(label) in known for label in labels):
        raise DatasetMismatch(
            f"none of dataset {dataset.id!r}'s labels ({_listed(labels)}) is a class of the "
            f"model ({_listed(model.classes)}): it is not a test set of this model"
        )


def _listed(values: list, limit: int = 10) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def evaluate(model: LinearModel, source: DatasetSource) -> dict:
    """Scores of the model on a stored dataset: accuracy and confusion matrix for classifiers
    (with log loss and Brier score when the model is calibrated), MSE and R² for regressors."""
    truth, predicted = [], []
    scores = ProbabilityScores(model) if model.calibration and not model.is_regressor else None
    for start, X, y in source.chunks(model):
        D = finite_rows(decision_function(model, X), start)
        truth.append(y)
        if model.is_regressor:
            predicted.append(D[:, 0])
        else:
            predicted.append(np.asarray(labels_from_decision(model, D), dtype=np.float64))
        if scores is not None:
            scores.add(D, y)
    y_true = np.concatenate(truth) if truth else np.empty(0)
    y_pred = np.concatenate(predicted) if predicted else np.empty(0)
    if model.is_regressor:
        return regression_report(y_true, y_pred)
    report = classification_report(y_true, y_pred, model.classes)
    if scores is not None:
        report.update(scores.report())
    return report


class ProbabilityScores:
    """Log loss and Brier score of a calibrated model's probabilities, summed chunk by chunk
    over the rows whose true label is one of the model's classes (the others have no column)."""

    EPS = 1e-15  # probabilities are clipped here, as scikit-learn's log_loss did

    def __init__(self, model: LinearModel):
        self.model = model
        self.classes = np.asarray(model.classes, dtype=np.float64)
        self.n = 0
        self.log_loss = 0.0
        self.brier = 0.0

    def add(self, D: np.ndarray, y: np.ndarray) -> None:
        P = probabilities_of(self.model, D)
        y = np.asarray(y, dtype=np.float64)
        index = np.searchsorted(self.classes, y).clip(0, len(self.classes) - 1)
        known = self.classes[index] == y
        P, index = P[known], index[known]
        rows = np.arange(len(index))
        self.n += len(index)
        self.log_loss -= float(np.sum(np.log(np.clip(P[rows, index], self.EPS, 1.0))))
        target = np.zeros_like(P)
        target[rows, index] = 1.0
        self.brier += float(np.sum((P - target) ** 2))

    def report(self) -> dict:
        if self.n == 0:
            return {"log_loss": None, "brier_score": None}
        return {"log_loss": self.log_loss / self.n, "brier_score": self.brier / self.n}
