"""Reading a predict request body into rows, counted and bounded while it is read.

Bodies are JSON (``{"instances": [...]}``, sparse objects or dense rows; or ``{"records":
[{"name": value, ...}]}`` by the feature names of a model trained on named columns) or
``text/plain`` LIBSVM lines. Nothing is built for the whole body at once: instances are found one
at a time, each is counted before it is parsed, and the reading stops at the first limit crossed —

- instances: at most MAX_PREDICT_BATCH, and at most MAX_DECISION_VALUES decision values (instances
  times the model's outputs): 413 as soon as one more instance is found;
- values per instance: a dense row has exactly the model's ``n_features`` values; a sparse
  instance or a text line at most ``row_limit(model)`` entries, counted on the raw bytes (commas,
  colons) before any number is converted: 422;
- blank lines and comments are skipped by a regular expression, never one Python step each.

An instance's Python objects exist only while that instance is read, so the memory of a parse is
the body plus one instance plus the rows it produced; `rows` yields them for the caller to stack
a chunk at a time. Small JSON bodies (≤ SMALL_JSON bytes) are read whole by orjson, which bounds
their objects too and keeps the one-instance case fast.

Errors raise `InvalidInstances` naming the instance (``instances[3]: ...``) or line (``line 7``).
"""

from __future__ import annotations

import codecs
import json
import math
import re
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import orjson

if TYPE_CHECKING:
    from app.services.prediction import LinearModel

SMALL_JSON = 64 * 1024
MIN_ROW_LIMIT = 1024
MAX_DECISION_VALUES = 1_000_000

Row = tuple[np.ndarray, np.ndarray]  # (model columns int32, values float64)


class InvalidInstances(ValueError):
    """A prediction request that cannot be read; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


def row_limit(model: LinearModel) -> int:
    """Most entries one sparse instance or text line may hold: the model's feature count (a row
    has no more distinct features in range), or MIN_ROW_LIMIT for narrow models, so that a few
    features beyond the model's (ignored, as LIBLINEAR does) still fit."""
    return max(model.n_features, MIN_ROW_LIMIT)


