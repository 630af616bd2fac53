"""Predictions over stored datasets: evaluation scores, and background runs that write a CSV.

A stored dataset's arrays are in its own file's numbering (its ``zero_based``); they are mapped to
the model's columns through the raw file indices both share, so a stored file predicts the same as
its lines sent to ``predict``.

A run's CSV is written to ``DATA_DIR/tmp/<run id>.csv.part``, renamed when complete and then put
in storage at ``predictions/<run id>.csv`` (STORAGE_URL), so a stored CSV is whole. A run is
a row, `queued` until a runner thread of an API process
claims it (`app.services.prediction_runner`), `running` with a heartbeat, then `succeeded`,
`failed` or `cancelled`; every write compares (run, attempt, status), so a run recovered from a
silent process is never finished twice.

Runs are claimed fairly across tenants: the queued run of the tenant with the fewest running runs,
the oldest first among equals, so one tenant's burst does not hold back another's single run. A
tenant has at most QUOTA_ACTIVE_PREDICTION_RUNS active runs (`app.services.quotas`).

A cancel moves a queued or running run to `cancelled` at once; the runner writing it reads the
run's status between chunks (at most every CANCEL_CHECK_S), stops there and removes its partial
CSV; a cancel that comes after the last read finds the CSV deleted at the run's end.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sqlalchemy import func, select, update

from app.db import is_disk_full, is_unavailable
from app.errors import ProblemError
from app.jobs.workers import dead_here
from app.services.dataset_files import align_columns
from app.services.evaluation import classification_report, regression_report
from app.services.prediction import (
    LinearModel,
    decision_function,
    labels_from_decision,
    probabilities_of,
)
from app.storage import StorageUnavailable, get_storage, prediction_key
from app.tables import Dataset, Model, PredictionRun, new_id, utcnow

log = logging.getLogger("margin.predictions")

CHUNK_ROWS = 8192
CANCEL_CHECK_S = 0.5  # a running run reads its status at most this often (between chunks)
END_DEADLINE_S = 300.0
ACTIVE = ("queued", "running")


class DatasetMismatch(ValueError):
    """A stored dataset that cannot be read in the model's feature space."""


class RunCancelled(Exception):
    """The run being written is no longer this runner's: cancelled (or deleted) meanwhile."""


class DatasetSource:
    """Where a stored dataset's arrays are (a local directory, found when first needed: the
    storage's own, or the local copy of an object-stored dataset), and their numbering."""

    def __init__(self, locate: Callable[[], Path], n_features: int, zero_based: bool):
        self._locate, self._directory = locate, None
        self.n_features, self.zero_based = n_features, zero_based

    @classmethod
    def of(cls, settings, dataset) -> DatasetSource:
        """From a ``tables.Dataset`` row."""
        from app.services.datasets import dataset_arrays

        return cls(
            lambda: dataset_arrays(settings, dataset), dataset.n_features, dataset.zero_based
        )

    @property
    def directory(self) -> Path:
        if self._directory is None:
            self._directory = Path(self._locate())
        return self._directory

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

    def chunks(self, model: LinearModel, rows: int | None = None):
        """Yield (first row, X chunk in the model's columns, y chunk) over the dataset, `rows`
        rows at a time (default CHUNK_ROWS).

        The arrays are memory-mapped and read a chunk at a time, so a prediction over a large
        dataset does not hold it in the API process's memory."""
        arrays = {
            name: np.load(self.directory / f"{name}.npy", mmap_mode="r")
            for name in ("data", "indices", "indptr", "y")
        }
        indptr = arrays["indptr"]
        n_rows = len(indptr) - 1
        rows = rows or CHUNK_ROWS
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
    """Scores of the model on a stored dataset: accuracy and confusion matrix for classifiers
    (with log loss and Brier score when the model is calibrated), MSE and R² for regressors."""
    truth, predicted = [], []
    scores = ProbabilityScores(model) if model.calibration and not model.is_regressor else None
    for _, X, y in source.chunks(model):
        D = decision_function(model, X)
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


def staging_path(data_dir: Path, run_id: str) -> Path:
    """Where a run's CSV is written on this machine before it goes to storage."""
    return Path(data_dir) / "tmp" / f"{run_id}.csv"


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


CSV_FIELD_BYTES = 24  # a row index, a label or a float64's repr, with its comma: at most about


def csv_estimate(n_rows: int, outputs: int) -> int:
    """An upper estimate of a run's CSV: a row index, a label and the decision values a row."""
    return n_rows * CSV_FIELD_BYTES * (2 + outputs)


def check_room(session, n_rows: int, outputs: int) -> None:
    """429 when this run's CSV, with those the tenant's active runs will write (at one output
    a row), may not fit in its storage quota: the CSVs count once written, too late to refuse."""
    from app.services import quotas

    active_rows = session.scalar(
        select(func.coalesce(func.sum(Dataset.n_rows), 0))
        .select_from(PredictionRun)
        .join(Dataset, Dataset.id == PredictionRun.dataset_id)
        .where(PredictionRun.status.in_(ACTIVE))
    )
    quotas.check_storage(session, csv_estimate(n_rows, outputs) + csv_estimate(active_rows, 1))


