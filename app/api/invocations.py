"""MLflow's scoring protocol: ``POST /v1/models/{model}/invocations``.

Bodies as MLflow's model server reads them — JSON ``{"inputs": ...}`` (rows, records, or
columns by name), ``{"instances": ...}`` (rows or records), ``{"dataframe_split": {"columns",
"data"}}``, ``{"dataframe_records": [...]}``, or ``text/csv`` with a header row — answered with
``{"predictions": [...]}``: labels for classifiers, values for regressors. Named columns are
matched to the model's feature names (a model trained on a CSV or Parquet file); without names,
a row holds the model's n_features values in order. ``{model}`` is a model id, ``name@alias`` or
``name@vN``; authentication, tenancy and limits are those of v1 predict, and errors are MLflow's
``{"error_code", "message"}``.

Bodies up to SMALL_BODY (1 MB) are parsed whole once their lists and objects are counted (at
most three per instance the request may hold), and a column or a ``dataframe_split`` is
counted before its rows become records; larger bodies are read an instance at a time.
"""

from __future__ import annotations

import csv

import numpy as np
import orjson
from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool

from app.api.model_lookup import ModelNotFound, load_model
from app.auth import authenticate
from app.errors import ProblemError
from app.services.predict_input import InvalidInstances, batch_limit, json_type
from app.services.predict_json import items_rows, json_rows
from app.services.prediction import (
    _chunks,
    decision_function,
    dumps,
    finite,
    labels_from_decision,
)
from app.services.tensors import decision_dense

router = APIRouter(tags=["models"])
SMALL_BODY = 1 << 20  # bodies parsed whole; larger ones are read an instance at a time
STREAMED = {"instances": "instances", "inputs": "instances", "dataframe_records": "records"}
SHAPES = ("inputs", "instances", "dataframe_split", "dataframe_records")
CONTAINERS_PER_ROW = 3  # a sparse instance: {"indices": [...], "values": [...]}
SCAN_BYTES = 1 << 20  # a CSV body's lines are counted this many bytes at a time
LF, CR = ord("\n"), ord("\r")
BOM = "\ufeff".encode()  # the UTF-8 byte order mark


async def invocations(request: Request) -> Response:
    principal = await authenticate(request, "predict")
    ref = request.path_params["model_id"]
    try:
        model = await load_model(request, principal, ref)
    except ModelNotFound:
        raise ProblemError(404, "Model not found", f"no model {ref!r}") from None
    from app.api.models import read_body

    body = bytes(await read_body(request))
    media = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    max_batch = request.app.state.settings.max_predict_batch
    try:
        if len(body) <= 64 * 1024:
            content = _predict(body, media, model, max_batch)
        else:
            content = await run_in_threadpool(_predict, body, media, model, max_batch)
    except InvalidInstances as exc:
        status = 400 if exc.status == 422 else exc.status
        raise ProblemError(status, "Invalid input", str(exc)) from None
    return Response(content, media_type="application/json")


def _predict(body: bytes, media: str, model, max_batch: int) -> bytes:
    if media == "text/csv":
        D = decision_dense(model, _csv_matrix(body, model, max_batch))
    elif media in ("", "application/json") or media.endswith("+json"):
        rows = _json_rows(body, model, max_batch)
        parts = [decision_function(model, X) for X in _chunks(rows, model.n_features)]
        D = parts[0] if len(parts) == 1 else np.concatenate(parts)
    else:
        raise InvalidInstances(
            f"unsupported content type '{media}': send application/json or text/csv", 415
        )
    D = finite(D)
    predictions = D[:, 0] if model.is_regressor else labels_from_decision(model, D)
    return dumps({"predictions": predictions})


def _json_rows(body: bytes, model, max_batch: int):
    if len(body) > SMALL_BODY:
        return json_rows(body, model, max_batch, STREAMED)
    _count_containers(body, batch_limit(model, max_batch))
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInstances(f"the body is not valid JSON: {exc}") from None
    keys = [k for k in SHAPES if isinstance(doc, dict) and k in doc]
    if len(keys) != 1 or set(doc) - {keys[0], "params"}:
        raise InvalidInstances(
            "expected a JSON object with exactly one of 'inputs', 'instances', "
            "'dataframe_split' or 'dataframe_records'"
        )
    key, value = keys[0], doc[keys[0]]
    if key == "dataframe_split":
        return _split_rows(value, model, max_batch)
    if key == "inputs" and isinstance(value, dict):  # columns by name
        return _columns_rows(value, model, max_batch)
    if not isinstance(value, list):
        raise InvalidInstances(f"'{key}' must be a list, got {json_type(value)}")
    records = key == "dataframe_records" or (bool(value) and isinstance(value[0], dict))
    return items_rows("records" if records else "instances", key, value, model,
                      max_batch=max_batch)  # fmt: skip


