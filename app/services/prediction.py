"""Prediction with a stored linear model: request parsing into the model's feature space, and
decision values and labels.

A request carries instances in one of three forms, all in the training file's feature numbering
(one-based unless the model was trained on a zero-based file):

- JSON sparse: ``{"instances": [{"indices": [1, 7], "values": [0.5, 1.0]}, ...]}``;
- JSON dense: ``{"instances": [[0.0, 0.5, ...], ...]}`` (element j is the model's column j);
- ``text/plain`` LIBSVM lines, with or without a leading label (the label is ignored).

Every instance is validated once here, by hand rather than through pydantic, because prediction is
the service's latency-critical path. Problems raise :class:`InvalidInstances` naming the instance
(or the line) and what was wrong. Features beyond the model's ``n_features`` are ignored, as
LIBLINEAR's predict does.

Decision values are ``X @ coef.T + intercept``. Binary models (one output row, two classes) predict
``classes[1]`` when the value is positive and ``classes[0]`` otherwise; multi-class models take the
arg-max; regression models return the decision value itself.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import orjson
import scipy.sparse as sp

_EMPTY_IDX = np.empty(0, dtype=np.int32)
_EMPTY_VAL = np.empty(0, dtype=np.float64)


class InvalidInstances(ValueError):
    """A prediction request that cannot be read; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class LinearModel:
    """A stored model unpacked for prediction.

    Attributes
    ----------
    coef : ndarray of shape (n_outputs, n_features), float64
    intercept : ndarray of shape (n_outputs,), float64
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

    @property
    def is_regressor(self) -> bool:
        return self.kind == "regressor" or not self.classes

    @property
    def offset(self) -> int:
        """What to subtract from a file index to get the model's column."""
        return 0 if self.zero_based else 1


# --------------------------------------------------------------------------------------------
# Parsing


def _check_count(n: int, max_batch: int) -> None:
    if n == 0:
        raise InvalidInstances("expected at least one instance, got none")
    if n > max_batch:
        raise InvalidInstances(
            f"too many instances: at most {max_batch} per request (MAX_PREDICT_BATCH), got {n}; "
            "split the batch or use POST /v1/models/{id}/predictions on a stored dataset",
            status=413,
        )


def _columns(where: str, idx: np.ndarray, model: LinearModel) -> np.ndarray:
    """Validate file indices and map them to model columns (int64, unfiltered)."""
    lowest = model.offset
    if idx.size and idx.min() < lowest:
        bad = int(idx[np.argmax(idx < lowest)])
        base = "zero-based" if model.zero_based else "one-based"
        raise InvalidInstances(
            f"{where}: feature index {bad} is out of range: the model's indices are {base}, "
            f"so they start at {lowest}"
        )
    return idx - lowest


def _sparse_row(
    where: str, idx: np.ndarray, val: np.ndarray, model: LinearModel
) -> tuple[np.ndarray, np.ndarray]:
    """Validated (columns, values) of one instance, features beyond the model's dropped."""
    cols = _columns(where, idx, model)
    if cols.size > 1 and not (cols[1:] > cols[:-1]).all():
        order = np.argsort(cols, kind="stable")
        cols = cols[order]
        val = val[order]
        dup = np.flatnonzero(cols[1:] == cols[:-1])
        if dup.size:
            raise InvalidInstances(
                f"{where}: feature index {int(cols[dup[0]]) + model.offset} appears more than once"
            )
    if not np.isfinite(val).all():
        bad = int(np.flatnonzero(~np.isfinite(val))[0])
        raise InvalidInstances(
            f"{where}: value of feature {int(cols[bad]) + model.offset} is {val[bad]}, "
            "expected a finite number"
        )
    if cols.size and cols[-1] >= model.n_features:
        keep = cols < model.n_features
        cols, val = cols[keep], val[keep]
    return cols.astype(np.int32), val


_INT_TYPES = frozenset({int})
_NUMBER_TYPES = frozenset({int, float})


