"""One predict instance, validated into a row (model columns, values).

A sparse instance (``{"indices": [...], "values": [...]}``, indices in the training file's
numbering), a dense row of exactly the model's ``n_features`` values, or a record ``{"name":
value}`` by the model's feature names (see `predict_input` for the bounds). Indices below the
model's first are an error; features beyond the model's are dropped, as LIBLINEAR does.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from app.services.predict_input import (
    InvalidInstances,
    Row,
    json_type,
    row_limit,
    shorten,
    too_many_entries,
)

if TYPE_CHECKING:
    from app.services.prediction import LinearModel


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


def sparse_row(where: str, idx: np.ndarray, val: np.ndarray, model: LinearModel) -> Row:
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
        raise InvalidInstances(f"{where}: '{name}' must be a list, got {json_type(seq)}")
    # One C-level pass finds the element types (bools and strings would convert silently).
    if not set(map(type, seq)) <= (_INT_TYPES if integer else _NUMBER_TYPES):
        _reject_element(where, name, seq, integer)
    try:
        return np.array(seq, dtype=np.int64 if integer else np.float64)
    except OverflowError:
        what = "an index" if integer else "a float64 value"
        raise InvalidInstances(
            f"{where}: '{name}' holds an integer too large to be {what}"
        ) from None


def _reject_element(where: str, name: str, seq: list, integer: bool):
    wanted = (int,) if integer else (int, float)
    for pos, v in enumerate(seq):
        if type(v) not in wanted:
            item = f"{where}: {name}[{pos}]" if name else f"{where}[{pos}]"
            if integer and type(v) is float and v.is_integer():
                if abs(v) >= 2**63:  # JSON readers turn integers beyond 64 bits into floats
                    raise InvalidInstances(f"{item} = {v:.17g} is too large for a feature index")
                raise InvalidInstances(
                    f"{item} must be an integer, got the number {shorten(v)} (a decimal point or "
                    f"an exponent makes a JSON number a float); send {int(v)}"
                )
            what = "an integer" if integer else "a number"
            raise InvalidInstances(f"{item} must be {what}, got {json_type(v)} {shorten(v)}")


def json_sparse(where: str, inst: dict, model: LinearModel) -> Row:
    extra = set(inst) - {"indices", "values"}
    if extra:
        raise InvalidInstances(
            f"{where}: unexpected field '{sorted(extra)[0]}'; a sparse instance has exactly "
            "'indices' and 'values'"
        )
    if "indices" not in inst or "values" not in inst:
        missing = "indices" if "indices" not in inst else "values"
        raise InvalidInstances(f"{where}: missing field '{missing}'")
    for name in ("indices", "values"):
        if isinstance(inst[name], list) and len(inst[name]) > row_limit(model):
            raise too_many_entries(where, model)
    idx = _number_list(where, "indices", inst["indices"], integer=True)
    val = _number_list(where, "values", inst["values"], integer=False)
    if idx.size != val.size:
        raise InvalidInstances(
            f"{where}: 'indices' and 'values' must have the same length, got {idx.size} indices "
            f"and {val.size} values"
        )
    return sparse_row(where, idx, val, model)


def dense_length_error(where: str, model: LinearModel, got: str) -> InvalidInstances:
    return InvalidInstances(
        f"{where}: a dense instance needs {model.n_features} values (the model's features), "
        f"got {got}"
    )


def json_dense(where: str, row: list, model: LinearModel) -> Row:
    if len(row) != model.n_features:
        raise dense_length_error(where, model, str(len(row)))
    val = _number_list(where, "", row, integer=False)
    if not np.isfinite(val).all():
        bad = int(np.flatnonzero(~np.isfinite(val))[0])
        raise InvalidInstances(f"{where}[{bad}] is {val[bad]}, expected a finite number")
    cols = np.flatnonzero(val)
    return cols.astype(np.int32), val[cols]


def json_record(where: str, record, model: LinearModel) -> Row:
    """A record ``{"name": value, ...}`` by the model's feature names: a name left out is 0, an
    unknown one an error that names it."""
    if not isinstance(record, dict):
        raise InvalidInstances(
            f'{where}: expected an object {{"feature name": value, ...}}, got {json_type(record)}'
        )
    index = model.feature_index
    if index is None:
        raise InvalidInstances(
            f"{where}: this model's training data had no column names; send 'instances' "
            "(sparse or dense rows) instead of 'records'"
        )
    if len(record) > row_limit(model):
        raise too_many_entries(where, model)
    cols = np.empty(len(record), dtype=np.int64)
    val = np.empty(len(record), dtype=np.float64)
    for pos, (name, value) in enumerate(record.items()):
        col = index.get(name)
        if col is None:
            raise InvalidInstances(
                f"{where}: unknown feature name {shorten(name)!r} (the model's features are "
                f"{_names_hint(model.feature_names)})"
            )
        if type(value) not in _NUMBER_TYPES or not math.isfinite(value):
            raise InvalidInstances(
                f"{where}: {shorten(name)!r} must be a finite number, got {json_type(value)} "
                f"{shorten(value)}"
            )
        cols[pos], val[pos] = col, value
    return sparse_row(where, cols + model.offset, val, model)


def _names_hint(names: list, shown: int = 5) -> str:
    head = ", ".join(repr(n) for n in names[:shown])
    return head + (f", ... ({len(names)} in all)" if len(names) > shown else "")


def instance_row(kind: str, where: str, inst, model: LinearModel) -> Row:
    if kind == "records":
        return json_record(where, inst, model)
    if isinstance(inst, dict):
        return json_sparse(where, inst, model)
    if isinstance(inst, list):
        return json_dense(where, inst, model)
    raise InvalidInstances(
        f'{where}: expected an object {{"indices": [...], "values": [...]}} or a list '
        f"of numbers, got {json_type(inst)}"
    )
