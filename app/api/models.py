"""Model resources: list, show, delete, predict, evaluate, export (background prediction runs
are in app.api.prediction_runs).

``predict`` is the latency-critical route: it is ``async`` and touches no database while its
model is cached, reads the raw body and validates it by hand (services.prediction), and answers
with pre-serialized JSON. Large bodies are parsed on a worker thread so that the event loop is
never blocked for long.
"""

from __future__ import annotations

import logging
from itertools import chain
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import delete, select

from app.api.model_lookup import ModelNotFound, load_model, model_cache, unpacked
from app.api.prediction_runs import deleted_meanwhile
from app.auth import authenticate
from app.deps import (
    DatabaseDep,
    ModelDep,
    SessionDep,
    SettingsDep,
    check_sent_once,
    not_found,
)
from app.errors import ProblemError
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page, sized_page
from app.schemas.models import (
    PREDICT_OPENAPI,
    ClassificationEvaluation,
    DatasetRef,
    ModelOut,
    RegressionEvaluation,
)
from app.schemas.registry import LineageOut
from app.services import export as export_service
from app.services import lineage as lineage_service
from app.services import prediction_runs as runs
from app.services import registry
from app.services.dataset_scores import check_labels, check_rows, evaluate
from app.services.dataset_source import DatasetMismatch, DatasetSource
from app.services.datasets import named_dataset
from app.services.prediction import InvalidInstances, dumps, predict_body
from app.streaming import TimedStreamingResponse
from app.tables import Model, PredictionRun

log = logging.getLogger("margin.models")
router = APIRouter(tags=["models"])

# Bodies up to this size are parsed on the event loop (a single instance takes tens of µs);
# larger ones go to a worker thread.
INLINE_BODY_BYTES = 64 * 1024
_TITLES = {413: "Batch too large", 415: "Unsupported media type", 422: "Invalid instances"}


# --------------------------------------------------------------------------------------------
# Prediction (first, so that its route is matched first)


async def predict(request: Request) -> Response:
    """Predict instances sent in the body: JSON sparse instances (indices in the training
    file's numbering), JSON dense rows, records by feature name, or ``text/plain`` LIBSVM
    lines. The model is an id, ``name@alias`` or ``name@vN``."""
    app = request.app
    principal = await authenticate(request, "predict")
    ref = request.path_params["model_id"]
    try:
        model = await load_model(request, principal, ref)
    except ModelNotFound:
        raise not_found("Model", ref) from None
    query_flag = _query_flag(request)  # a bad query is refused before the body is read
    body = await read_body(request)
    content_type = request.headers.get("content-type", "")
    max_batch = app.state.settings.max_predict_batch
    args = (body, content_type, model, max_batch, query_flag)
    try:
        if len(body) <= INLINE_BODY_BYTES:
            content, n = _predict_bytes(*args)
        else:
            content, n = await run_in_threadpool(_predict_bytes, *args)
    except InvalidInstances as exc:
        title = exc.title or _TITLES.get(exc.status, "Invalid request")
        raise ProblemError(exc.status, title, str(exc)) from None
    metrics = getattr(app.state, "metrics", None)
    if metrics is not None:
        metrics.predicted.labels(model.kind).inc(n)
    return Response(content, media_type="application/json")


def _query_flag(request: Request) -> bool | None:
    """`?probabilities=`: True, False, or None when the query string does not say (this
    route skips the routers' dependencies: their check is called here)."""
    check_sent_once(request.query_params, ("probabilities",))
    flag = request.query_params.get("probabilities")
    if flag is None:
        return None
    if flag.lower() not in ("true", "false", "1", "0"):
        raise ProblemError(422, "Invalid request", "probabilities must be true or false")
    return flag.lower() in ("true", "1")


# predict is served by a plain Starlette route, registered first: it skips FastAPI's parameter
# and dependency resolution, which costs more than the prediction itself (measured in
# benchmarks/results/predict.md). The API route below has the same path and only documents the
# endpoint in OpenAPI; requests never reach it. A dependency added to this router (such as
# authentication) must therefore also be called inside `predict`.
router.add_route("/models/{model_id}/predict", predict, methods=["POST"])


