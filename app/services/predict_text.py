"""LIBSVM text predict bodies (``[label] idx:val ...`` lines), read into rows.

``#`` comments and blank lines are skipped; a line's entries are counted on its colons before any
number is converted (see `predict_input` for the bounds).
"""

from __future__ import annotations

import codecs
import math
import re
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from app.services.predict_input import (
    InstanceCounter,
    InvalidInstances,
    Row,
    row_limit,
    shorten,
    too_many_entries,
)
from app.services.predict_instance import sparse_row

if TYPE_CHECKING:
    from app.services.prediction import LinearModel

# A line holding an instance: its first non-blank byte is not a comment mark. Blank lines and
# comment lines are skipped inside the regular expression engine.
_NL = b"\n"
_LINE = rb"[ \t\r\f\v]*([^ \t\r\f\v\n#][^\n]*)"
_INSTANCE_LINE = re.compile(rb"^" + _LINE, re.MULTILINE)
# the first line after a UTF-8 byte order mark, which some editors begin a file with: the mark is
# skipped once, as the upload of the same file skips it (match() anchors at a position past it,
# where ^ would not match)
_BOM = "\ufeff".encode()
_LINE_AFTER_BOM = re.compile(_LINE)


def text_rows(body: bytes, model: LinearModel, max_batch: int) -> Iterator[Row]:
    """The rows of LIBSVM lines (``[label] idx:val ...``, ``#`` comments, blank lines skipped)."""
    _check_utf8(body)
    counter = InstanceCounter(model, max_batch)
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
            raise too_many_entries(where, model)
        # at most colons + 2 tokens: a label and the pairs; anything more stays in the last one
        yield _text_row(where, body[start:end].split(None, colons + 1), model)
    counter.done()


def _instance_lines(body: bytes, window: int = 1 << 20):
    """The matches of _INSTANCE_LINE, searched a window of about `window` bytes (ending at a
    newline) at a time: the regular expression engine holds the GIL while it searches, and
    short searches let the event loop run between them."""
    pos, n = 0, len(body)
    if body.startswith(_BOM):  # skipped, not copied off: bodies of 64 MB
        first = _LINE_AFTER_BOM.match(body, len(_BOM))
        if first is not None:
            yield first
        pos = body.find(_NL) + 1 or n
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
            if not any(isinstance(c, str) for c in model.classes):  # text classes: any label
                _number(tokens[0])
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
            if not name.isdigit():  # as the upload's reader: digits only, no sign
                raise ValueError(name)
            i = int(name)
            v = _number(value)
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


def _number(token: bytes) -> float:
    """float(token), without the digit separators ("1_0") Python takes and the upload's reader
    does not: a body read here as the same file is read when uploaded."""
    if b"_" in token:
        raise ValueError(token)
    return float(token)


def _word(token: bytes) -> str:
    """The first word of a token, decoded and shortened, for messages."""
    words = token.split(None, 1)
    return shorten(words[0].decode("utf-8", "replace") if words else "")
