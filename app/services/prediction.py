"""Prediction with a stored linear model: request rows in the model's feature space, decision
values and labels.

A request carries instances in one of three forms, all in the training file's feature numbering
(one-based unless the model was trained on a zero-based file):

- JSON sparse: ``{"instances": [{"indices": [1, 7], "values": [0.5, 1.0]}, ...]}``;
- JSON dense: ``{"instances": [[0.0, 0.5, ...], ...]}`` (element j is the model's column j);
- ``text/plain`` LIBSVM lines, with or without a leading label (the label is ignored).

`services.predict_json` and `services.predict_text` read and validate them, bounded while they
read; here rows are stacked into CSR chunks and predicted. Features beyond the model's
``n_features`` are ignored, as LIBLINEAR's predict does.

Decision values are ``X @ coef.T + intercept``. Binary models (one output row, two classes) predict
``classes[1]`` when the value is positive and ``classes[0]`` otherwise; multi-class models take the
arg-max; regression models return the decision value itself. A model stored sparsely keeps only
the columns that have a non-zero weight (``columns``), so its cost is that of its non-zeros.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain

import numpy as np
import orjson
import scipy.sparse as sp

from app.schemas.models import missing_calibration
from app.services.predict_input import InvalidInstances
from app.services.predict_json import SMALL_JSON, json_rows, large_body_flag
from app.services.predict_text import text_rows

__all__ = [
    "InvalidInstances", "LinearModel", "Rows", "decision_function", "finite", "predict_body"
]
_EMPTY_IDX = np.empty(0, dtype=np.int32)
_EMPTY_VAL = np.empty(0, dtype=np.float64)


@dataclass(frozen=True)
class LinearModel:
    """A stored model unpacked for prediction.

    Attributes
    ----------
    coef : ndarray of shape (n_outputs, n_features), or (n_outputs, len(columns)) when sparse
    intercept : ndarray of shape (n_outputs,), float64
    columns : ndarray of int64 (increasing) or None
        For a sparse model, the model columns that ``coef``'s columns are; None when dense.
    classes : list
        Labels in ``classes_`` order (JSON numbers); empty for regression models.
    kind : str
        "classifier" or "regressor".
    zero_based : bool
        Index base of the training file: instance indices are read with it.
    """

    id: str
    kind: str
    classes: list
    n_features: int
    zero_based: bool
    coef: np.ndarray
    intercept: np.ndarray
    info: dict = field(default_factory=dict)
    columns: np.ndarray | None = None
    feature_names: list | None = None  # the training columns' names (csv, tsv, parquet)
    calibration: dict | None = None  # solvers.selection.Calibration.to_dict(), or None

    @cached_property
    def calibrator(self):
        """The `solvers.selection.Calibration` of the model (None when it has none)."""
        if self.calibration is None:
            return None
        from solvers.selection.calibration import Calibration

        return Calibration.from_dict(self.calibration)

    @cached_property
    def feature_index(self) -> dict[str, int] | None:
        """Model column of each feature name (None without names)."""
        if self.feature_names is None:
            return None
        return {name: j for j, name in enumerate(self.feature_names)}

    @property
    def is_regressor(self) -> bool:
        return self.kind == "regressor" or not self.classes

    @property
    def offset(self) -> int:
        """What to subtract from a file index to get the model's column."""
        return 0 if self.zero_based else 1

    @property
    def n_outputs(self) -> int:
        return self.coef.shape[0]

    def dense_coef(self) -> np.ndarray:
        """coef as (n_outputs, n_features) (allocates n_features values per output)."""
        if self.columns is None:
            return self.coef
        out = np.zeros((self.n_outputs, self.n_features))
        out[:, self.columns] = self.coef
        return out


# --------------------------------------------------------------------------------------------
# Parsing (services.predict_json and predict_text read the bodies; here rows become CSR chunks)

CHUNK_NNZ = 1 << 20  # entries stacked and predicted at a time


def parse_json(body: bytes, model: LinearModel, max_batch: int) -> Rows:
    """Read a JSON predict body into rows of shape (n_instances, model.n_features)."""
    return _stack_all(json_rows(body, model, max_batch), model.n_features)


def parse_text(body: bytes, model: LinearModel, max_batch: int) -> Rows:
    """Read LIBSVM lines (``[label] idx:val ...``, ``#`` comments, blank lines skipped)."""
    return _stack_all(text_rows(body, model, max_batch), model.n_features)


def _rows_of(body: bytes, content_type: str, model: LinearModel, max_batch: int):
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/plain":
        return text_rows(body, model, max_batch)
    if media in ("", "application/json") or media.endswith("+json"):
        return json_rows(body, model, max_batch)
    raise InvalidInstances(
        f"unsupported content type '{media}': send application/json or text/plain LIBSVM lines",
        status=415,
    )