@router.post(
    "/models/{model_id}/predict",
    openapi_extra=PREDICT_OPENAPI,
    response_class=Response,
    summary="Predict",
    name="predict",
)
async def _predict_documented(
    model_id: str,
    request: Request,
    probabilities: bool | None = Query(
        None,
        description="also return `probabilities` (rows sum to 1, columns in the order of the "
        "model's classes) for a calibrated model; 422 for one without calibration. A JSON body "
        'may say `"probabilities": true` instead; both with different values is a 422.',
    ),
) -> Response:
    """Predict instances sent in the body: JSON sparse instances (indices in the training
    file's numbering), JSON dense rows, or ``text/plain`` LIBSVM lines."""
    return await predict(request)  # pragma: no cover - shadowed by the route above


async def read_body(request: Request) -> bytearray:
    """The request body in one buffer, grown as it arrives (Starlette's `body()` holds the
    chunks and their join at once: twice the body). BodySizeLimit has bounded its size. The
    buffer follows the bytes received, never the declared length: a client may announce 60 MB
    and send nothing for BODY_TIMEOUT_S, and a buffer of the announced size, zeroed at once,
    was held meanwhile (sixteen such requests held 960 MB)."""
    buffer = bytearray()
    async for chunk in request.stream():
        buffer += chunk  # grown in place (realloc), about 1/8 over what it holds
    return buffer


def _predict_bytes(
    body: bytes, content_type: str, model, max_batch: int, probabilities: bool | None
) -> tuple[bytes, int]:
    """The response body, and how many instances it predicts."""
    payload = predict_body(body, content_type, model, max_batch, probabilities)
    n = len(payload["values"] if "values" in payload else payload["labels"])
    return dumps(payload), n


# --------------------------------------------------------------------------------------------
# Metadata


@router.get("/models", response_model=Page[ModelOut])
def list_models(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
    dataset_id: str | None = None,
    job_id: str | None = None,
):
    """Stored models, newest first; filter by the dataset or job that produced them."""
    query = select(Model).options(Model.without_weights())
    if dataset_id is not None:
        query = query.where(Model.dataset_id == dataset_id)
    if job_id is not None:
        query = query.where(Model.job_id == job_id)
    # the JSON a model keeps beside its weights: class names, their class weights, calibration
    bulk = (Model.feature_names, Model.classes, Model.params, Model.calibration, Model.selection)
    items, next_cursor = sized_page(session, query, Model.id, limit, cursor, bulk=bulk)
    return Page[ModelOut](items=[ModelOut.model_validate(m) for m in items], next=next_cursor)


@router.get("/models/{model_id}", response_model=ModelOut)
def get_model(model: ModelDep):
    return ModelOut.model_validate(model)


@router.get("/models/{model_id}/lineage", response_model=LineageOut)
def get_model_lineage(model: ModelDep, session: SessionDep):
    """Where the model came from: its datasets (with content hashes), parameters, solver
    outcome, metrics, the code's version and commit, and its registered names."""
    return lineage_service.view(session, model)


@router.delete("/models/{model_id}", status_code=204)
def delete_model(model_id: str, request: Request, db: DatabaseDep, settings: SettingsDep):
    """Delete a model with its prediction runs and their CSV files (409 while a run is active
    or while a registry alias points at it; its unaliased registry versions go with it)."""
    with db.write() as session:
        ref = model_id
        model_id = registry.resolve(session, ref) if registry.is_reference(ref) else ref
        # locked first: a version, an alias or a run made meanwhile waits for the deletion (and
        # finds no model), or is seen by the checks below
        model = (
            session.get(Model, model_id, with_for_update=True, options=[Model.without_weights()])
            if model_id
            else None
        )
        if model is None:
            raise not_found("Model", ref)
        aliases = registry.aliases_pointing_at(session, model_id)
        if aliases:
            raise ProblemError(
                409,
                "Model in use",
                f"registry aliases point at this model: {', '.join(aliases)}; move or delete "
                "them first",
                aliases=aliases,
            )
        active = session.scalar(
            select(PredictionRun.id)
            .where(PredictionRun.model_id == model_id, PredictionRun.status.in_(runs.ACTIVE))
            .limit(1)
        )
        if active is not None:
            raise ProblemError(
                409,
                "Model in use",
                f"prediction run {active!r} on this model is still active; retry when it ends",
            )
        run_ids = runs.run_ids_of(session, model_id)
        session.execute(delete(PredictionRun).where(PredictionRun.model_id == model_id))
        session.delete(model)
    model_cache(request.app).evict(model_id)
    runs.delete_files(settings, run_ids)
    return Response(status_code=204)