class ModelDeleted(LookupError):
    """The run's model was deleted while the run was being made."""


def create_run(db, model_id: str, dataset_id: str) -> PredictionRun:
    """Insert a queued run, unless the tenant already has as many active runs as allowed (429);
    a `PredictionRunner` picks it up."""
    from app.services import quotas

    with db.write() as session:
        # the model locked against its deletion until the run is committed (FOR KEY SHARE)
        if session.get(Model, model_id, with_for_update={"key_share": True}) is None:
            raise ModelDeleted(model_id)
        quotas.check_active_prediction_runs(session)  # in this transaction: no two slip under
        run = PredictionRun(
            id=new_id("pred"), model_id=model_id, dataset_id=dataset_id, status="queued"
        )
        session.add(run)
    return run


# --- a run's states: every write compares (run, attempt, status) -------------------------------


@dataclass(frozen=True)
class RunClaim:
    run_id: str
    attempt: int
    worker: str


def next_queued():
    """The query of the run to claim next: a queued run of the tenant with the fewest running
    runs, the oldest (ids are time-ordered) among equals. It locks only that run (PostgreSQL:
    FOR UPDATE OF prediction_runs SKIP LOCKED, so concurrent claimers take different runs;
    SQLite serializes the writers)."""
    running = (
        select(PredictionRun.tenant, func.count().label("n"))
        .where(PredictionRun.status == "running")
        .group_by(PredictionRun.tenant)
        .subquery()
    )
    return (
        select(PredictionRun.id, PredictionRun.attempt)
        .outerjoin(running, running.c.tenant == PredictionRun.tenant)
        .where(PredictionRun.status == "queued")
        .order_by(func.coalesce(running.c.n, 0), PredictionRun.id)
        .limit(1)
        .with_for_update(skip_locked=True, of=PredictionRun)
    )


def claim_next(db, worker: str) -> RunClaim | None:
    """queued -> running for `worker`: the next run in fair order (`next_queued`), or None."""
    with db.write() as session:
        row = session.execute(next_queued()).one_or_none()
        if row is None:
            return None
        now = utcnow()
        moved = _move(
            session,
            row.id,
            row.attempt,
            "queued",
            "running",
            attempt=row.attempt + 1,
            worker=worker,
            started_at=now,
            heartbeat_at=now,
        )
    return RunClaim(row.id, row.attempt + 1, worker) if moved else None


def _move(session, run_id: str, attempt: int, from_: str, to: str, /, **values) -> bool:
    result = session.execute(
        update(PredictionRun)
        .where(PredictionRun.id == run_id, PredictionRun.attempt == attempt)
        .where(PredictionRun.status == from_)
        .values(status=to, **values)
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def _end(db, claim: RunClaim, status: str, **values) -> bool:
    """running -> `status`; waits out a database outage (up to END_DEADLINE_S) so that a finished
    run is not lost to it."""
    start, delay = time.monotonic(), 0.2
    while True:
        try:
            with db.write() as session:
                return _move(
                    session,
                    claim.run_id,
                    claim.attempt,
                    "running",
                    status,
                    finished_at=utcnow(),
                    **values,
                )
        except Exception as exc:
            if not is_unavailable(exc) or time.monotonic() - start > END_DEADLINE_S:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 2.0)


def execute_run(db, settings, claim: RunClaim) -> str:
    """Run a claimed prediction: write its CSV, put it in storage and record the outcome on the
    row (nothing is raised for the run's own errors). Returns the run's final status, or
    "stopped" (between chunks: no longer running under this claim) or "lost" (ended meanwhile)."""
    storage = get_storage(settings)
    key = prediction_key(claim.run_id)
    staging = staging_path(settings.data_dir, claim.run_id)
    try:
        model, source = _inputs(db, settings, claim.run_id)
        chunks = until_cancelled(source.chunks(model), lambda: still_running(db, claim))
        n_rows = write_csv(staging, model, chunks)
        size = staging.stat().st_size
        storage.store_file(staging, key)
    except RunCancelled:  # write_csv has removed its partial .part file
        log.info("prediction run %s stopped: cancelled, deleted or taken over", claim.run_id)
        return "stopped"
    except Exception as exc:
        staging.unlink(missing_ok=True)
        if is_unavailable(exc):
            raise  # the database is away: the run stays running; recovery re-queues it
        log.exception("prediction run %s failed", claim.run_id)
        if is_disk_full(exc):
            message = "disk full: the server's disk filled up while the run wrote its result"
        elif isinstance(exc, (DatasetMismatch, ValueError, StorageUnavailable)):
            message = str(exc)
        else:
            message = f"prediction failed: {type(exc).__name__}"
        _end(db, claim, "failed", error=message)
        return "failed"
    if not _end(db, claim, "succeeded", n_rows=n_rows, size_bytes=size):
        storage.delete(key)  # deleted or taken meanwhile
        return "lost"
    return "succeeded"