def parse_body(body: bytes, content_type: str, model: LinearModel, max_batch: int) -> Rows:
    """Dispatch on the request's content type: JSON (default) or ``text/plain`` LIBSVM lines."""
    return _stack_all(_rows_of(body, content_type, model, max_batch), model.n_features)


def predict_body(
    body: bytes,
    content_type: str,
    model: LinearModel,
    max_batch: int,
    probabilities: bool | None = None,
) -> dict:
    """The predict response for a request body, its rows stacked and predicted CHUNK_NNZ
    entries at a time (the parsed rows of a large body are never all held at once). With
    ``probabilities`` (the query's flag, None when not sent) or a JSON body's
    ``"probabilities": true`` it adds the calibrated class probabilities; a model without
    calibration is a 422, and so are the two flags with different values."""
    probabilities = one_flag(probabilities, _body_flag(body, content_type))
    if probabilities and not calibrated(model):
        raise InvalidInstances(
            why_no_calibration(model),
            status=422,
            title="No probability calibration",  # the instances themselves may be fine
        )
    rows = _rows_of(body, content_type, model, max_batch)
    parts = [decision_function(model, X) for X in _chunks(rows, model.n_features)]
    payload = payload_of(model, finite(parts[0] if len(parts) == 1 else np.concatenate(parts)))
    if probabilities:
        payload["probabilities"] = probabilities_of(model, payload["decision_values"])
    return payload


def calibrated(model: LinearModel) -> bool:
    """Whether the model has class probabilities to give."""
    return not model.is_regressor and model.calibration is not None


def why_no_calibration(model: LinearModel) -> str:
    """What a predict asking for probabilities is told by a model that has none."""
    kind = "regressor" if model.is_regressor else "classifier"
    params = model.info.get("params") or {}
    missing = missing_calibration(kind, params, model.info.get("status"), model.calibration)
    return missing or (
        "this model has no probability calibration: train it with a search or with "
        "probability=true to get probabilities"
    )


def one_flag(query: bool | None, body: bool | None) -> bool:
    """Whether probabilities are asked for, by the query string or the body (None: not sent).
    Both with different values is a 422, as an upload option sent in the query and the form
    is: OR-ed, `?probabilities=false` was overruled by the body without a word."""
    if query is not None and body is not None and query != body:
        raise InvalidInstances(
            "probabilities: sent in the query string and in the body with different values; "
            "send it once",
            status=422,
            title="Invalid request",
        )
    return bool(query if query is not None else body)


def _body_flag(body: bytes, content_type: str) -> bool | None:
    """What a JSON body says of ``"probabilities"`` (a large one before or after its
    instances: before, a body over 64 KB with the flag was a 422): None when it does not say
    (LIBSVM text has no flag)."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/plain":
        return None
    if len(body) > SMALL_JSON:
        return large_body_flag(body)
    if b'"probabilities"' not in body:
        return None
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = doc.get("probabilities") if isinstance(doc, dict) else None
    if value is not None and not isinstance(value, bool):
        raise InvalidInstances(f"'probabilities' must be true or false, got {value!r}")
    return value


def probabilities_of(model: LinearModel, D: np.ndarray) -> np.ndarray:
    """Class probabilities (n, n_classes) of decision values D (n, n_outputs): rows sum to 1,
    columns in the order of the model's classes."""
    return model.calibrator.probabilities(D[:, 0] if D.shape[1] == 1 else D)


def _stack_all(rows, n_features: int) -> Rows:
    return next(_chunks(rows, n_features, limit=None))


def _chunks(rows, n_features: int, limit: int | None = CHUNK_NNZ):
    """Rows stacked into CSR chunks of about `limit` entries (None: one chunk). Entries are
    copied into compact buffers as they come, so a chunk costs 12 bytes an entry and 8 a row."""
    first = next(rows)
    second = next(rows, None)
    if second is None:  # one instance: the common case, no copy
        cols, vals = first
        yield Rows(np.array([0, cols.size]), cols, vals, (1, n_features))
        return
    chunk = _Chunk()
    for row in chain((first, second), rows):
        chunk.add(row)
        if limit is not None and chunk.nnz >= limit:
            yield chunk.rows(n_features)
            chunk = _Chunk()
    if chunk.n_rows:
        yield chunk.rows(n_features)