# --------------------------------------------------------------------------------------------
# Evaluation and export


@router.post(
    "/models/{model_id}/evaluate",
    response_model=ClassificationEvaluation | RegressionEvaluation,
)
def evaluate_model(
    body: DatasetRef,
    model: ModelDep,
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
):
    """Accuracy and confusion matrix (classifiers), or MSE and R² (regressors), on a stored
    dataset of at most MAX_EVALUATE_ROWS rows; a tenant runs at most MAX_EVALUATIONS_PER_TENANT
    at once (429 beyond)."""
    dataset = named_dataset(session, body.dataset_id)
    check_rows(dataset, settings.max_evaluate_rows)
    with request.app.state.evaluation_slots.hold():  # before any row is read
        loaded = unpacked(request.app, session, model.id)  # closes the session meanwhile
        try:
            check_labels(loaded, dataset)
            source = DatasetSource.of(settings, dataset, tries=1)  # a 503 within the timeout
            source.check(loaded)
            report = evaluate(loaded, source)
        except DatasetMismatch as exc:
            raise ProblemError(422, "Dataset not compatible", str(exc)) from None
        except FileNotFoundError:
            raise deleted_meanwhile(dataset.id) from None
    return {
        "model_id": model.id,
        "dataset_id": dataset.id,
        **report,
        "ignored_features": source.features_beyond(loaded),
    }


@router.get(
    "/models/{model_id}/export",
    responses={
        200: {
            "content": {
                "text/plain": {},
                "application/json": {},
                "application/octet-stream": {},
            },
            "description": "the model file",
        }
    },
)
def export_model(
    model: ModelDep,
    session: SessionDep,
    settings: SettingsDep,
    request: Request,
    format: Literal["liblinear", "json", "onnx", "skops"] = "liblinear",
    dtype: Annotated[
        Literal["float64", "float32"], Query(description="onnx: the input's element type")
    ] = "float64",
):
    """The model as a LIBLINEAR model file (``liblinearutil.load_model`` reads it), as JSON, as
    an ONNX graph (input ``input`` [N, n_features]; outputs ``label`` and
    ``decision_values``), or as a fitted scikit-learn LinearSVC/LinearSVR in a skops file."""
    loaded = unpacked(request.app, session, model.id)
    if format == "json":
        return TimedStreamingResponse(
            export_service.json_chunks(loaded),
            send_timeout=settings.send_timeout_s,
            media_type="application/json",
        )
    if format in ("onnx", "skops"):
        export_service.check_dense_size(loaded, format)
        if format == "skops":
            content = export_service.skops_bytes(loaded)
        else:
            try:
                content = export_service.onnx_bytes(loaded, dtype)
            except ValueError as exc:  # a float32 graph of weights beyond float32's range
                raise ProblemError(422, "Not exportable", str(exc)) from None
        return Response(
            content,
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{model.id}.{format}"'},
        )
    chunks = export_service.liblinear_chunks(loaded)
    try:
        first = next(chunks)  # the header: whether the model can be written at all
    except export_service.NotExportable as exc:
        raise ProblemError(422, "Not exportable", str(exc)) from None
    return TimedStreamingResponse(
        chain([first], chunks),
        send_timeout=settings.send_timeout_s,
        media_type="text/plain",
        headers={"Content-Disposition": f'attachment; filename="{model.id}.model"'},
    )