def _count_containers(body: bytes, limit: int) -> None:
    """A body parsed whole holds at most the lists and objects of `limit` instances (three for a
    sparse one), counted on its bytes first: 1 MB of ``[]`` or ``{}`` was 350,000 Python
    objects (33 MB) before any instance was counted."""
    found = body.count(b"[") + body.count(b"{")
    if found > CONTAINERS_PER_ROW * limit + 16:
        raise InvalidInstances(
            f"too many JSON lists and objects ({found}) for at most {limit} instances per "
            "request (MAX_PREDICT_BATCH); split the batch",
            413,
        )


def _too_many_rows(n: int, limit: int) -> InvalidInstances:
    return InvalidInstances(
        f"too many instances: {n}, at most {limit} per request (MAX_PREDICT_BATCH); split the "
        "batch",
        413,
    )


def _split_rows(split, model, max_batch: int):
    if not isinstance(split, dict) or not isinstance(split.get("data"), list):
        raise InvalidInstances("'dataframe_split' must be an object with 'data' (and 'columns')")
    columns, data = split.get("columns"), split["data"]
    if len(data) > batch_limit(model, max_batch):  # counted before a record is made of each
        raise _too_many_rows(len(data), batch_limit(model, max_batch))
    if columns is None or _positional(columns, model):
        return items_rows("instances", "dataframe_split.data", data, model, max_batch=max_batch)
    if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
        raise InvalidInstances("dataframe_split.columns: expected a list of names")
    _refuse_repeated(columns, "dataframe_split.columns")
    records = []
    for i, row in enumerate(data):
        if not isinstance(row, list) or len(row) != len(columns):
            raise InvalidInstances(f"dataframe_split.data[{i}]: expected {len(columns)} values")
        records.append(dict(zip(columns, row, strict=True)))
    return items_rows("records", "dataframe_split.data", records, model, max_batch=max_batch)


def _columns_rows(columns: dict, model, max_batch: int):
    lengths = {len(v) if isinstance(v, list) else -1 for v in columns.values()}
    if len(lengths) != 1 or -1 in lengths:
        raise InvalidInstances("'inputs' by column: every column must be a list of one length")
    n = lengths.pop()
    if n > batch_limit(model, max_batch):  # 500,000 records of 1 MB of zeros took 100 MB
        raise _too_many_rows(n, batch_limit(model, max_batch))
    records = [{name: values[i] for name, values in columns.items()} for i in range(n)]
    return items_rows("records", "inputs", records, model, max_batch=max_batch)


def _positional(columns, model) -> bool:
    """Columns that cannot be feature names: the model has none and they are n_features."""
    return model.feature_names is None and isinstance(columns, list) and (
        len(columns) == model.n_features
    )


def _csv_matrix(body: bytes, model, max_batch: int) -> np.ndarray:
    """The rows of a CSV body, placed in the model's columns. Its header names at most the
    model's features, and it holds at most the batch's rows, each of at most a value per column:
    all counted on the bytes before anything is split or parsed (a 60 MB header or row took
    1.4-1.7 GB). Empty lines are skipped and not counted; a field may be quoted (RFC 4180).
    A UTF-8 byte order mark before the header (spreadsheets write one) is no part of it."""
    first = len(BOM) if body.startswith(BOM) else 0  # skipped, not copied off: 64 MB bodies
    end = body.find(b"\n")
    end = len(body) if end < 0 else end
    commas = body.count(b",", first, end)
    # the commas inside the model's (quoted) names are summed only when the plain count is over
    if commas + 1 > model.n_features and commas + 1 > model.n_features + _name_commas(model):
        raise InvalidInstances(
            f"text/csv: the header has more columns than the model's {model.n_features} features"
        )
    names = _header_names(body[first:end])
    _refuse_repeated(names, "text/csv: the header")
    if model.feature_index is not None and all(n in model.feature_index for n in names):
        order = [model.feature_index[n] for n in names]
    elif len(names) == model.n_features and not _any_feature(names, model):
        order = list(range(model.n_features))  # names that are not the model's: in order
    else:
        unknown = [n for n in names if model.feature_index is None or n not in model.feature_index]
        raise InvalidInstances(
            f"text/csv: the header's columns are not the model's features (e.g. {unknown[0]!r})"
        )
    starts = _row_starts(body, end + 1, batch_limit(model, max_batch))
    if not starts:
        raise InvalidInstances("text/csv: expected at least one row")
    if body.count(b",", end + 1) > len(starts) * (len(names) - 1):
        raise InvalidInstances(f"text/csv: a row holds more values than the {len(names)} columns")
    rows = (_line(body, s) for s in starts)
    try:
        values = np.loadtxt(rows, delimiter=",", quotechar='"', ndmin=2, dtype=np.float64)
    except ValueError as exc:
        raise InvalidInstances(f"text/csv: {exc}") from None
    if values.shape[1] != len(names) or not np.isfinite(values).all():
        raise InvalidInstances("text/csv: every row needs a finite number in each column")
    X = np.zeros((values.shape[0], model.n_features))
    X[:, order] = values
    return X


