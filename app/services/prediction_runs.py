"""Predictions over stored datasets: evaluation scores, and background runs that write a CSV.

A stored dataset's arrays are in its own file's numbering (its ``zero_based``); they are mapped to
the model's columns through the raw file indices both share, so a stored file predicts the same as
its lines sent to ``predict``.

A run's CSV is written to ``DATA_DIR/predictions/<run id>.csv.part`` and renamed when complete,
so a CSV that exists is whole. Runs execute in a thread of the API process; a run that was queued
or running when its process stopped is marked failed by :func:`sweep_interrupted_runs`, which the
models router runs when the API starts. That assumes one API process per database: a second
replica starting would also fail the runs the first one is executing.
"""

from __future__ import annotations

import csv
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sqlalchemy import select, update

from app.services.dataset_files import align_columns
from app.services.evaluation import classification_report, regression_report
from app.services.prediction import LinearModel, decision_function, labels_from_decision
from app.tables import PredictionRun, new_id, utcnow

log = logging.getLogger("margin.predictions")

CHUNK_ROWS = 8192
ACTIVE = ("queued", "running")


class DatasetMismatch(ValueError):
    """A stored dataset that cannot be read in the model's feature space."""


@dataclass(frozen=True)
class DatasetSource:
    """Where a stored dataset's arrays are, and the numbering they are in."""

    directory: Path
    n_features: int
    zero_based: bool

    @classmethod
    def of(cls, data_dir: Path, dataset) -> DatasetSource:
        """From a ``tables.Dataset`` row."""
        return cls(Path(data_dir) / "datasets" / dataset.id, dataset.n_features, dataset.zero_based)

    def check(self, model: LinearModel) -> None:
        """Raise DatasetMismatch if the dataset cannot be read in the model's columns: a raw
        index 0 (a zero-based file's column 0) has no column in a one-based model."""
        if self.zero_based and not model.zero_based:
            indices = np.load(self.directory / "indices.npy", mmap_mode="r")
            if indices.size and int(indices.min()) == 0:
                raise DatasetMismatch(
                    "the dataset uses feature index 0, but the model's training file is one-based"
                )

    def features_beyond(self, model: LinearModel) -> int:
        """How many of the dataset's features the model does not have (ignored, as LIBLINEAR's
        predict ignores them): its columns past the model's, in the model's numbering."""
        shift = (0 if self.zero_based else 1) - (0 if model.zero_based else 1)
        return max(0, self.n_features + shift - model.n_features)

    def chunks(self, model: LinearModel, rows: int = CHUNK_ROWS):
        """Yield (first row, X chunk in the model's columns, y chunk) over the dataset.

        The arrays are memory-mapped and read a chunk at a time, so a prediction over a large
        dataset does not hold it in the API process's memory."""
        arrays = {
            name: np.load(self.directory / f"{name}.npy", mmap_mode="r")
            for name in ("data", "indices", "indptr", "y")
        }
        indptr = arrays["indptr"]
        n_rows = len(indptr) - 1
        for start in range(0, n_rows, rows):
            stop = min(start + rows, n_rows)
            lo, hi = int(indptr[start]), int(indptr[stop])
            X = sp.csr_matrix(
                (
                    np.asarray(arrays["data"][lo:hi]),
                    np.asarray(arrays["indices"][lo:hi]),
                    np.asarray(indptr[start : stop + 1]) - lo,
                ),
                shape=(stop - start, self.n_features),
            )
            try:
                X = align_columns(X, self.zero_based, model.zero_based, model.n_features)
            except ValueError as exc:
                raise DatasetMismatch(str(exc)) from None
            yield start, X, np.asarray(arrays["y"][start:stop], dtype=np.float64)


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
    """Scores of the model on a stored dataset: accuracy and confusion matrix for classifiers,
    MSE and R² for regressors."""
    truth, predicted = [], []
    for _, X, y in source.chunks(model):
        D = decision_function(model, X)
        truth.append(y)
        if model.is_regressor:
            predicted.append(D[:, 0])
        else:
            predicted.append(np.asarray(labels_from_decision(model, D), dtype=np.float64))
    y_true = np.concatenate(truth) if truth else np.empty(0)
    y_pred = np.concatenate(predicted) if predicted else np.empty(0)
    if model.is_regressor:
        return regression_report(y_true, y_pred)
    return classification_report(y_true, y_pred, model.classes)


