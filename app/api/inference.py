"""The Open Inference Protocol (v2, as KServe, Triton and Seldon speak it) over the stored models.

    GET  /v2                                         server metadata
    GET  /v2/health/live, /v2/health/ready           health (open, like /healthz)
    GET  /v2/models/{name}[/versions/{v}]            model metadata
    GET  /v2/models/{name}[/versions/{v}]/ready      model readiness
    POST /v2/models/{name}[/versions/{v}]/infer      inference

``{name}`` is a registered name (its latest version), ``name@alias``, or a model id;
``versions/{v}`` picks version v of a registered name. Model routes need a key with the
`predict` scope (as v1 predict); errors are the protocol's ``{"error": "..."}``. The model has
one input ``input`` (FP64; FP32 and integer types are accepted too), shape [-1, n_features],
and the outputs ``label`` [-1] and ``decision_values`` [-1, k] (k = 1 for binary models and
regressors, where ``label`` is the predicted value), and for a calibrated classifier
``probabilities`` [-1, n_classes] (rows summing to 1, columns in the order of its classes).
See `services.tensors` for the request's bounds and the sparse and binary extensions.
"""

from __future__ import annotations

import numpy as np
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from app.api.model_lookup import ModelNotFound, load_model
from app.auth import authenticate
from app.deps import check_header_once
from app.errors import ProblemError
from app.schemas.common import decimal
from app.schemas.registry import MAX_VERSION
from app.services.prediction import (
    InvalidInstances,
    _chunks,
    decision_function,
    dumps,
    finite,
    probabilities_of,
)
from app.services.tensors import OUTPUTS, decision_dense, parse_infer

router = APIRouter(tags=["inference protocol (v2)"])
NAMES = [*OUTPUTS, "probabilities"]  # the outputs a request may name (the last when calibrated)
INLINE_BODY_BYTES = 64 * 1024
EXTENSIONS = ["binary_tensor_data", "margin_sparse_input"]
_ERROR_SCHEMA = {"type": "object", "required": ["error"],
                 "properties": {"error": {"type": "string"}}}  # fmt: skip
_ERROR = {"application/json": {"schema": _ERROR_SCHEMA}}


def _error_doc(*statuses: int) -> dict:
    text = {400: "a malformed request", 401: "no API key, or an unknown one",
            403: "the key lacks the predict scope", 404: "no such model",
            413: "the request is over a limit", 429: "over the tenant's request rate",
            503: "not ready"}  # fmt: skip
    return {s: {"description": text[s], "content": _ERROR} for s in statuses}


MODEL_ERRORS = _error_doc(401, 403, 404, 429, 503)


def error(status: int, message: str) -> ProblemError:
    return ProblemError(status, message, message)  # shaped {"error": ...} by app.errors


def model_ref(request: Request) -> tuple[str, str | None]:
    """(reference, version as asked) of a /v2/models path."""
    name = request.path_params["model_name"]
    version = request.path_params.get("model_version")
    if version is None:
        return name, None
    number = decimal(version, MAX_VERSION)
    if number is None or "@" in name:
        raise error(404, f"model {name!r} has no version {version!r}")
    return f"{name}@v{number}", version


async def _model(request: Request):
    principal = await authenticate(request, "predict")
    ref, version = model_ref(request)
    try:
        return await load_model(request, principal, ref, latest=True), version
    except ModelNotFound:
        raise error(404, f"no model {ref!r}") from None


def _label_type(model) -> str:
    if model.is_regressor:
        return "FP64"
    if any(isinstance(c, str) for c in model.classes):
        return "BYTES"  # text class names
    return "INT64" if all(float(c).is_integer() for c in model.classes) else "FP64"


@router.get("/v2", summary="Server metadata")
def server_metadata(request: Request) -> dict:
    return {"name": "margin", "version": request.app.version, "extensions": EXTENSIONS}


@router.get("/v2/health/live", summary="Server liveness")
def server_live() -> dict:
    return {"live": True}


@router.get("/v2/health/ready", summary="Server readiness", responses=_error_doc(503))
def server_ready(request: Request) -> dict:
    try:
        request.app.state.db.ping()
    except Exception:
        raise error(503, "the database is unreachable") from None
    return {"ready": True}


async def model_metadata(request: Request) -> Response:
    model, version = await _model(request)
    k = model.coef.shape[0]
    return _json({
        "name": request.path_params["model_name"],
        "versions": [version or model.id],
        "platform": "margin-linear",
        "inputs": [{"name": "input", "datatype": "FP64", "shape": [-1, model.n_features]}],
        "outputs": [
            {"name": "label", "datatype": _label_type(model), "shape": [-1]},
            {"name": "decision_values", "datatype": "FP64", "shape": [-1, k]},
        ] + ([{"name": "probabilities", "datatype": "FP64", "shape": [-1, len(model.classes)]}]
             if model.calibration is not None else []),  # fmt: skip
        "parameters": {
            "model_id": model.id,
            "kind": model.kind,
            "classes": model.classes,
            "accepted_datatypes": ["FP64", "FP32", "INT64", "INT32"],
            "feature_names": model.feature_names,
        },
    })


async def model_ready(request: Request) -> Response:
    await _model(request)
    return _json({"name": request.path_params["model_name"], "ready": True})


def _json(document: dict) -> Response:
    return Response(dumps(document), media_type="application/json")