class _Chunk:
    def __init__(self):
        self.indptr = array("q", [0])
        self.cols = array("i")
        self.vals = array("d")

    @property
    def nnz(self) -> int:
        return self.indptr[-1]

    @property
    def n_rows(self) -> int:
        return len(self.indptr) - 1

    def add(self, row) -> None:
        cols, vals = row
        self.cols.frombytes(memoryview(np.ascontiguousarray(cols)).cast("B"))
        self.vals.frombytes(memoryview(np.ascontiguousarray(vals)).cast("B"))
        self.indptr.append(len(self.cols))

    def rows(self, n_features: int) -> Rows:
        return Rows(
            np.frombuffer(self.indptr, dtype=np.int64),
            np.frombuffer(self.cols, dtype=np.int32) if self.nnz else _EMPTY_IDX,
            np.frombuffer(self.vals, dtype=np.float64) if self.nnz else _EMPTY_VAL,
            (self.n_rows, n_features),
        )


class Rows:
    """Parsed instances as CSR arrays (``indptr``, ``indices``, ``data``) of shape
    (n_instances, n_features), without scipy's constructor checks (already validated here; they
    cost more than the prediction of one instance). ``tocsr()`` gives the scipy matrix."""

    __slots__ = ("indptr", "indices", "data", "shape")

    def __init__(self, indptr, indices, data, shape):
        self.indptr, self.indices, self.data, self.shape = indptr, indices, data, shape

    @property
    def nnz(self) -> int:
        return int(self.indptr[-1])

    def tocsr(self) -> sp.csr_matrix:
        return sp.csr_matrix((self.data, self.indices, self.indptr), shape=self.shape, copy=False)

    def toarray(self) -> np.ndarray:
        return self.tocsr().toarray()


# --------------------------------------------------------------------------------------------
# Prediction


def decision_function(model: LinearModel, X) -> np.ndarray:
    """Decision values, shape (n_instances, n_outputs), of X (``Rows`` or a CSR matrix)."""
    if X.shape[0] == 1:
        # One row is the service's common case: a gather and a small product beat scipy's matmul.
        cols, vals = X.indices[X.indptr[0] : X.indptr[1]], X.data[X.indptr[0] : X.indptr[1]]
        if model.columns is not None:
            cols, vals = _weighted(model.columns, cols, vals)
        return (model.coef[:, cols] @ vals + model.intercept)[None, :]
    if isinstance(X, Rows):
        X = X.tocsr()
    if model.columns is not None:
        cols, vals = _weighted(model.columns, X.indices, X.data)
        row = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))[_hits(model.columns, X.indices)]
        X = sp.csr_matrix((vals, (row, cols)), shape=(X.shape[0], model.columns.size))
    return np.asarray(X @ model.coef.T) + model.intercept


OVERFLOW = (
    "its decision value overflows a float64 (beyond ±1.8e308); its feature values are too "
    "large for this model's weights"
)


def first_overflow(D: np.ndarray) -> int | None:
    """The first row of decision values D that is not all finite numbers, if any: feature
    values large enough (each a finite float) overflow the products to inf, or inf - inf to
    nan, and a label picked from those, or a value written as null, would be no answer."""
    overflowed = ~np.isfinite(D).all(axis=1)
    return int(np.argmax(overflowed)) if overflowed.any() else None


def finite(D: np.ndarray) -> np.ndarray:
    """D, the decision values of a request's instances, unless one overflowed (a 422)."""
    index = first_overflow(D)
    if index is not None:
        raise InvalidInstances(f"instance {index} (counting from 0): {OVERFLOW}")
    return D


def _hits(columns: np.ndarray, cols: np.ndarray) -> np.ndarray:
    pos = np.minimum(np.searchsorted(columns, cols), max(columns.size - 1, 0))
    return columns[pos] == cols if columns.size else np.zeros(cols.size, dtype=bool)


def _weighted(columns: np.ndarray, cols: np.ndarray, vals: np.ndarray):
    """(positions in a sparse model's coef, values) of the entries whose column has a weight."""
    hit = _hits(columns, cols)
    return np.searchsorted(columns, cols[hit]), vals[hit]


def labels_from_decision(model: LinearModel, D: np.ndarray) -> list:
    """Labels (classification) for decision values D of shape (n, n_outputs)."""
    classes = model.classes
    if D.shape[1] == 1:
        return [classes[1] if d > 0 else classes[0] for d in D[:, 0].tolist()]
    return [classes[j] for j in D.argmax(axis=1).tolist()]


def predict_payload(model: LinearModel, X) -> dict:
    """The predict response for rows X (see `payload_of`)."""
    return payload_of(model, decision_function(model, X))


def payload_of(model: LinearModel, D: np.ndarray) -> dict:
    """The predict response: ``values`` for regression, ``labels`` and ``decision_values``
    (one column for binary models, one per class otherwise) for classification."""
    if model.is_regressor:
        return {"values": D[:, 0]}
    return {"labels": labels_from_decision(model, D), "decision_values": D}


def dumps(payload: dict) -> bytes:
    """JSON bytes of a payload that may hold numpy arrays (shortest round-trip floats)."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)