def _number_list(where: str, name: str, seq, integer: bool) -> np.ndarray:
    if not isinstance(seq, list):
        raise InvalidInstances(f"{where}: '{name}' must be a list, got {_json_type(seq)}")
    # One C-level pass finds the element types (bools and strings would convert silently).
    if not set(map(type, seq)) <= (_INT_TYPES if integer else _NUMBER_TYPES):
        _reject_element(where, name, seq, integer)
    try:
        return np.array(seq, dtype=np.int64 if integer else np.float64)
    except OverflowError:
        raise InvalidInstances(
            f"{where}: '{name}' holds an integer too large to be an index"
        ) from None


def _reject_element(where: str, name: str, seq: list, integer: bool):
    wanted = (int,) if integer else (int, float)
    for pos, v in enumerate(seq):
        if type(v) not in wanted:
            item = f"{where}: {name}[{pos}]" if name else f"{where}[{pos}]"
            if integer and type(v) is float and v.is_integer():
                raise InvalidInstances(f"{item} = {v:.17g} is too large for a feature index")
            what = "an integer" if integer else "a number"
            raise InvalidInstances(f"{item} must be {what}, got {_json_type(v)} {_short(v)}")


def _json_sparse(where: str, inst: dict, model: LinearModel):
    extra = set(inst) - {"indices", "values"}
    if extra:
        raise InvalidInstances(
            f"{where}: unexpected field '{sorted(extra)[0]}'; a sparse instance has exactly "
            "'indices' and 'values'"
        )
    if "indices" not in inst or "values" not in inst:
        missing = "indices" if "indices" not in inst else "values"
        raise InvalidInstances(f"{where}: missing field '{missing}'")
    idx = _number_list(where, "indices", inst["indices"], integer=True)
    val = _number_list(where, "values", inst["values"], integer=False)
    if idx.size != val.size:
        raise InvalidInstances(
            f"{where}: 'indices' and 'values' must have the same length, got {idx.size} indices "
            f"and {val.size} values"
        )
    return _sparse_row(where, idx, val, model)


def _json_dense(where: str, row: list, model: LinearModel):
    if len(row) < model.n_features:
        raise InvalidInstances(
            f"{where}: a dense instance needs {model.n_features} values (the model's features), "
            f"got {len(row)}"
        )
    val = _number_list(where, "", row, integer=False)[: model.n_features]
    if not np.isfinite(val).all():
        bad = int(np.flatnonzero(~np.isfinite(val))[0])
        raise InvalidInstances(f"{where}[{bad}] is {val[bad]}, expected a finite number")
    cols = np.flatnonzero(val)
    return cols.astype(np.int32), val[cols]


def parse_json(body: bytes, model: LinearModel, max_batch: int) -> Rows:
    """Read a JSON predict body into rows of shape (n_instances, model.n_features)."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        doc = _lenient_json(body, exc)
    if not isinstance(doc, dict) or "instances" not in doc:
        raise InvalidInstances(
            f'expected a JSON object {{"instances": [...]}}, got {_json_type(doc)}'
            + (" without 'instances'" if isinstance(doc, dict) else "")
        )
    extra = set(doc) - {"instances"}
    if extra:
        raise InvalidInstances(f"unexpected field '{sorted(extra)[0]}'; expected only 'instances'")
    instances = doc["instances"]
    if not isinstance(instances, list):
        raise InvalidInstances(f"'instances' must be a list, got {_json_type(instances)}")
    _check_count(len(instances), max_batch)
    rows = []
    for i, inst in enumerate(instances):
        where = f"instances[{i}]"
        if isinstance(inst, dict):
            rows.append(_json_sparse(where, inst, model))
        elif isinstance(inst, list):
            rows.append(_json_dense(where, inst, model))
        else:
            raise InvalidInstances(
                f'{where}: expected an object {{"indices": [...], "values": [...]}} or a list '
                f"of numbers, got {_json_type(inst)}"
            )
    return _stack(rows, model.n_features)


def _lenient_json(body: bytes, error: Exception):
    """Python's reader, which accepts NaN, Infinity and overflowing numbers (as some clients
    send them), so that the problem can be named by instance instead of by byte offset."""
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidInstances(f"the body is not valid JSON: {error}") from None


def parse_text(body: bytes, model: LinearModel, max_batch: int) -> Rows:
    """Read LIBSVM lines (``[label] idx:val ...``, ``#`` comments, blank lines skipped)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInstances(f"the body is not UTF-8 text: byte {exc.start} is invalid") from None
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1)]
    lines = [(n, line.split("#", 1)[0].split()) for n, line in lines]
    lines = [(n, toks) for n, toks in lines if toks]
    _check_count(len(lines), max_batch)
    rows = [_text_row(f"line {n}", toks, model) for n, toks in lines]
    return _stack(rows, model.n_features)


