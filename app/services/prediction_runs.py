"""Background prediction runs: a model's predictions over a stored dataset, written as a CSV.

A run is a row, `queued` until a runner thread of an API process claims it
(`app.services.prediction_runner`), `running` with a heartbeat, then `succeeded`, `failed` or
`cancelled`; every write compares (run, attempt, status), so a run recovered from a silent process
is never finished twice. Its CSV (`app.services.prediction_csv`) is put in storage at
``predictions/<run id>.csv`` (STORAGE_URL) once whole.

Runs are claimed fairly across tenants: the queued run of the tenant with the fewest running runs,
the oldest first among equals, so one tenant's burst does not hold back another's single run. A
tenant has at most QUOTA_ACTIVE_PREDICTION_RUNS active runs (`app.services.quotas`).

A cancel moves a queued or running run to `cancelled` at once; the runner writing it reads the
run's status between chunks (at most every CANCEL_CHECK_S), stops there and removes its partial
CSV; a cancel that comes after the last read finds the CSV deleted at the run's end.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import func, select, update

from app.db import is_disk_full, is_unavailable
from app.errors import ProblemError
from app.jobs.workers import dead_here
from app.services.dataset_source import DatasetMismatch, DatasetSource
from app.services.prediction import LinearModel
from app.services.prediction_csv import csv_estimate, label_width, staging_path, write_csv
from app.storage import StorageUnavailable, get_storage, prediction_key
from app.tables import Dataset, Model, PredictionRun, new_id, utcnow

log = logging.getLogger("margin.predictions")

CANCEL_CHECK_S = 0.5  # a running run reads its status at most this often (between chunks)
END_DEADLINE_S = 300.0
ACTIVE = ("queued", "running")


class RunCancelled(Exception):
    """The run being written is no longer this runner's: cancelled (or deleted) meanwhile."""


def check_room(
    session, n_rows: int, outputs: int, label_bytes: int = 0, header_bytes: int = 0
) -> int:
    """This run's CSV estimate (`header_bytes` and its rows); 429 when it may not fit in the
    tenant's storage quota. The tenant's active runs count there at their own estimates (a
    run holds its estimate in `size_bytes` until it ends): the CSVs are written too late to
    refuse."""
    from app.services import quotas

    estimate = csv_estimate(n_rows, outputs, label_bytes, header_bytes)
    quotas.check_storage(session, estimate)
    return estimate


class ModelDeleted(LookupError):
    """The run's model was deleted while the run was being made."""


def create_run(
    db,
    model_id: str,
    dataset_id: str,
    n_rows: int,
    outputs: int,
    probabilities: bool = False,
    header_bytes: int = 0,
) -> PredictionRun:
    """Insert a queued run, unless the tenant already has as many active runs as allowed, or
    its CSV of `header_bytes` then `n_rows` x `outputs` may not fit in the storage quota (429);
    a `PredictionRunner` picks it up. `probabilities`: its CSV adds the class probabilities."""
    from app.services import quotas

    with db.write() as session:
        # the model locked against its deletion until the run is committed (FOR KEY SHARE)
        model = session.get(
            Model, model_id, with_for_update={"key_share": True}, options=[Model.without_weights()]
        )
        if model is None:
            raise ModelDeleted(model_id)
        # in this transaction, the tenant's row locked (or first made): no two slip under
        quotas.check_active_prediction_runs(session)
        estimate = check_room(session, n_rows, outputs, label_width(model.classes), header_bytes)
        run = PredictionRun(
            id=new_id("pred"), model_id=model_id, dataset_id=dataset_id, status="queued",
            probabilities=probabilities, size_bytes=estimate,  # held for its CSV until it ends
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
            error=None,  # a re-queued run's reason: this attempt ends with its own
        )
    return RunClaim(row.id, row.attempt + 1, worker) if moved else None