async def infer(request: Request) -> Response:
    model, version = await _model(request)
    from app.api.models import read_body

    try:  # this route skips the routers' dependencies: their check is called here
        check_header_once(request.headers, "inference-header-content-length")
    except ProblemError as exc:
        raise error(400, exc.detail) from None
    body = bytes(await read_body(request))
    header = request.headers.get("inference-header-content-length")
    max_batch = request.app.state.settings.max_predict_batch
    args = (body, header, model, max_batch, request.path_params["model_name"], version)
    try:
        if len(body) <= INLINE_BODY_BYTES:
            content = _infer_bytes(*args)
        else:
            content = await run_in_threadpool(_infer_bytes, *args)
    except InvalidInstances as exc:
        raise error(400 if exc.status == 422 else exc.status, str(exc)) from None
    return Response(content, media_type="application/json")


def _infer_bytes(body, header, model, max_batch, name, version) -> bytes:
    parsed = parse_infer(body, header, model, max_batch)
    if parsed.X is not None:
        D = decision_dense(model, parsed.X)
    else:
        parts = [decision_function(model, X) for X in _chunks(parsed.sparse, model.n_features)]
        D = parts[0] if len(parts) == 1 else np.concatenate(parts)
    D = finite(D)
    outputs = []
    for output in parsed.outputs:
        if output == "label":
            if model.is_regressor:
                data, datatype = D[:, 0], "FP64"
            else:
                data, datatype = _labels(model, D), _label_type(model)
            outputs.append({"name": "label", "datatype": datatype, "shape": [D.shape[0]],
                            "data": data})  # fmt: skip
        elif output == "decision_values":
            outputs.append({"name": "decision_values", "datatype": "FP64",
                            "shape": list(D.shape), "data": D.ravel()})  # fmt: skip
        else:
            P = probabilities_of(model, D)
            outputs.append({"name": "probabilities", "datatype": "FP64",
                            "shape": list(P.shape), "data": P.ravel()})  # fmt: skip
    response = {"model_name": name, "model_version": version or model.id, "outputs": outputs}
    if parsed.id is not None:
        response["id"] = parsed.id
    return dumps(response)


def _labels(model, D):
    index = (D[:, 0] > 0).astype(np.intp) if D.shape[1] == 1 else D.argmax(axis=1)
    if _label_type(model) == "BYTES":
        return [model.classes[i] for i in index.tolist()]
    classes = np.asarray(model.classes, dtype=np.float64)
    labels = classes[index]
    return labels.astype(np.int64) if _label_type(model) == "INT64" else labels


INFER_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "type": "object",
                    "required": ["inputs"],
                    "properties": {
                        "id": {"type": "string"},
                        "parameters": {"type": "object"},
                        "inputs": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": 1,
                            "items": {
                                "type": "object",
                                "required": ["name", "shape", "datatype"],
                                "properties": {
                                    "name": {"type": "string"},
                                    "shape": {"type": "array", "items": {"type": "integer"}},
                                    "datatype": {"type": "string"},
                                    "parameters": {"type": "object"},
                                    "data": {"type": "array"},
                                },
                            },
                        },
                        "outputs": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["name"],
                                "properties": {"name": {"type": "string", "enum": NAMES}},
                            },
                        },
                    },
                },
                "example": {
                    "inputs": [{"name": "input", "shape": [1, 3], "datatype": "FP64",
                                "data": [0.5, 0.0, 1.0]}]
                },  # fmt: skip
            }
        },
    },
}
_INFER_OK = {"description": "the outputs", "content": {"application/json": {"schema": {
    "type": "object", "required": ["model_name", "outputs"],
    "properties": {"model_name": {"type": "string"}, "model_version": {"type": "string"},
                   "id": {"type": "string"}, "outputs": {"type": "array"}}}}}}  # fmt: skip

# The model routes are plain Starlette routes (as v1 predict: no FastAPI resolution on the hot
# path), registered before the documented FastAPI routes of the same paths, which they shadow.
for suffix in ("", "/versions/{model_version}"):
    base = "/v2/models/{model_name}" + suffix
    router.add_route(base + "/infer", infer, methods=["POST"])
    router.add_route(base + "/ready", model_ready, methods=["GET"])
    router.add_route(base, model_metadata, methods=["GET"])


def _documented(path: str, method: str, name: str, summary: str, ok: dict, extra=None, errs=()):
    if "{model_version}" in path:

        async def endpoint(model_name: str, model_version: str):  # pragma: no cover
            raise error(500, "not reached")  # shadowed by the routes above
    else:

        async def endpoint(model_name: str):  # pragma: no cover
            raise error(500, "not reached")  # shadowed by the routes above

    endpoint.__name__ = name
    responses = {200: ok, **MODEL_ERRORS, **_error_doc(*errs)}
    router.add_api_route(path, endpoint, methods=[method], name=name, summary=summary,
                         responses=responses, openapi_extra=extra)  # fmt: skip


_META_OK = {"description": "the model's metadata", "content": {"application/json": {"schema": {
    "type": "object", "required": ["name", "inputs", "outputs"]}}}}  # fmt: skip
_READY_OK = {"description": "the model is ready", "content": {"application/json": {"schema": {
    "type": "object", "required": ["ready"]}}}}  # fmt: skip
for suffix, tag in (("", ""), ("/versions/{model_version}", "_version")):
    base = "/v2/models/{model_name}" + suffix
    _documented(base, "GET", f"model_metadata{tag}", "Model metadata", _META_OK)
    _documented(base + "/ready", "GET", f"model_ready{tag}", "Model readiness", _READY_OK)
    _documented(base + "/infer", "POST", f"model_infer{tag}", "Inference", _INFER_OK, INFER_DOC,
                (400, 413))  # fmt: skip