def _text_row(where: str, tokens: list[str], model: LinearModel):
    if ":" not in tokens[0]:
        try:
            float(tokens[0])
        except ValueError:
            raise InvalidInstances(
                f"{where}: expected a label or 'index:value', got '{_short(tokens[0])}'"
            ) from None
        tokens = tokens[1:]
    idx, val = [], []
    for tok in tokens:
        name, sep, value = tok.partition(":")
        if name == "qid":
            continue
        try:
            i = int(name)
            v = float(value)
        except ValueError:
            raise InvalidInstances(
                f"{where}: expected 'index:value' with an integer index and a number, "
                f"got '{_short(tok)}'"
            ) from None
        if not sep:
            raise InvalidInstances(f"{where}: expected 'index:value', got '{_short(tok)}'")
        if not math.isfinite(v):
            raise InvalidInstances(
                f"{where}: value of feature {i} is {value}, expected a finite number"
            )
        idx.append(i)
        val.append(v)
    try:
        idx_arr = np.array(idx, dtype=np.int64)
    except OverflowError:
        raise InvalidInstances(f"{where}: a feature index is too large") from None
    return _sparse_row(where, idx_arr, np.array(val, dtype=np.float64), model)


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


def _stack(rows, n_features: int) -> Rows:
    if len(rows) == 1:
        indices, data = rows[0]
        return Rows(np.array([0, indices.size]), indices, data, (1, n_features))
    indptr = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum([c.size for c, _ in rows], out=indptr[1:])
    indices = np.concatenate([c for c, _ in rows]) if indptr[-1] else _EMPTY_IDX
    data = np.concatenate([v for _, v in rows]) if indptr[-1] else _EMPTY_VAL
    return Rows(indptr, indices, data, (len(rows), n_features))


def _json_type(v) -> str:
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(v), type(v).__name__)


def _short(v, limit: int = 40) -> str:
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."


# --------------------------------------------------------------------------------------------
# Prediction


def decision_function(model: LinearModel, X) -> np.ndarray:
    """Decision values, shape (n_instances, n_outputs), of X (``Rows`` or a CSR matrix)."""
    if X.shape[0] == 1:
        # One row is the service's common case: a gather and a small product beat scipy's matmul.
        cols, vals = X.indices[X.indptr[0] : X.indptr[1]], X.data[X.indptr[0] : X.indptr[1]]
        return (model.coef[:, cols] @ vals + model.intercept)[None, :]
    if isinstance(X, Rows):
        X = X.tocsr()
    return np.asarray(X @ model.coef.T) + model.intercept


def labels_from_decision(model: LinearModel, D: np.ndarray) -> list:
    """Labels (classification) for decision values D of shape (n, n_outputs)."""
    classes = model.classes
    if D.shape[1] == 1:
        return [classes[1] if d > 0 else classes[0] for d in D[:, 0].tolist()]
    return [classes[j] for j in D.argmax(axis=1).tolist()]


def predict_payload(model: LinearModel, X) -> dict:
    """The predict response: ``values`` for regression, ``labels`` and ``decision_values``
    (one column for binary models, one per class otherwise) for classification."""
    D = decision_function(model, X)
    if model.is_regressor:
        return {"values": D[:, 0]}
    return {"labels": labels_from_decision(model, D), "decision_values": D}


def dumps(payload: dict) -> bytes:
    """JSON bytes of a payload that may hold numpy arrays (shortest round-trip floats)."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def parse_body(body: bytes, content_type: str, model: LinearModel, max_batch: int):
    """Dispatch on the request's content type: JSON (default) or ``text/plain`` LIBSVM lines."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "text/plain":
        return parse_text(body, model, max_batch)
    if media in ("", "application/json") or media.endswith("+json"):
        return parse_json(body, model, max_batch)
    raise InvalidInstances(
        f"unsupported content type '{media}': send application/json or text/plain LIBSVM lines",
        status=415,
    )
