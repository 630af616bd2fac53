"""JSON predict bodies: ``{"instances": [...]}`` or ``{"records": [...]}``, read into rows.

Small bodies (≤ SMALL_JSON bytes) are read whole by orjson, which bounds their objects too and
keeps the one-instance case fast. A larger one is scanned for the spans of its instances without
parsing them (strings and brackets decide where a value ends); each instance's values are
counted on its bytes, and only then is it parsed on its own (see `predict_input` for the bounds).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING

import orjson

from app.services.predict_input import (
    InstanceCounter,
    InvalidInstances,
    Row,
    json_type,
    row_limit,
    too_many_entries,
)
from app.services.predict_instance import dense_length_error, instance_row

if TYPE_CHECKING:
    from app.services.prediction import LinearModel

SMALL_JSON = 64 * 1024

V1_KEYS = {"instances": "instances", "records": "records"}


def json_rows(
    body: bytes, model: LinearModel, max_batch: int, keys: dict[str, str] = V1_KEYS
) -> Iterator[Row]:
    """The rows of a JSON predict body ``{key: [...]}``, one instance at a time. `keys` maps
    each accepted top-level key to what its elements are: "instances" (sparse objects or dense
    rows) or "records" (objects by feature name)."""
    counter = InstanceCounter(model, max_batch)
    if len(body) <= SMALL_JSON:
        key, instances = _small_document(body, keys)
        yield from items_rows(keys[key], key, instances, model, counter)
        return
    head = _HEAD.match(body)
    key = head.group(2).decode() if head else ""
    if key not in keys:
        raise InvalidInstances(
            f"expected a JSON object {_shapes(keys)} (a body over {SMALL_JSON // 1024} KB must "
            "start with one of these keys)"
        )
    for i, (start, end) in enumerate(_instance_spans(body, keys)):
        counter.add()
        yield _large_instance(keys[key], f"{key}[{i}]", body, start, end, model)
    counter.done()


def items_rows(kind: str, key: str, items: list, model: LinearModel, counter=None, max_batch=None):
    """The rows of already parsed instances or records (`kind`), counted against the batch
    limit; `key` names them in messages."""
    counter = counter or InstanceCounter(model, max_batch)
    for i, item in enumerate(items):
        counter.add()
        yield instance_row(kind, f"{key}[{i}]", item, model)
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
        both = sorted(extra & set(keys))
        if both:  # was "unexpected field 'records'; expected only 'instances'", a field it takes
            raise InvalidInstances(f"send '{key}' or '{both[0]}', not both")
        raise InvalidInstances(
            f"unexpected field '{sorted(extra)[0]}'; expected only '{key}' (and 'probabilities')"
        )
    instances = doc[key]
    if not isinstance(instances, list):
        raise InvalidInstances(f"'{key}' must be a list, got {json_type(instances)}")
    return key, instances


def _lenient_json(body, error: Exception):
    """Python's reader, which accepts NaN, Infinity and overflowing numbers (as some clients
    send them), so that the problem can be named by instance instead of by byte offset."""
    try:
        return _python_json(bytes(body))
    except (ValueError, RecursionError):
        raise InvalidInstances(f"the body is not valid JSON: {error}") from None


def _python_json(data: bytes):
    """`json.loads`, refusing (ValueError) what orjson refuses and Python would take: invalid
    UTF-8 (it decodes bytes with surrogates passed) and lone surrogates ("\\ud800" alone). A
    string holding one cannot be encoded again: a message echoing it was a 500."""
    text = data.decode(json.detect_encoding(data))  # strict, as json.loads(data) is not
    doc = json.loads(text)
    if "\\u" in text:  # the only other way to write a surrogate
        json.dumps(doc, ensure_ascii=False).encode("utf-8")  # UnicodeEncodeError: a lone one
    return doc


_WS = re.compile(rb"[ \t\r\n]*")
# "probabilities": true|false may come before or after the instances of a large body too
_FLAG = rb'"probabilities"[ \t\r\n]*:[ \t\r\n]*(true|false)[ \t\r\n]*'
_HEAD = re.compile(
    rb"[ \t\r\n]*\{[ \t\r\n]*(?:" + _FLAG + rb',[ \t\r\n]*)?"([a-z_]{1,32})"[ \t\r\n]*:[ \t\r\n]*\['
)
_TAIL = re.compile(rb"[ \t\r\n]*" + _FLAG)
_FIELD = re.compile(rb'[ \t\r\n]*"([a-z_]{1,32})"[ \t\r\n]*:')
_END_FLAG = re.compile(rb",[ \t\r\n]*" + _FLAG + rb"\}[ \t\r\n]*\Z")
_TAIL_BYTES = 512
# Strings (with escapes) and brackets decide where a JSON value ends; numbers, commas and
# whitespace between them are skipped in C by the search.
_BRACKET_OR_QUOTE = re.compile(rb'["\[\]{}]')
_QUOTE, _OPENING, _WINDOW = ord('"'), frozenset(b"[{"), 1 << 20


def _instance_spans(body: bytes, keys: dict[str, str]) -> Iterator[tuple[int, int]]:
    """(start, end) of each element of a large body's ``instances`` list, found without parsing
    the elements. Bodies of another shape than ``{"instances": [...]}`` are refused."""
    head = _HEAD.match(body)
    pos = _WS.match(body, head.end()).end()
    if body[pos : pos + 1] == b"]":
        return
    while True:
        end = container_end(body, pos)
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
        flag = _TAIL.match(body, pos + 1)
        if flag is None or head.group(1):
            raise _unexpected_field(body, pos + 1, head.group(2).decode(), keys)
        if body[flag.end() : flag.end() + 1] == b",":  # another field after the flag
            raise _unexpected_field(body, flag.end() + 1, head.group(2).decode(), keys)
        if len(body) - pos > _TAIL_BYTES:  # beyond what `large_body_flag` reads: not ignored
            raise InvalidInstances(
                f"'probabilities' after the instances must lie in the body's last {_TAIL_BYTES} "
                "bytes (from the comma before it to the end)"
            )
        pos = flag.end()
    if body[pos : pos + 1] != b"}" or _WS.match(body, pos + 1).end() != len(body):
        raise _not_json(pos, "'}' ending the body")


def _unexpected_field(body: bytes, pos: int, key: str, keys: dict[str, str]) -> InvalidInstances:
    """What is wrong with the field at `pos`, after the `key` list: another of the `keys` (both
    sent, named as the small body's reader names them), or a field the body does not take."""
    field = _FIELD.match(body, pos)
    other = field.group(1).decode() if field else None
    if other in keys and other != key:
        return InvalidInstances(f"send '{key}' or '{other}', not both")
    return InvalidInstances(
        "unexpected field after the instances; expected only 'probabilities' (true or false), once"
    )


def large_body_flag(body: bytes) -> bool | None:
    """What a large body says of ``"probabilities"`` before or after its instances (the span
    reader refuses any other field there): True, False, or None when it does not say."""
    head = _HEAD.match(body)
    if head and head.group(1):
        return head.group(1) == b"true"
    tail = _END_FLAG.search(body, max(0, len(body) - _TAIL_BYTES))
    return None if tail is None else tail.group(1) == b"true"


def _not_json(pos: int, expected: str) -> InvalidInstances:
    return InvalidInstances(f"the body is not valid JSON: expected {expected} at byte {pos}")


def container_end(body: bytes, pos: int) -> int:
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
        raise dense_length_error(where, model, f"more ({commas + 1} or so)")
    if first == b"{" and commas > 2 * row_limit(model) + 1:
        raise too_many_entries(where, model)
    span = memoryview(body)[start:end]
    try:
        inst = orjson.loads(span)
    except orjson.JSONDecodeError as exc:
        try:
            inst = _python_json(span.tobytes())
        except (ValueError, RecursionError):
            raise InvalidInstances(f"the body is not valid JSON: {exc} (in {where})") from None
    return instance_row(kind, where, inst, model)
