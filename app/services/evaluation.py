"""Scores of a model's predictions against true targets: accuracy and a confusion matrix for
classifiers, mean squared error and R² for regressors.

Each is summed a chunk of rows at a time (`ConfusionCounts`, `RegressionSums`), so that scoring a
stored dataset holds one chunk of its rows, not a label and a prediction for every row; over one
chunk the scores are those computed on all rows at once."""

from __future__ import annotations

import numpy as np


def classification_report(y_true: np.ndarray, y_pred: np.ndarray, classes: list) -> dict:
    """Accuracy and confusion matrix.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n,)
        True and predicted labels (numbers); the predictions are the model's classes.
    classes : list
        The model's classes; labels found only in ``y_true`` are appended (sorted), so that
        every true label has a row.

    Returns
    -------
    dict
        ``n``, ``accuracy``, ``labels`` (row and column order) and ``confusion_matrix``
        (``[i][j]`` counts instances of true label ``labels[i]`` predicted as ``labels[j]``).
    """
    counts = ConfusionCounts(classes)
    counts.add(y_true, y_pred)
    return counts.report()


def regression_report(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Mean squared error and R² (null when the targets are constant, where R² is undefined)."""
    sums = RegressionSums()
    sums.add(y_true, y_pred)
    return sums.report()


class ConfusionCounts:
    """`classification_report` added a chunk of rows at a time: for each distinct true label,
    the counts of its rows' predictions over the model's classes. It holds the distinct labels
    times the classes, however many rows were added."""

    def __init__(self, classes: list):
        self.classes = list(classes)
        self._known = np.asarray(classes, dtype=np.float64)
        self._sorter = np.argsort(self._known, kind="stable")
        self.by_label: dict[float, np.ndarray] = {}
        self.n = 0

    def add(self, y_true: np.ndarray, y_pred: np.ndarray) -> None:
        """Count a chunk's rows: true labels, and predictions among the model's classes."""
        y_true = np.asarray(y_true, dtype=np.float64)
        y_pred = np.asarray(y_pred, dtype=np.float64)
        k = len(self.classes)
        predicted = self._sorter[np.searchsorted(self._known, y_pred, sorter=self._sorter)]
        values, truth = np.unique(y_true, return_inverse=True)
        counts = np.bincount(truth * k + predicted, minlength=len(values) * k)
        for value, row in zip(values.tolist(), counts.reshape(len(values), k), strict=True):
            held = self.by_label.get(value)
            self.by_label[value] = row if held is None else held + row
        self.n += int(y_true.size)

    def relabelled(self, label_of) -> ConfusionCounts:
        """The counts with each true label ``v`` replaced by ``label_of(v)`` (labels that map
        to one are summed), over the same classes."""
        counts = ConfusionCounts(self.classes)
        for value, row in self.by_label.items():
            label = float(label_of(value))
            held = counts.by_label.get(label)
            counts.by_label[label] = row if held is None else held + row
        counts.n = self.n
        return counts

    def report(self) -> dict:
        k = len(self.classes)
        seen = np.fromiter(self.by_label, dtype=np.float64, count=len(self.by_label))
        unseen = np.setdiff1d(seen, self._known)
        labels = self.classes + [_number(v) for v in unseen.tolist()]
        order = np.concatenate([self._known, unseen])
        sorter = np.argsort(order, kind="stable")
        matrix = np.zeros((len(labels), len(labels)), dtype=np.int64)
        rows = sorter[np.searchsorted(order, seen, sorter=sorter)]
        for row, value in zip(rows.tolist(), self.by_label, strict=True):
            matrix[row, :k] += self.by_label[value]
        n = self.n
        return {
            "n": n,
            "accuracy": float(np.trace(matrix) / n) if n else None,
            "labels": labels,
            "confusion_matrix": matrix.tolist(),
        }


class RegressionSums:
    """`regression_report` added a chunk of rows at a time: the rows, their summed squared
    residuals, and the targets' mean and summed squared deviations from it, merged chunk by
    chunk by the pairwise update of Chan, Golub and LeVeque (no cancellation of Σy² − nȳ²)."""

    def __init__(self):
        self.n = 0
        self.residual = 0.0
        self.mean = 0.0
        self.deviation = 0.0  # Σ (y - mean)²

    def add(self, y_true: np.ndarray, y_pred: np.ndarray) -> None:
        y_true = np.asarray(y_true, dtype=np.float64)
        y_pred = np.asarray(y_pred, dtype=np.float64)
        added = int(y_true.size)
        if not added:
            return
        self.residual += float(np.sum((y_true - y_pred) ** 2))
        mean = y_true.mean()
        deviation = float(np.sum((y_true - mean) ** 2))
        if not self.n:
            self.n, self.mean, self.deviation = added, float(mean), deviation
            return
        total = self.n + added
        delta = float(mean) - self.mean
        self.mean += delta * added / total
        self.deviation += deviation + delta * delta * self.n * added / total
        self.n = total

    def report(self) -> dict:
        n = self.n
        if n == 0:
            return {"n": 0, "mse": None, "r2": None}
        return {
            "n": n,
            "mse": self.residual / n,
            "r2": 1.0 - self.residual / self.deviation if self.deviation > 0 else None,
        }


def _number(v: float):
    return int(v) if float(v).is_integer() else v