def batch_limit(model: LinearModel, max_batch: int) -> int:
    """Most instances in one request: MAX_PREDICT_BATCH, fewer for models with many outputs."""
    return max(1, min(max_batch, MAX_DECISION_VALUES // max(1, model.coef.shape[0])))


class _Counter:
    """Counts instances against the batch limit; 413 on the first one over it."""

    def __init__(self, model: LinearModel, max_batch: int):
        self.limit = batch_limit(model, max_batch)
        self.because = (
            "MAX_PREDICT_BATCH"
            if self.limit == max_batch
            else f"{MAX_DECISION_VALUES} decision values, {model.coef.shape[0]} per instance"
        )
        self.n = 0

    def add(self) -> None:
        self.n += 1
        if self.n > self.limit:
            raise InvalidInstances(
                f"too many instances: at most {self.limit} per request ({self.because}); "
                "split the batch or use POST /v1/models/{id}/predictions on a stored dataset",
                status=413,
            )

    def done(self) -> None:
        if self.n == 0:
            raise InvalidInstances("expected at least one instance, got none")


# --------------------------------------------------------------------------------------------
# One instance


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


def _too_many(where: str, model: LinearModel) -> InvalidInstances:
    return InvalidInstances(
        f"{where}: more than {row_limit(model)} entries in one instance (the model has "
        f"{model.n_features} features)"
    )


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
        raise InvalidInstances(
            f"{where}: '{name}' holds an integer too large to be an index"
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
                    f"{item} must be an integer, got the number {_short(v)} (a decimal point or "
                    f"an exponent makes a JSON number a float); send {int(v)}"
                )
            what = "an integer" if integer else "a number"
            raise InvalidInstances(f"{item} must be {what}, got {json_type(v)} {_short(v)}")


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
            raise _too_many(where, model)
    idx = _number_list(where, "indices", inst["indices"], integer=True)
    val = _number_list(where, "values", inst["values"], integer=False)
    if idx.size != val.size:
        raise InvalidInstances(
            f"{where}: 'indices' and 'values' must have the same length, got {idx.size} indices "
            f"and {val.size} values"
        )
    return sparse_row(where, idx, val, model)


def _dense_length_error(where: str, model: LinearModel, got: str) -> InvalidInstances:
    return InvalidInstances(
        f"{where}: a dense instance needs {model.n_features} values (the model's features), "
        f"got {got}"
    )


def json_dense(where: str, row: list, model: LinearModel) -> Row:
    if len(row) != model.n_features:
        raise _dense_length_error(where, model, str(len(row)))
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
        raise _too_many(where, model)
    cols = np.empty(len(record), dtype=np.int64)
    val = np.empty(len(record), dtype=np.float64)
    for pos, (name, value) in enumerate(record.items()):
        col = index.get(name)
        if col is None:
            raise InvalidInstances(
                f"{where}: unknown feature name {_short(name)!r} (the model's features are "
                f"{_names_hint(model.feature_names)})"
            )
        if type(value) not in _NUMBER_TYPES or not math.isfinite(value):
            raise InvalidInstances(
                f"{where}: {_short(name)!r} must be a finite number, got {json_type(value)} "
                f"{_short(value)}"
            )
        cols[pos], val[pos] = col, value
    return sparse_row(where, cols + model.offset, val, model)


def _names_hint(names: list, shown: int = 5) -> str:
    head = ", ".join(repr(n) for n in names[:shown])
    return head + (f", ... ({len(names)} in all)" if len(names) > shown else "")


def _instance(kind: str, where: str, inst, model: LinearModel) -> Row:
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


# --------------------------------------------------------------------------------------------
# JSON bodies


V1_KEYS = {"instances": "instances", "records": "records"}


def json_rows(
    body: bytes, model: LinearModel, max_batch: int, keys: dict[str, str] = V1_KEYS
) -> Iterator[Row]:
    """The rows of a JSON predict body ``{key: [...]}``, one instance at a time. `keys` maps
    each accepted top-level key to what its elements are: "instances" (sparse objects or dense
    rows) or "records" (objects by feature name)."""
    counter = _Counter(model, max_batch)
    if len(body) <= SMALL_JSON:
        key, instances = _small_document(body, keys)
        yield from items_rows(keys[key], key, instances, model, counter)
        return
    head = _HEAD.match(body)
    key = head.group(1).decode() if head else ""
    if key not in keys:
        raise InvalidInstances(
            f"expected a JSON object {_shapes(keys)} (a body over {SMALL_JSON // 1024} KB must "
            "start with one of these keys)"
        )
    for i, (start, end) in enumerate(_instance_spans(body)):
        counter.add()
        yield _large_instance(keys[key], f"{key}[{i}]", body, start, end, model)
    counter.done()


def items_rows(kind: str, key: str, items: list, model: LinearModel, counter=None, max_batch=None):
    """The rows of already parsed instances or records (`kind`), counted against the batch
    limit; `key` names them in messages."""
    counter = counter or _Counter(model, max_batch)
    for i, item in enumerate(items):
        counter.add()
        yield _instance(kind, f"{key}[{i}]", item, model)
    counter.done()


def _shapes(keys: dict[str, str]) -> str:
    return " or ".join(f'{{"{k}": [...]}}' for k in keys)


def _small_document(body: bytes, keys: dict[str, str]) -> tuple[str, list]:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        doc = _lenient_json(body, exc)
    key = next((k for k in keys if isinstance(doc, dict) and k in doc), None)
    if key is None:
        raise InvalidInstances(
            f"expected a JSON object {_shapes(keys)}, got {json_type(doc)}"
            + (f" without {' or '.join(map(repr, keys))}" if isinstance(doc, dict) else "")
        )
    extra = set(doc) - {key, "probabilities"}  # the flag is read by services.prediction
    if extra:
        raise InvalidInstances(f"unexpected field '{sorted(extra)[0]}'; expected only '{key}'")
    instances = doc[key]
    if not isinstance(instances, list):
        raise InvalidInstances(f"'{key}' must be a list, got {json_type(instances)}")
    return key, instances


def _lenient_json(body, error: Exception):
    """Python's reader, which accepts NaN, Infinity and overflowing numbers (as some clients
    send them), so that the problem can be named by instance instead of by byte offset."""
    try:
        return json.loads(bytes(body))
    except (ValueError, RecursionError):
        raise InvalidInstances(f"the body is not valid JSON: {error}") from None


_WS = re.compile(rb"[ \t\r\n]*")
_HEAD = re.compile(rb'[ \t\r\n]*\{[ \t\r\n]*"([a-z_]{1,32})"[ \t\r\n]*:[ \t\r\n]*\[')
# Strings (with escapes) and brackets decide where a JSON value ends; numbers, commas and
# whitespace between them are skipped in C by the search.
_BRACKET_OR_QUOTE = re.compile(rb'["\[\]{}]')
_QUOTE, _OPENING, _WINDOW = ord('"'), frozenset(b"[{"), 1 << 20
def _instance_spans(body: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each element of a large body's ``instances`` list, found without parsing
    the elements. Bodies of another shape than ``{"instances": [...]}`` are refused."""
    head = _HEAD.match(body)
    pos = _WS.match(body, head.end()).end()
    if body[pos : pos + 1] == b"]":
        return
    while True:
        end = _container_end(body, pos)
        yield pos, end
        pos = _WS.match(body, end).end()
        sep = body[pos : pos + 1]
        if sep == b"]":
            break
        if sep != b",":
            raise _not_json(pos, "',' or ']' after an instance")
        pos = _WS.match(body, pos + 1).end()
    pos = _WS.match(body, pos + 1).end()
    if body[pos : pos + 1] == b",":
        raise InvalidInstances("unexpected field after the instances; expected only one key")
    if body[pos : pos + 1] != b"}" or _WS.match(body, pos + 1).end() != len(body):
        raise _not_json(pos, "'}' ending the body")


def _not_json(pos: int, expected: str) -> InvalidInstances:
    return InvalidInstances(f"the body is not valid JSON: expected {expected} at byte {pos}")


def _container_end(body: bytes, pos: int) -> int:
    """One past the end of the list or object starting at ``pos``; ``pos`` itself when another
    kind of value starts there (the caller names it)."""
    if body[pos : pos + 1] not in (b"[", b"{"):
        return pos
    depth, in_string, n = 0, False, len(body)
    # searched a window at a time: the regular expression engine holds the GIL while it
    # searches, and short searches let the event loop run between them
    for start in range(pos, n, _WINDOW):
        for match in _BRACKET_OR_QUOTE.finditer(body, start, start + _WINDOW):
            at = match.start()
            c = body[at]
            if in_string:
                in_string = c != _QUOTE or _escaped(body, at)
            elif c == _QUOTE:
                in_string = True
            elif c in _OPENING:
                depth += 1
            else:
                depth -= 1
                if depth == 0:
                    return at + 1
    raise _not_json(n, "the end of an instance")


def _escaped(body: bytes, at: int) -> bool:
    """Whether the quote at `at` is escaped (preceded by an odd number of backslashes)."""
    run = at
    while run > 0 and body[run - 1] == 0x5C:
        run -= 1
    return (at - run) % 2 == 1


_SCALARS = {b'"': "a string", b"t": "a boolean", b"f": "a boolean", b"n": "null"}


def _large_instance(
    kind: str, where: str, body: bytes, start: int, end: int, model: LinearModel
) -> Row:
    """Count an instance's values on its bytes, then parse it (its objects are then bounded)."""
    first = body[start : start + 1]
    if start == end:
        kind = _SCALARS.get(first, "a number" if first in b"-0123456789" else None)
        if kind is None:
            raise _not_json(start, "an instance")
        raise InvalidInstances(
            f'{where}: expected an object {{"indices": [...], "values": [...]}} or a list '
            f"of numbers, got {kind}"
        )
    commas = body.count(b",", start, end)
    if first == b"[" and commas + 1 > model.n_features:
        raise _dense_length_error(where, model, f"more ({commas + 1} or so)")
    if first == b"{" and commas > 2 * row_limit(model) + 1:
        raise _too_many(where, model)
    span = memoryview(body)[start:end]
    try:
        inst = orjson.loads(span)
    except orjson.JSONDecodeError as exc:
        try:
            inst = json.loads(span.tobytes())
        except (ValueError, RecursionError):
            raise InvalidInstances(f"the body is not valid JSON: {exc} (in {where})") from None
    return _instance(kind, where, inst, model)


# --------------------------------------------------------------------------------------------
# LIBSVM text bodies

# A line holding an instance: its first non-blank byte is not a comment mark. Blank lines and
# comment lines are skipped inside the regular expression engine.
_NL = b"\n"
_INSTANCE_LINE = re.compile(rb"^[ \t\r\f\v]*([^ \t\r\f\v\n#][^\n]*)", re.MULTILINE)


def text_rows(body: bytes, model: LinearModel, max_batch: int) -> Iterator[Row]:
    """The rows of LIBSVM lines (``[label] idx:val ...``, ``#`` comments, blank lines skipped)."""
    _check_utf8(body)
    counter = _Counter(model, max_batch)
    limit = row_limit(model)
    for match in _instance_lines(body):
        counter.add()
        start, end = match.span(1)
        comment = body.find(b"#", start, end)
        if comment >= 0:
            end = comment
        where = f"line {body.count(_NL, 0, start) + 1}"
        colons = body.count(b":", start, end)
        if colons > limit + 1:  # one more for qid
            raise _too_many(where, model)
        # at most colons + 2 tokens: a label and the pairs; anything more stays in the last one
        yield _text_row(where, body[start:end].split(None, colons + 1), model)
    counter.done()


def _instance_lines(body: bytes, window: int = 1 << 20):
    """The matches of _INSTANCE_LINE, searched a window of about `window` bytes (ending at a
    newline) at a time: the regular expression engine holds the GIL while it searches, and
    short searches let the event loop run between them."""
    pos, n = 0, len(body)
    while pos < n:
        end = body.find(_NL, min(pos + window, n))
        end = n if end < 0 else end + 1
        yield from _INSTANCE_LINE.finditer(body, pos, end)
        pos = end


def _check_utf8(body: bytes, step: int = 1 << 20) -> None:
    if body.isascii():
        return
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        for start in range(0, len(body), step):
            decoder.decode(body[start : start + step], final=start + step >= len(body))
    except UnicodeDecodeError as exc:
        raise InvalidInstances(
            f"the body is not UTF-8 text: byte {start + exc.start} is invalid"
        ) from None


def _text_row(where: str, tokens: list[bytes], model: LinearModel) -> Row:
    if b":" not in tokens[0]:
        try:
            float(tokens[0])
        except ValueError:
            raise InvalidInstances(
                f"{where}: expected a label or 'index:value', got '{_word(tokens[0])}'"
            ) from None
        tokens = tokens[1:]
    idx, val = array("q"), array("d")
    for tok in tokens:
        name, sep, value = tok.partition(b":")
        if name == b"qid":
            continue
        try:
            i = int(name)
            v = float(value)
        except (ValueError, OverflowError):
            raise InvalidInstances(
                f"{where}: expected 'index:value' with an integer index and a number, "
                f"got '{_word(tok)}'"
            ) from None
        if not sep:
            raise InvalidInstances(f"{where}: expected 'index:value', got '{_word(tok)}'")
        if not math.isfinite(v):
            raise InvalidInstances(
                f"{where}: value of feature {i} is {value.decode()}, expected a finite number"
            )
        try:
            idx.append(i)
        except OverflowError:
            raise InvalidInstances(f"{where}: a feature index is too large") from None
        val.append(v)
    return sparse_row(where, np.frombuffer(idx, dtype=np.int64), np.frombuffer(val), model)


def _word(token: bytes) -> str:
    """The first word of a token, decoded and shortened, for messages."""
    words = token.split(None, 1)
    return _short(words[0].decode("utf-8", "replace") if words else "")


# --------------------------------------------------------------------------------------------


def json_type(v) -> str:
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