def _move(session, run_id: str, attempt: int, from_: str, to: str, /, **values) -> bool:
    """from_ -> to, if the run is still at (attempt, from_). A run that ends gives back the
    storage its CSV estimate held: its CSV's size if it succeeded, else nothing."""
    if to not in ACTIVE:
        values.setdefault("size_bytes", None)
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
    run is not lost to it. A try whose commit lost its answer may have landed: a later try
    that finds the run no longer running then counts it as done if the run is at `status`
    under this claim (it found the run ended and removed a succeeded run's CSV)."""
    start, delay, retried = time.monotonic(), 0.2, False
    while True:
        try:
            with db.write() as session:
                moved = _move(
                    session,
                    claim.run_id,
                    claim.attempt,
                    "running",
                    status,
                    finished_at=utcnow(),
                    **values,
                )
                if moved or not retried:
                    return moved
                now = session.execute(
                    select(PredictionRun.status, PredictionRun.attempt).where(
                        PredictionRun.id == claim.run_id
                    )
                ).first()
                return now is not None and tuple(now) == (status, claim.attempt)
        except Exception as exc:
            if not is_unavailable(exc) or time.monotonic() - start > END_DEADLINE_S:
                raise
            retried = True
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
        model, source, probabilities = _inputs(db, settings, claim.run_id)
        chunks = until_cancelled(source.chunks(model), lambda: still_running(db, claim))
        n_rows = write_csv(staging, model, chunks, probabilities)
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
        elif isinstance(exc, FileNotFoundError):  # its arrays were removed before they were open
            message = "the dataset was deleted while the run read it"
        else:
            message = f"prediction failed: {type(exc).__name__}"
        _end(db, claim, "failed", error=message)
        return "failed"
    if not _end(db, claim, "succeeded", n_rows=n_rows, size_bytes=size):
        if not _taken_over(db, claim):  # a later attempt writes (or wrote) the same key
            storage.delete(key)  # deleted or cancelled meanwhile
        return "lost"
    return "succeeded"


def _taken_over(db, claim: RunClaim) -> bool:
    """Whether a later attempt of the claimed run is queued, running or succeeded: its CSV is
    stored under the run's one key, which this claim's end must then leave alone."""
    with db.session() as session:
        now = session.execute(
            select(PredictionRun.status, PredictionRun.attempt).where(
                PredictionRun.id == claim.run_id
            )
        ).first()
    later = now is not None and now.attempt != claim.attempt
    return later and now.status in (*ACTIVE, "succeeded")


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
        _move(
            session, run.id, run.attempt, run.status, "cancelled", finished_at=utcnow(), error=None
        )
        session.refresh(run)  # as written, read in this transaction: the model may go next
    return run


def _inputs(db, settings, run_id: str) -> tuple[LinearModel, DatasetSource, bool]:
    from app.services.model_cache import model_from_row

    with db.session() as session:
        run = session.get(PredictionRun, run_id)
        model = session.get(Model, run.model_id) if run else None
        dataset = session.get(Dataset, run.dataset_id) if run and run.dataset_id else None
    if model is None:
        raise ValueError("the model was deleted")
    if dataset is None:
        raise ValueError("the dataset was deleted before the run could read it")
    return model_from_row(model), DatasetSource.of(settings, dataset), run.probabilities


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
    """Remove the runs' CSVs (best effort: a store that is away keeps them, and the API's
    start-up sweep removes them). The first removal that finds the store away ends the
    removals: each waited STORAGE_TIMEOUT_S, one after another, for every run of the model."""
    storage = get_storage(settings)
    for run_id in run_ids:
        staging_path(settings.data_dir, run_id).with_suffix(".csv.part").unlink(missing_ok=True)
    for done, run_id in enumerate(run_ids):
        try:
            storage.delete(prediction_key(run_id))
        except StorageUnavailable as exc:
            left = len(run_ids) - done
            log.warning("could not remove the CSVs of %d runs (%s); the sweep will", left, exc)
            return


def run_ids_of(session, model_id: str) -> list[str]:
    return list(session.scalars(select(PredictionRun.id).where(PredictionRun.model_id == model_id)))
