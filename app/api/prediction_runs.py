"""Background prediction runs of a model over a stored dataset: create, list, show (the CSV once
it succeeded), cancel. The routes' router also starts and stops the app's runner threads
(services.prediction_runner); services.prediction_runs holds a run's states.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.api.model_lookup import app_singleton, unpacked
from app.deps import DatabaseDep, ModelDep, SessionDep, SettingsDep, not_found
from app.errors import ProblemError
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page, keyset_page
from app.schemas.models import PredictionRunOut, PredictionRunRequest
from app.services import prediction_runs as runs
from app.services.dataset_source import DatasetMismatch, DatasetSource
from app.services.datasets import named_dataset
from app.services.prediction import InvalidInstances, calibrated, one_flag, why_no_calibration
from app.services.prediction_csv import header_bytes
from app.services.prediction_runner import PredictionRunner
from app.storage import get_storage, prediction_key
from app.streaming import TimedStreamingResponse
from app.tables import PredictionRun


@asynccontextmanager
async def _lifespan(app):
    """Start the background prediction runner (it first recovers runs a stopped process left
    active; see services.prediction_runner), and stop it with the app."""
    await run_in_threadpool(prediction_runner, app)
    try:
        yield
    finally:
        runner = getattr(app.state, "prediction_runner", None)
        if runner is not None:
            await run_in_threadpool(runner.stop)


router = APIRouter(tags=["prediction runs"], lifespan=_lifespan)


def prediction_runner(app) -> PredictionRunner:
    """The app's prediction runner (started on first use)."""

    def started() -> PredictionRunner:
        runner = PredictionRunner(app.state.db, app.state.settings)
        runner.start()
        return runner

    return app_singleton(app, "prediction_runner", started)


def deleted_meanwhile(dataset_id: str) -> ProblemError:
    return ProblemError(
        404, "Dataset not found", f"dataset {dataset_id!r} was deleted while it was being read"
    )


def _run_out(run: PredictionRun) -> PredictionRunOut:
    out = PredictionRunOut.model_validate(run)
    if run.status == "succeeded":
        out.result = f"/v1/models/{run.model_id}/predictions/{run.id}"
    return out


@router.post(
    "/models/{model_id}/predictions",
    status_code=202,
    response_model=PredictionRunOut,
    responses={429: {"description": "the tenant's active runs or storage are at their quota"}},
)
def create_prediction_run(
    body: PredictionRunRequest,
    model: ModelDep,
    session: SessionDep,
    db: DatabaseDep,
    settings: SettingsDep,
    request: Request,
    response: Response,
    probabilities: bool | None = Query(
        None,
        description="also write the calibrated class probabilities (a `probability_<class>` "
        "column per class, in the order of the model's classes); 422 for a model without "
        'calibration. The body may say `"probabilities": true` instead; both with different '
        "values is a 422.",
    ),
):
    """Predict every row of a stored dataset in the background; GET the returned location for
    the run's status, and for the CSV once it has succeeded. 429 with Retry-After while the
    tenant has QUOTA_ACTIVE_PREDICTION_RUNS runs queued or running."""
    dataset = named_dataset(session, body.dataset_id)
    loaded = unpacked(request.app, session, model.id)  # closes the session: one connection
    sent = body.probabilities if "probabilities" in body.model_fields_set else None
    try:
        with_probabilities = one_flag(probabilities, sent)
    except InvalidInstances as exc:
        raise ProblemError(exc.status, exc.title, str(exc)) from None
    if with_probabilities and not calibrated(loaded):
        raise ProblemError(422, "No probability calibration", why_no_calibration(loaded))
    outputs = len(loaded.intercept) + (len(loaded.classes) if with_probabilities else 0)
    try:
        source = DatasetSource.of(settings, dataset, tries=1)  # a 503 within the timeout
        source.check(loaded)
        run = runs.create_run(
            db,
            model.id,
            dataset.id,
            dataset.n_rows,
            outputs,
            probabilities=with_probabilities,
            header_bytes=header_bytes(loaded, with_probabilities),
        )
    except DatasetMismatch as exc:
        raise ProblemError(422, "Dataset not compatible", str(exc)) from None
    except runs.ModelDeleted:
        raise ProblemError(
            404, "Model not found", f"model {model.id!r} was deleted while the run was made"
        ) from None
    except (FileNotFoundError, IntegrityError):  # the dataset was deleted meanwhile
        raise deleted_meanwhile(dataset.id) from None
    prediction_runner(request.app).wake()
    response.headers["Location"] = f"/v1/models/{model.id}/predictions/{run.id}"
    return _run_out(run)


