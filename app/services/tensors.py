"""Reading an Open Inference Protocol (v2) infer request into rows, bounded like predict.

The request is ``{"id"?, "parameters"?, "inputs": [tensor], "outputs"?: [{"name"}]}`` with one
input tensor ``{"name", "shape", "datatype", "data"}`` (any name): shape ``[N, n_features]`` or
``[n_features]``, datatype FP64, FP32 or an integer type, ``data`` flat or nested in row-major
order. Two extensions:

- binary tensor data (as Triton's clients send it): the ``Inference-Header-Content-Length``
  header gives the JSON part's length, the tensor's raw little-endian bytes follow it, and the
  tensor's ``parameters.binary_data_size`` their length;
- sparse input: ``"parameters": {"sparse": true}``, shape ``[N]``, and ``data`` a list of
  ``{"indices": [...], "values": [...]}`` in the training file's numbering (as v1 predict).

Bounds: the body is already limited (MAX_PREDICT_BODY_MB); the declared shape is checked
against the batch limit and the model before any data is converted, a large body's ``data``
array is converted by numpy from its bytes (8 bytes a value, no Python objects), and its count
must match the shape. The JSON that orjson parses whole (the body without its ``data`` array,
or the part before binary data) is at most SMALL_JSON: 30 MB of ``{}`` elsewhere in the body
took a gigabyte of Python objects.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import orjson

from app.schemas.common import decimal
from app.services.predict_input import InvalidInstances, batch_limit, json_type
from app.services.predict_json import SMALL_JSON, container_end, items_rows
from app.services.prediction import LinearModel

OUTPUTS = ("label", "decision_values")
DTYPES = {
    "FP64": "<f8", "FP32": "<f4", "INT64": "<i8", "INT32": "<i4", "INT16": "<i2", "INT8": "i1",
    "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8",
}  # fmt: skip
_DATA = re.compile(rb'"data"[ \t\r\n]*:[ \t\r\n]*\[')
_BRACKETS = bytes.maketrans(b"[]", b"  ")


class InferRequest:
    """A parsed infer request: ``X`` dense (N, n_features) or ``sparse`` rows, and the
    requested outputs."""

    def __init__(self, request_id, X=None, sparse=None, outputs=OUTPUTS):
        self.id = request_id
        self.X = X
        self.sparse = sparse
        self.outputs = outputs


def parse_infer(body: bytes, header_length: str | None, model: LinearModel, max_batch: int):
    """The infer request of `body` (with `header_length`: the binary extension)."""
    binary = b""
    if header_length is not None:
        length = decimal(header_length, len(body))
        if length is None:
            raise InvalidInstances("Inference-Header-Content-Length: not a length within the body")
        binary = memoryview(body)[length:]
        body = body[:length]
        if binary and len(body) > SMALL_JSON:
            raise InvalidInstances(
                f"Inference-Header-Content-Length: the JSON part before binary data is at most "
                f"{SMALL_JSON // 1024} KB, got {len(body)} bytes",
                status=413,
            )
    data_span = None
    if len(body) > SMALL_JSON and not binary:
        body, data_span = _cut_data(body)
    doc = _loads(body)
    if not isinstance(doc, dict) or not isinstance(doc.get("inputs"), list):
        raise InvalidInstances("expected a JSON object with an 'inputs' list")
    if len(doc["inputs"]) != 1:
        raise InvalidInstances(f"expected exactly one input tensor, got {len(doc['inputs'])}")
    tensor = doc["inputs"][0]
    if not isinstance(tensor, dict):
        raise InvalidInstances(f"inputs[0]: expected a tensor object, got {json_type(tensor)}")
    outputs = _outputs(doc.get("outputs"), model_outputs(model))
    request_id = doc.get("id") if isinstance(doc.get("id"), str) else None
    params = tensor.get("parameters") or {}
    if isinstance(params, dict) and params.get("sparse") is True:
        return InferRequest(request_id, sparse=_sparse(tensor, model, max_batch), outputs=outputs)
    shape = _shape(tensor, model, max_batch)
    values = _values(tensor, shape, binary, data_span, params)
    return InferRequest(request_id, X=values.reshape(shape[0], model.n_features), outputs=outputs)


def _loads(body: bytes):
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInstances(f"the body is not valid JSON: {exc}") from None


def _cut_data(body: bytes) -> tuple[bytes, tuple[bytes, int, int]]:
    """A large body with its one ``data`` array replaced by ``null``, and that array's bytes.
    What is left is parsed whole, so it must be small."""
    matches = _DATA.finditer(body)  # two at most are looked at: a body may hold millions
    first, second = next(matches, None), next(matches, None)
    if first is None or second is not None:
        raise InvalidInstances(
            f"a body over {SMALL_JSON // 1024} KB must hold exactly one tensor 'data' array"
        )
    start = first.end() - 1
    end = container_end(body, start)
    rest = start + len(b"null") + len(body) - end
    if rest > SMALL_JSON:
        raise InvalidInstances(
            f"a request apart from its data array is at most {SMALL_JSON // 1024} KB, got "
            f"{rest} bytes",
            status=413,
        )
    return body[:start] + b"null" + body[end:], (body, start, end)


def model_outputs(model: LinearModel) -> tuple[str, ...]:
    """The model's outputs: ``label`` and ``decision_values``, and ``probabilities`` when it is
    calibrated."""
    return OUTPUTS + (("probabilities",) if model.calibration is not None else ())


def _outputs(requested, available: tuple[str, ...]) -> tuple[str, ...]:
    if requested is None:
        return available
    if not isinstance(requested, list) or not requested:
        raise InvalidInstances("'outputs' must be a non-empty list of {\"name\": ...}")
    names = []
    for i, entry in enumerate(requested):
        name = entry.get("name") if isinstance(entry, dict) else None
        if name not in available:
            raise InvalidInstances(
                f"outputs[{i}]: unknown output {name!r}; this model has {', '.join(available)}"
            )
        if name in names:  # each one named is computed and sent: 2,000 names made 400 MB
            raise InvalidInstances(f"outputs[{i}]: {name!r} is named twice")
        names.append(name)
    return tuple(names)


def _shape(tensor: dict, model: LinearModel, max_batch: int) -> tuple[int, int]:
    shape = tensor.get("shape")
    if not isinstance(shape, list) or not all(type(v) is int and v >= 0 for v in shape):
        raise InvalidInstances("inputs[0].shape: expected a list of non-negative integers")
    if len(shape) == 1:
        shape = [1, *shape]
    if len(shape) != 2 or shape[1] != model.n_features:
        raise InvalidInstances(
            f"inputs[0].shape: expected [N, {model.n_features}] (the model's features), got "
            f"{tensor.get('shape')}"
        )
    limit = batch_limit(model, max_batch)
    if shape[0] > limit:
        raise InvalidInstances(
            f"inputs[0].shape: {shape[0]} instances, more than the {limit} accepted per request",
            status=413,
        )
    if shape[0] == 0:
        raise InvalidInstances("inputs[0].shape: expected at least one instance")
    return shape[0], shape[1]


def _values(tensor: dict, shape, binary, data_span, params) -> np.ndarray:
    datatype = tensor.get("datatype")
    if datatype not in DTYPES:
        raise InvalidInstances(
            f"inputs[0].datatype: expected FP64, FP32 or an integer type, got {datatype!r}"
        )
    count = shape[0] * shape[1]
    size = params.get("binary_data_size") if isinstance(params, dict) else None
    if size is not None:
        dtype = np.dtype(DTYPES[datatype])
        if type(size) is not int or size != count * dtype.itemsize or size > len(binary):
            raise InvalidInstances(
                f"inputs[0].parameters.binary_data_size: expected {count * dtype.itemsize} bytes "
                f"of {datatype} for shape {list(shape)}"
            )
        values = np.frombuffer(binary[:size], dtype=dtype).astype(np.float64)
    elif data_span is not None:
        values = _numbers_from_bytes(*data_span, count)
    else:
        values = _numbers_from_json(tensor.get("data"), count)
    json_numbers = size is None
    if values.size != count:
        raise InvalidInstances(
            f"inputs[0].data: expected {count} numbers for shape {list(shape)}, got {values.size}"
        )
    if not np.isfinite(values).all():
        bad = int(np.flatnonzero(~np.isfinite(values))[0])
        raise InvalidInstances(f"inputs[0].data[{bad}] is not a finite number")
    if json_numbers:  # binary data holds values of its datatype by construction
        _check_range(values, datatype)
    return values


def _check_range(values: np.ndarray, datatype: str) -> None:
    """Numbers sent as JSON must be values of their declared datatype (binary data is)."""
    dtype = np.dtype(DTYPES[datatype])
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        fits = (values == np.floor(values)) & (values >= info.min) & (values <= info.max)
    elif dtype == np.float32:
        fits = np.abs(values) <= np.finfo(np.float32).max
    else:
        return
    if not fits.all():
        bad = int(np.flatnonzero(~fits)[0])
        value = float(values[bad])
        raise InvalidInstances(f"inputs[0].data[{bad}]: {value!r} is not a {datatype} value")


def _numbers_from_json(data, count: int) -> np.ndarray:
    if not isinstance(data, list):
        raise InvalidInstances(f"inputs[0].data: expected a list, got {json_type(data)}")
    flat = data
    if data and isinstance(data[0], list):
        flat = [v for row in data if isinstance(row, list) for v in row]
        if len(flat) != count or len(data) * len(data[0]) != count:
            raise InvalidInstances(f"inputs[0].data: expected {count} numbers in rows")
    if not set(map(type, flat)) <= {int, float}:
        bad = next(i for i, v in enumerate(flat) if type(v) not in (int, float))
        raise InvalidInstances(
            f"inputs[0].data[{bad}]: expected a number, got {json_type(flat[bad])}"
        )
    return np.array(flat, dtype=np.float64)


def _numbers_from_bytes(body: bytes, start: int, end: int, count: int) -> np.ndarray:
    if body.count(b",", start, end) + 1 > count:
        raise InvalidInstances(f"inputs[0].data: more than the {count} numbers of its shape")
    text = body[start:end].translate(_BRACKETS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # a stop before the end: counted
        values = np.fromstring(text, dtype=np.float64, sep=",")
    return values


def _sparse(tensor: dict, model: LinearModel, max_batch: int):
    data = tensor.get("data")
    if not isinstance(data, list):
        raise InvalidInstances("inputs[0].data: a sparse tensor's data is a list of instances")
    shape = tensor.get("shape")
    if shape not in ([len(data)], [len(data), model.n_features]):
        raise InvalidInstances(
            f"inputs[0].shape: a sparse tensor's shape is [N] or [N, {model.n_features}], N its "
            f"{len(data)} instances; got {shape!r}"
        )
    return items_rows("instances", "inputs[0].data", data, model, max_batch=max_batch)


def decision_dense(model: LinearModel, X: np.ndarray) -> np.ndarray:
    """Decision values of dense rows X (N, n_features)."""
    if model.columns is not None:
        return X[:, model.columns] @ model.coef.T + model.intercept
    return X @ model.coef.T + model.intercept