def until_cancelled(chunks, is_running: Callable[[], bool]):
    """The chunks, asking `is_running` after a chunk is written (before the next is read) once
    CANCEL_CHECK_S has passed since it last asked: RunCancelled once the run is no longer
    running. (A read after every chunk cost 4-9% of a run on a loaded machine.)"""
    asked = time.monotonic()
    for chunk in chunks:
        yield chunk
        if time.monotonic() - asked >= CANCEL_CHECK_S:
            if not is_running():
                raise RunCancelled
            asked = time.monotonic()


def still_running(db, claim: RunClaim) -> bool:
    """Whether the claimed run is still running under this claim (not cancelled, deleted or
    recovered meanwhile). True while the database is away: the run goes on, and its end waits
    for the database (`_end`)."""
    try:
        with db.session() as session:
            status = session.scalar(
                select(PredictionRun.status).where(
                    PredictionRun.id == claim.run_id, PredictionRun.attempt == claim.attempt
                )
            )
    except Exception as exc:
        if is_unavailable(exc):
            return True
        raise
    return status == "running"


def cancel_run(db, model_id: str, run_id: str) -> PredictionRun:
    """queued or running -> cancelled (a runner writing it stops between two chunks); 404 for
    no such run of this model, 409 for a run that has already ended."""
    with db.write() as session:
        run = session.get(PredictionRun, run_id, with_for_update=True)
        if run is None or run.model_id != model_id:
            raise ProblemError(
                404, "Prediction run not found", f"no prediction run with id {run_id!r}"
            )
        if run.status not in ACTIVE:
            raise ProblemError(
                409,
                "Prediction run already ended",
                f"prediction run {run_id!r} already ended {run.status}",
            )
        # the row is locked (PostgreSQL) or the database is (SQLite): the status read holds
        _move(session, run.id, run.attempt, run.status, "cancelled", finished_at=utcnow())
    with db.session() as session:
        return session.get(PredictionRun, run_id)


def _inputs(db, settings, run_id: str) -> tuple[LinearModel, DatasetSource]:
    from app.services.model_cache import model_from_row

    with db.session() as session:
        run = session.get(PredictionRun, run_id)
        model = session.get(Model, run.model_id) if run else None
        dataset = session.get(Dataset, run.dataset_id) if run and run.dataset_id else None
    if model is None:
        raise ValueError("the model was deleted")
    if dataset is None:
        raise ValueError("the dataset was deleted before the run could read it")
    return model_from_row(model), DatasetSource.of(settings, dataset)


def beat(db, run_ids: list[str]) -> None:
    """Refresh the heartbeat of the runs this process is executing."""
    if not run_ids:
        return
    with db.write() as session:
        session.execute(
            update(PredictionRun)
            .where(PredictionRun.id.in_(run_ids), PredictionRun.status == "running")
            .values(heartbeat_at=utcnow())
            .execution_options(synchronize_session=False)
        )


def recover_runs(db, retries: int, stale_before=None) -> dict[str, str]:
    """Runs left running by a process that is gone (dead on this host, or, with `stale_before`,
    silent since then): back to the queue (at most `retries` times) or failed."""
    with db.session() as session:
        rows = session.execute(
            select(
                PredictionRun.id,
                PredictionRun.attempt,
                PredictionRun.worker,
                PredictionRun.heartbeat_at,
            ).where(PredictionRun.status == "running")
        ).all()
    outcome = {}
    for row in rows:
        silent = stale_before is not None and (
            row.heartbeat_at is None or row.heartbeat_at < stale_before
        )
        if not (dead_here(row.worker) or silent):
            continue
        reason = "interrupted: the service process running it stopped"
        if row.attempt <= retries:
            to, values = "queued", {"worker": None, "error": f"{reason}; re-queued"}
        else:
            to = "failed"
            values = {"error": f"{reason} (attempt {row.attempt})", "finished_at": utcnow()}
        with db.write() as session:
            if _move(session, row.id, row.attempt, "running", to, **values):
                outcome[row.id] = to
    if outcome:
        log.warning("recovered %d interrupted prediction runs: %s", len(outcome), outcome)
    return outcome


def delete_files(settings, run_ids: list[str]) -> None:
    """Remove the runs' CSVs (best effort: a store that is away keeps them)."""
    storage = get_storage(settings)
    for run_id in run_ids:
        staging_path(settings.data_dir, run_id).with_suffix(".csv.part").unlink(missing_ok=True)
        try:
            storage.delete(prediction_key(run_id))
        except StorageUnavailable as exc:
            log.warning("could not remove the CSV of run %s: %s", run_id, exc)


def run_ids_of(session, model_id: str) -> list[str]:
    return list(session.scalars(select(PredictionRun.id).where(PredictionRun.model_id == model_id)))
