"""Error messages for malformed LIBSVM/SVMlight text, built from the compiled parser's report.

Every message names the 1-based line and quotes the offending text (shortened to about 60
characters), e.g. ``line 12: expected 'index:value', got 'abc'``. A line holding a NUL byte or
bytes that are not UTF-8 is reported as not being text at all.
"""

import numpy as np

from solvers.io import parser as P

_QUOTE_LIMIT = 60


class LibsvmFormatError(ValueError):
    """Malformed LIBSVM/SVMlight input; ``line`` is the 1-based line number (None if global)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line

    def __reduce__(self):  # keep ``line`` when the error crosses a process boundary
        return type(self), (str(self), self.line)


class LibsvmLimitError(LibsvmFormatError):
    """Input that is well formed so far but crosses a limit the reader was given (a line longer
    than ``max_line_bytes``, an index beyond ``max_features``)."""


def line_too_long(line_no, head, limit):
    """The error for a line longer than ``limit`` bytes; ``head`` is its start (named when it is
    not text at all, as a run of NUL bytes is)."""
    problem = _not_text(bytes(head[:65536]))
    if problem:
        return LibsvmFormatError(f"line {line_no}: not a text file: {problem}", line_no)
    return LibsvmLimitError(
        f"line {line_no}: longer than {limit} bytes, the longest line accepted", line_no
    )


def format_error(buf, state, mode, n_features):
    """The error for the failure `parse_lines` recorded in ``state``.

    ``buf`` holds the text the parser read, up to and including a newline that ends the failing
    line; ``mode`` and ``n_features`` are the options it was given.
    """
    line_no = int(state[P.LINE])
    start = int(state[P.POS])
    stop = int(np.argmax(buf[start:] == 10)) + start
    problem = _not_text(bytes(buf[start:stop]))
    if problem or state[P.ERROR] == P.E_NOT_TEXT:
        return LibsvmFormatError(f"line {line_no}: not a text file: {problem}", line_no)
    token = bytes(buf[state[P.ERR_START] : state[P.ERR_END]]).decode()
    message = _describe(int(state[P.ERROR]), token, int(state[P.ERR_PREV]), mode, n_features)
    return LibsvmFormatError(f"line {line_no}: {message}", line_no)


def _not_text(line):
    nul = line.find(b"\0")
    if nul >= 0:
        return f"NUL byte at column {nul + 1}"
    try:
        line.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at column {exc.start + 1}"
    return ""


def _quote(text):
    if len(text) > _QUOTE_LIMIT:
        text = text[: _QUOTE_LIMIT - 3] + "..."
    return f"'{text}'"


def _is_non_finite_word(token):
    return token.lstrip("+-").lower() in {"nan", "inf", "infinity"}


def _describe(code, token, prev, mode, n_features):
    got = _quote(token)
    value = token.partition(":")[2]
    if code == P.E_LABEL and _is_non_finite_word(token) or code == P.E_LABEL_INF:
        return f"expected a finite label, got {got}"
    if code == P.E_LABEL:
        return f"expected a numeric label, got {got}"
    if code == P.E_VALUE and _is_non_finite_word(value) or code == P.E_VALUE_INF:
        return f"expected a finite value, got {got}"
    if code == P.E_VALUE:
        return f"expected a numeric value in 'index:value', got {got}"
    if code == P.E_RANGE:
        return f"value out of range for float32, got {got}"
    if code == P.E_PAIR and token.startswith("qid:"):
        return f"'qid:' may appear once, right after the label, got {got}"
    if code == P.E_PAIR:
        return f"expected 'index:value', got {got}"
    if code == P.E_QID:
        return f"expected 'qid:<integer>', got {got}"
    if code == P.E_INDEX_NEG:
        return f"expected a non-negative index, got {got}"
    if code == P.E_INDEX_ZERO:
        return f"index 0 in a one-based file (zero_based=False), got {got}"
    if code == P.E_INDEX_BIG:
        return f"index too large (at most {P.MAX_RAW_INDEX}), got {got}"
    if code == P.E_ORDER:
        if int(token.split(":")[0]) == prev:
            return f"duplicate index {prev}: got {got}"
        return f"indices must be strictly increasing within a line: got {got} after index {prev}"
    base = "zero-based" if mode == P.ZERO_BASED else "one-based"
    return f"index out of range for n_features={n_features} ({base}), got {got}"