def _any_feature(names: list[str], model) -> bool:
    """Whether a header names any of the model's features: its columns are then placed by name,
    and one that is not a feature is refused (read in the model's order, a header of features
    reordered and one misspelt put every column in another's place)."""
    index = model.feature_index or {}
    return any(name in index for name in names)


def _refuse_repeated(names: list[str], where: str) -> None:
    """A column named twice: its values were placed one over the other and the first silently
    lost (a header naming 'age' twice and a feature not at all was answered 200)."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InvalidInstances(f"{where} names the column {name[:80]!r} more than once")
        seen.add(name)


def _name_commas(model) -> int:
    """Commas inside the model's feature names: a header quoting "a,b" (a name a CSV upload
    may hold) has one comma more than columns, and was refused as too many columns."""
    return sum(name.count(",") for name in model.feature_names or [])


def _header_names(line: bytes) -> list[str]:
    """The column names of a header line (its commas already counted), quoted or not."""
    try:
        row = next(csv.reader([line.decode("utf-8", "replace").rstrip("\r")]), [])
    except csv.Error as exc:  # a name over the csv module's field size limit (128 KB)
        raise InvalidInstances(f"text/csv: the header: {exc}") from None
    return [name.strip() for name in row] or [""]


def _line(body: bytes, start: int) -> bytes:
    """The line of `body` that begins at `start`, with its LF: the parser joins a quoted field
    that runs over lines, and without the LF `"1<LF>2"` was read as the number 12."""
    end = body.find(b"\n", start)
    return body[start:] if end < 0 else body[start : end + 1]


def _row_starts(body: bytes, start: int, limit: int) -> list[int]:
    """Where the lines of body[start:] that hold anything begin (`start` follows a LF): an empty
    line ("" or a lone CR before its LF) is skipped, neither counted against the `limit` rows
    (413 beyond) nor handed to the parser (60 MB of empty lines took it 5 s). Found on the bytes
    a megabyte at a time: an index per line of 64 MB of empty lines would take 512 MB."""
    data = np.frombuffer(body, np.uint8)
    starts: list[int] = []
    for lo in range(start, data.size, SCAN_BYTES):
        hi = min(lo + SCAN_BYTES, data.size)
        here, line_start = data[lo:hi], data[lo - 1 : hi - 1] == LF
        after = data[lo + 1 : hi + 1]
        if after.size < here.size:  # the body's end closes its last line
            after = np.append(after, LF)
        filled = line_start & (here != LF) & ((here != CR) | (after != LF))
        if len(starts) + np.count_nonzero(filled) > limit:
            raise InvalidInstances(f"too many rows: at most {limit} per request", 413)
        starts += (np.flatnonzero(filled) + lo).tolist()
    return starts


router.add_route("/models/{model_id}/invocations", invocations, methods=["POST"])
_MLFLOW_ERROR = {"application/json": {"schema": {
    "type": "object", "required": ["error_code", "message"],
    "properties": {"error_code": {"type": "string"}, "message": {"type": "string"}}}}}  # fmt: skip
INVOCATIONS_DOC = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {"type": "object"},
                "example": {"dataframe_split": {"columns": ["age", "chol"],
                                                "data": [[0.5, 0.2]]}},
            },
            "text/csv": {"schema": {"type": "string"}, "example": "age,chol\n0.5,0.2\n"},
        },
    },
}  # fmt: skip


@router.post(
    "/models/{model_id}/invocations",
    openapi_extra=INVOCATIONS_DOC,
    response_class=Response,
    summary="Invocations (MLflow scoring protocol)",
    name="invocations",
    responses={
        200: {"description": "predictions", "content": {"application/json": {"schema": {
            "type": "object", "required": ["predictions"],
            "properties": {"predictions": {"type": "array"}}}}}},
        **{s: {"description": d, "content": _MLFLOW_ERROR} for s, d in (
            (400, "malformed input"), (401, "no or unknown API key"),
            (403, "the key lacks the predict scope"), (404, "no such model"),
            (413, "over a limit"), (415, "neither JSON nor text/csv"),
            (429, "over the request rate"), (503, "the database is unavailable"))},
    },
)  # fmt: skip
async def _invocations_documented(model_id: str, request: Request) -> Response:
    """MLflow-shaped scoring: inputs, instances, dataframe_split, dataframe_records or CSV."""
    return await invocations(request)  # pragma: no cover - shadowed by the route above
