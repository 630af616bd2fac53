"""Scores of a model's predictions against true targets: accuracy and a confusion matrix for
classifiers, mean squared error and R² for regressors."""

from __future__ import annotations

import numpy as np


def classification_report(y_true: np.ndarray, y_pred: np.ndarray, classes: list) -> dict:
    """Accuracy and confusion matrix.

    Parameters
    ----------
    y_true, y_pred : ndarray of shape (n,)
        True and predicted labels (numbers).
    classes : list
        The model's classes; labels found only in ``y_true`` are appended (sorted), so that
        every true label has a row.

    Returns
    -------
    dict
        ``n``, ``accuracy``, ``labels`` (row and column order) and ``confusion_matrix``
        (``[i][j]`` counts instances of true label ``labels[i]`` predicted as ``labels[j]``).
    """
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    known = np.asarray(classes, dtype=np.float64)
    unseen = np.setdiff1d(np.unique(y_true), known)
    labels = list(classes) + [_number(v) for v in unseen.tolist()]
    order = np.concatenate([known, unseen])
    sorter = np.argsort(order, kind="stable")
    t = sorter[np.searchsorted(order, y_true, sorter=sorter)]
    p = sorter[np.searchsorted(order, y_pred, sorter=sorter)]
    k = len(labels)
    matrix = np.bincount(t * k + p, minlength=k * k).reshape(k, k)
    n = int(y_true.size)
    return {
        "n": n,
        "accuracy": float(np.trace(matrix) / n) if n else None,
        "labels": labels,
        "confusion_matrix": matrix.tolist(),
    }


def regression_report(y_true: np.ndarray, y_pred: np.ndarray) -> dict:
    """Mean squared error and R² (null when the targets are constant, where R² is undefined)."""
    y_true = np.asarray(y_true, dtype=np.float64)
    y_pred = np.asarray(y_pred, dtype=np.float64)
    n = int(y_true.size)
    if n == 0:
        return {"n": 0, "mse": None, "r2": None}
    residual = float(np.sum((y_true - y_pred) ** 2))
    total = float(np.sum((y_true - y_true.mean()) ** 2))
    return {
        "n": n,
        "mse": residual / n,
        "r2": 1.0 - residual / total if total > 0 else None,
    }


def _number(v: float):
    return int(v) if float(v).is_integer() else v
