"""Scores of a model on a stored dataset: accuracy and confusion matrix for classifiers (with log
loss and Brier score when the model is calibrated), MSE and R² for regressors."""

from __future__ import annotations

import numpy as np

from app.errors import ProblemError
from app.services.dataset_source import DatasetMismatch, DatasetSource, finite_rows
from app.services.evaluation import ConfusionCounts, RegressionSums
from app.services.formats.labels import class_name, recode, text_classes
from app.services.prediction import (
    LinearModel,
    decision_function,
    labels_from_decision,
    probabilities_of,
)


def check_labels(model: LinearModel, dataset) -> None:
    """DatasetMismatch unless a ``tables.Dataset``'s labels can score a classifier: the dataset
    must have class labels, one of them at least a class of the model (an unrelated dataset
    would otherwise score an accuracy of 0 without a word). Regressors take any numeric
    target, not text labels (their stored codes 0..k-1 were scored as targets)."""
    if model.is_regressor:
        names = text_classes(dataset.classes)
        if names is not None:
            raise DatasetMismatch(
                f"dataset {dataset.id!r} has text labels (classes {_listed(names)}); a "
                "regressor is evaluated on a dataset of numeric targets"
            )
        return
    if dataset.label_kind != "classes":
        raise DatasetMismatch(
            f"dataset {dataset.id!r} has real-valued targets; a classifier is evaluated on a "
            "dataset whose labels are classes"
        )
    labels = [c["label"] for c in dataset.classes or []]
    known = {class_name(c) for c in model.classes}  # by name: the number 1 is the text "1"
    if not any(class_name(label) in known for label in labels):
        raise DatasetMismatch(
            f"none of dataset {dataset.id!r}'s labels ({_listed(labels)}) is a class of the "
            f"model ({_listed(model.classes)}): it is not a test set of this model"
        )


def _listed(values: list, limit: int = 10) -> str:
    text = ", ".join(str(v) for v in values[:limit])
    return text + (f", ... ({len(values)} in all)" if len(values) > limit else "")


def check_rows(dataset, max_rows: int) -> None:
    """422 when a ``tables.Dataset`` has more rows than evaluate scores in one request: it runs
    in the API process while the client waits, and a 10-million-row dataset (a 126 KB gzip
    upload) took 69 s of it; one of 104,857,600 rows ran for more than 15 minutes, and on after
    its client had gone."""
    if dataset.n_rows > max_rows:
        raise ProblemError(
            422,
            "Dataset too large to evaluate",
            f"dataset {dataset.id!r} has {dataset.n_rows} rows, more than the {max_rows} evaluate "
            "scores in one request (MAX_EVALUATE_ROWS): evaluate a sample of its rows, or "
            "predict all of them in the background (POST /v1/models/{id}/predictions) and score "
            "the CSV's labels",
            limit=max_rows,
        )


def evaluate(model: LinearModel, source: DatasetSource, rows: int | None = None) -> dict:
    """Scores of the model on a stored dataset: accuracy and confusion matrix for classifiers
    (with log loss and Brier score when the model is calibrated), MSE and R² for regressors.
    Summed over chunks of ``rows`` rows (default and bounds: `DatasetSource.chunks`), so that
    it holds one chunk, not every row's label and prediction."""
    names = getattr(source, "label_names", None)
    if not model.is_regressor and (names is not None or _named(model.classes)):
        return _evaluate_by_name(model, source, names, rows)
    counts = RegressionSums() if model.is_regressor else ConfusionCounts(model.classes)
    scores = ProbabilityScores(model) if model.calibration and not model.is_regressor else None
    for start, X, y in source.chunks(model, rows):
        D = finite_rows(decision_function(model, X), start)
        if model.is_regressor:
            counts.add(y, D[:, 0])
        else:
            counts.add(y, np.asarray(labels_from_decision(model, D), dtype=np.float64))
        if scores is not None:
            scores.add(D, y)
    report = counts.report()
    if scores is not None:
        report.update(scores.report())
    return report


def _named(classes: list) -> bool:
    return any(isinstance(c, str) for c in classes)


def _evaluate_by_name(
    model: LinearModel, source: DatasetSource, names: list[str] | None, rows: int | None
) -> dict:
    """`evaluate` where the model's classes or the dataset's labels are text: the true labels
    are matched to the model's classes by name (`formats.labels.class_name`), a label the model
    lacks is a row of its own in the confusion matrix and counts as wrong, as a number does."""
    k = len(model.classes)
    counts = ConfusionCounts(list(range(k)))  # by the true label's value (a code, or a number)
    scores = ProbabilityScores(model, positions=True) if model.calibration else None
    for start, X, y in source.chunks(model, rows):
        D = finite_rows(decision_function(model, X), start)
        predicted = (D[:, 0] > 0).astype(np.int64) if D.shape[1] == 1 else D.argmax(axis=1)
        counts.add(y, predicted)
        if scores is not None:
            scores.add(D, _positions(y, names, model.classes))
    if names is None:  # numbers against text classes: named as `number_name` writes them
        name_of = {v: class_name(_number(v)) for v in counts.by_label}
    else:
        name_of = {v: names[int(v)] for v in counts.by_label}
    position = {class_name(c): i for i, c in enumerate(model.classes)}
    present = names if names is not None else name_of.values()
    unseen = sorted(n for n in set(present) if n not in position)
    position.update({n: k + i for i, n in enumerate(unseen)})
    report = counts.relabelled(lambda v: position[name_of[v]]).report()
    report["labels"] = list(model.classes) + unseen
    if scores is not None:
        report.update(scores.report())
    return report


def _number(value: float):
    return int(value) if float(value).is_integer() and abs(value) < 2**53 else value


def _positions(y: np.ndarray, names: list[str] | None, classes: list) -> np.ndarray:
    """Indices of the labels `y` in the model's classes (-1: a label the model lacks)."""
    if names is not None:
        return recode(y, names, classes)
    values, codes = np.unique(np.asarray(y, dtype=np.float64), return_inverse=True)
    return recode(codes, [class_name(_number(v)) for v in values.tolist()], classes)


class ProbabilityScores:
    """Log loss and Brier score of a calibrated model's probabilities, summed chunk by chunk
    over the rows whose true label is one of the model's classes (the others have no column)."""

    EPS = 1e-15  # probabilities are clipped here, as scikit-learn's log_loss did

    def __init__(self, model: LinearModel, positions: bool = False):
        """`positions`: the labels given to `add` are indices into the model's classes."""
        self.model = model
        self.classes = (
            np.arange(len(model.classes), dtype=np.float64)
            if positions
            else np.asarray(model.classes, dtype=np.float64)
        )
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