@router.get("/models/{model_id}/predictions", response_model=Page[PredictionRunOut])
def list_prediction_runs(
    model: ModelDep,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    """The model's runs, newest first, in every status (cancelled ones too)."""
    query = select(PredictionRun).where(PredictionRun.model_id == model.id)
    items, next_cursor = keyset_page(session, query, PredictionRun.id, limit, cursor)
    return Page[PredictionRunOut](items=[_run_out(r) for r in items], next=next_cursor)


@router.get(
    "/models/{model_id}/predictions/{run_id}",
    response_model=PredictionRunOut,
    responses={
        200: {"content": {"text/csv": {}}, "description": "the CSV, once the run succeeded"},
        202: {"description": "the run is queued or running (its status as JSON)"},
        409: {"description": "the run failed or was cancelled (the detail says which)"},
    },
)
def get_prediction_run(
    model: ModelDep,
    run_id: str,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    format: Literal["csv", "json"] | None = None,
):
    """The run's CSV once it succeeded (``?format=json`` or ``Accept: application/json`` for its
    status instead); 202 with its status while it is queued or running; 409 if it failed or was
    cancelled."""
    run = session.get(PredictionRun, run_id)
    if run is None or run.model_id != model.id:
        raise not_found("Prediction run", run_id)
    wants_json = format == "json" or (
        format is None and "application/json" in request.headers.get("accept", "")
    )
    out = _run_out(run)
    if wants_json:
        return out
    if run.status in runs.ACTIVE:
        return Response(
            out.model_dump_json(),
            status_code=202,
            media_type="application/json",
            headers={"Retry-After": "1"},
        )
    if run.status in ("failed", "cancelled"):
        title = "Prediction run failed" if run.status == "failed" else "Prediction run cancelled"
        raise ProblemError(
            409,
            title,
            run.error or f"the run was {run.status}",
            run=out.model_dump(mode="json"),
        )
    return _csv_response(settings, run)


@router.post(
    "/models/{model_id}/predictions/{run_id}/cancel",
    response_model=PredictionRunOut,
    responses={409: {"description": "the run has already ended"}},
)
def cancel_prediction_run(model: ModelDep, run_id: str, db: DatabaseDep, session: SessionDep):
    """Cancel a queued or running run: it is `cancelled` at once; a running one stops between
    two chunks and its partial CSV is removed. 409 for a run that has already ended."""
    session.close()  # the cancel writes in its own transaction
    return _run_out(runs.cancel_run(db, model.id, run_id))


def _csv_response(settings, run: PredictionRun) -> Response:
    """A succeeded run's CSV: the local file, or streamed from the object store; 410 if gone."""
    storage = get_storage(settings)
    key = prediction_key(run.id)
    path = storage.local_path(key)
    size = storage.size(key) if path is None else None
    if size is not None:  # sized, as a local file is: a client can tell a cut download
        headers = {
            "Content-Disposition": f'attachment; filename="{run.id}.csv"',
            "Content-Length": str(size),
        }
        return TimedStreamingResponse(
            storage.read(key),
            send_timeout=settings.send_timeout_s,
            media_type="text/csv",
            headers=headers,
        )
    try:
        # opened here, not when the response starts: a run deleted meanwhile is then a 410, and
        # once open, the file stays readable to the end however it is removed
        csv_file = open(path, "rb") if path is not None else None  # noqa: SIM115 - closed by _chunks
    except FileNotFoundError:
        csv_file = None
    if csv_file is None:
        raise ProblemError(410, "Prediction result gone", f"the CSV of run {run.id!r} is missing")
    headers = {
        "Content-Disposition": f'attachment; filename="{run.id}.csv"',
        "Content-Length": str(os.fstat(csv_file.fileno()).st_size),
    }
    return TimedStreamingResponse(
        _chunks(csv_file),
        send_timeout=settings.send_timeout_s,
        media_type="text/csv",
        headers=headers,
    )


def _chunks(csv_file, size: int = 1 << 16):
    with csv_file:
        while chunk := csv_file.read(size):
            yield chunk