def csv_path(data_dir: Path, run_id: str) -> Path:
    return Path(data_dir) / "predictions" / f"{run_id}.csv"


def csv_header(model: LinearModel) -> list[str]:
    if model.is_regressor:
        return ["row", "value"]
    if model.coef.shape[0] == 1:
        return ["row", "label", "decision_value"]
    return ["row", "label", *(f"decision_value_{c}" for c in model.classes)]


def write_csv(path: Path, model: LinearModel, chunks) -> int:
    """Write the predictions of every chunk of ``(first row, X, y)`` to ``path`` (atomically);
    returns the row count."""
    part = path.with_suffix(".csv.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    n_rows = 0
    try:
        with open(part, "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(csv_header(model))
            for start, X, _ in chunks:
                D = decision_function(model, X)
                rows = range(start, start + D.shape[0])
                n_rows += D.shape[0]
                if model.is_regressor:
                    out.writerows(zip(rows, map(repr, D[:, 0].tolist()), strict=True))
                    continue
                labels = labels_from_decision(model, D)
                values = [[repr(v) for v in r] for r in D.tolist()]
                out.writerows([r, lab, *v] for r, lab, v in zip(rows, labels, values, strict=True))
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return n_rows


def create_run(db, model_id: str, dataset_id: str) -> PredictionRun:
    with db.write() as session:
        run = PredictionRun(
            id=new_id("pred"), model_id=model_id, dataset_id=dataset_id, status="queued"
        )
        session.add(run)
    return run


def execute_run(db, data_dir: Path, run_id: str, model: LinearModel, source: DatasetSource) -> None:
    """Run a queued prediction of ``source`` with ``model``. Every outcome is recorded on the
    row; nothing is raised."""
    if not _set_status(db, run_id, "running", expect=("queued",)):
        return
    try:
        n_rows = write_csv(csv_path(data_dir, run_id), model, source.chunks(model))
    except Exception as exc:
        log.exception("prediction run %s failed", run_id)
        message = (
            str(exc)
            if isinstance(exc, (DatasetMismatch, ValueError))
            else (f"prediction failed: {type(exc).__name__}")
        )
        _set_status(db, run_id, "failed", error=message, finished_at=utcnow())
        return
    if not _set_status(db, run_id, "succeeded", n_rows=n_rows, finished_at=utcnow()):
        csv_path(data_dir, run_id).unlink(missing_ok=True)  # the model was deleted meanwhile


def _set_status(db, run_id: str, status: str, expect=ACTIVE, **values) -> bool:
    with db.write() as session:
        result = session.execute(
            update(PredictionRun)
            .where(PredictionRun.id == run_id, PredictionRun.status.in_(expect))
            .values(status=status, **values)
        )
        return result.rowcount == 1


def sweep_interrupted_runs(db) -> int:
    """Mark runs left queued or running by a stopped API process as failed (call at start-up
    when this process is the only one running predictions)."""
    with db.write() as session:
        result = session.execute(
            update(PredictionRun)
            .where(PredictionRun.status.in_(ACTIVE))
            .values(
                status="failed",
                error="interrupted: the service stopped during the run",
                finished_at=utcnow(),
            )
        )
        return result.rowcount


def delete_files(data_dir: Path, run_ids: list[str]) -> None:
    for run_id in run_ids:
        path = csv_path(data_dir, run_id)
        path.unlink(missing_ok=True)
        path.with_suffix(".csv.part").unlink(missing_ok=True)


def run_ids_of(session, model_id: str) -> list[str]:
    return list(session.scalars(select(PredictionRun.id).where(PredictionRun.model_id == model_id)))
