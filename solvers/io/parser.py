"""Compiled byte parser for LIBSVM/SVMlight text: ``label [qid:q] index:value ... [# comment]``.

`parse_lines` reads complete lines from a byte buffer into pre-allocated output arrays and stops
when the buffer holds no further complete line, when the outputs are full, or at the first
malformed token. The Python driver (`solvers.io`) owns the reading, the growing of the arrays and
the error messages; the kernel only reports codes and byte offsets through the ``state`` array.

Numbers are converted exactly. A decimal with at most 18 significant digits whose integer
mantissa fits a double exactly (at most 2**53) and whose decimal exponent is within +-22 is one
correctly rounded multiplication or division by an exact power of ten (Clinger's fast path).
Anything else goes to the C library's ``strtod``, so every value is bit-identical to Python's
``float``; the token syntax is validated before either path runs.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# Index of each field in the int64 ``state`` array shared with the driver.
POS = 0  # next byte to read
LINE = 1  # 1-based number of the line that starts at POS
ROWS = 2  # rows stored so far
NNZ = 3  # entries stored so far
MAX_INDEX = 4  # largest index seen, as written (-1 before any)
MIN_INDEX = 5  # smallest index seen, as written
HAS_QID = 6  # 1 once some row carried a qid field
FIRST_GT = 7  # first line with an index > n_features (auto base only; 0 if none)
FIRST_GT_INDEX = 8  # that index
FIRST_EQ = 9  # first line with an index == n_features (auto base only; 0 if none)
ERROR = 10  # error code, see E_* below
ERR_START = 11  # offending token: first byte
ERR_END = 12  # offending token: one past its last byte
ERR_PREV = 13  # previous index on the line, for ordering errors
NEED = 14  # entries the line that did not fit needs
STATE_SIZE = 15

# Return codes of `parse_lines`.
DONE = 0  # every line of the buffer was read
NEED_INPUT = 1  # stopped at an incomplete last line; POS is its start
NEED_SPACE = 2  # output arrays full; POS is the start of the line that did not fit
ROWS_FULL = 3  # ``max_rows`` rows stored
FAILED = 4  # malformed input; ERROR and ERR_* describe it

# Error codes.
E_LABEL = 1
E_LABEL_INF = 2
E_PAIR = 3
E_INDEX_NEG = 4
E_INDEX_ZERO = 5
E_ORDER = 6
E_VALUE = 7
E_VALUE_INF = 8
E_INDEX_BIG = 9
E_EXCEEDS = 10
E_QID = 11
E_NOT_TEXT = 12
E_RANGE = 13

# Number parsing outcomes.
NUM_OK = 0
NUM_SYNTAX = 1
NUM_INFINITE = 2

# Zero-based modes.
ONE_BASED = 0
ZERO_BASED = 1
AUTO = 2

MAX_RAW_INDEX = 2**31 - 2  # so that n_features fits an int32 in either base
_EXACT_MANTISSA = 2**53
_POW10 = np.array([10.0**k for k in range(23)])

_SPACE, _TAB, _CR, _LF, _HASH, _COLON = 32, 9, 13, 10, 35, 58
_PLUS, _MINUS, _DOT, _ZERO, _NINE = 43, 45, 46, 48, 57


@intrinsic
def _strtod(typingctx, buf, start):
    """The C library's correctly rounded decimal-to-double conversion at ``buf[start]``."""
    sig = types.float64(buf, start)

    def codegen(context, builder, signature, args):
        array = context.make_array(signature.args[0])(context, builder, args[0])
        char_p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.DoubleType(), [char_p, char_p.as_pointer()])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "strtod")
        ptr = builder.bitcast(builder.gep(array.data, [args[1]]), char_p)
        return builder.call(fn, [ptr, ir.Constant(char_p.as_pointer(), None)])

    return sig, codegen


@njit(cache=True, nogil=True)
def _is_space(c):
    return c == _SPACE or (_TAB <= c <= _CR)


@njit(cache=True, nogil=True)
def _token_end(buf, p, stop):
    while p < stop and not _is_space(buf[p]) and buf[p] != _HASH:
        p += 1
    return p


@njit(cache=True, nogil=True)
def _digits(buf, p, acc):
    """Accumulate the decimal digits at ``buf[p:]`` into ``acc``; returns (acc, end)."""
    while _ZERO <= buf[p] <= _NINE:
        acc = acc * 10 + (buf[p] - _ZERO)
        p += 1
    return acc, p


@njit(cache=True, nogil=True)
def _parse_number(buf, p):
    """Decimal at ``buf[p:]``; returns (value, end, status) with status NUM_OK, NUM_SYNTAX or
    NUM_INFINITE. The line must end with a newline byte, which stops every scan."""
    start = p
    negative = buf[p] == _MINUS
    if negative or buf[p] == _PLUS:
        p += 1
    first = p
    mantissa = 0
    while _ZERO <= buf[p] <= _NINE:
        mantissa = mantissa * 10 + (buf[p] - _ZERO)
        p += 1
    n_digits = p - first
    exp10 = 0
    if buf[p] == _DOT:
        first = p + 1
        p = first
        while _ZERO <= buf[p] <= _NINE:
            mantissa = mantissa * 10 + (buf[p] - _ZERO)
            p += 1
        exp10 = first - p
        n_digits += p - first
    if n_digits == 0:
        return 0.0, p, NUM_SYNTAX
    if buf[p] == 101 or buf[p] == 69:  # e, E
        p += 1
        exp_negative = buf[p] == _MINUS
        if exp_negative or buf[p] == _PLUS:
            p += 1
        first = p
        while _ZERO <= buf[p] <= _NINE:
            p += 1
        if p == first:
            return 0.0, p, NUM_SYNTAX
        if p - first > 9:
            exp10 = -999_999_999 if exp_negative else 999_999_999
        else:
            e, _ = _digits(buf, first, 0)
            exp10 += -e if exp_negative else e
    # At most 18 digits cannot overflow int64; an exact mantissa and power of ten make one
    # correctly rounded operation.
    if n_digits <= 18 and mantissa <= _EXACT_MANTISSA and -22 <= exp10 <= 22:
        value = float(mantissa)
        value = value * _POW10[exp10] if exp10 >= 0 else value / _POW10[-exp10]
        return (-value if negative else value), p, NUM_OK
    value = _strtod(buf, start)
    return value, p, (NUM_OK if np.isfinite(value) else NUM_INFINITE)


@njit(cache=True, nogil=True)
def _utf8_error(buf, p, stop):
    """Offset of the first NUL byte or invalid UTF-8 sequence in ``buf[p:stop]``, or -1."""
    while p < stop:
        c = buf[p]
        if c == 0:
            return p
        if c < 0x80:
            p += 1
            continue
        if 0xC2 <= c <= 0xDF:
            n, lo, hi = 1, 0x80, 0xBF
        elif 0xE0 <= c <= 0xEF:
            n, lo, hi = 2, (0xA0 if c == 0xE0 else 0x80), (0x9F if c == 0xED else 0xBF)
        elif 0xF0 <= c <= 0xF4:
            n, lo, hi = 3, (0x90 if c == 0xF0 else 0x80), (0x8F if c == 0xF4 else 0xBF)
        else:
            return p
        if p + n >= stop or not (lo <= buf[p + 1] <= hi):
            return p
        for k in range(2, n + 1):
            if not (0x80 <= buf[p + k] <= 0xBF):
                return p
        p += n + 1
    return -1


@njit(cache=True, nogil=True)
def _fail(state, code, buf, start, stop, prev):
    state[ERROR] = code
    state[ERR_START] = start
    state[ERR_END] = _token_end(buf, start, stop)
    state[ERR_PREV] = prev
    return FAILED


@njit(cache=True, nogil=True)
def _ends_token(c):
    return c == _SPACE or (_TAB <= c <= _CR) or c == _HASH


@njit(cache=True, nogil=True)
def _parse_qid(buf, p):
    """Signed integer after ``qid:`` ending a token; returns (value, end, ok)."""
    negative = buf[p] == _MINUS
    if negative or buf[p] == _PLUS:
        p += 1
    first = p
    value, p = _digits(buf, p, 0)
    ok = 0 < p - first <= 18 and _ends_token(buf[p])
    return (-value if negative else value), p, ok


@njit(cache=True, nogil=True)
def _comment_error(state, buf, p, eol):
    bad = _utf8_error(buf, p, eol)
    if bad < 0:
        return DONE
    state[ERROR] = E_NOT_TEXT
    state[ERR_START] = bad
    state[ERR_END] = bad + 1
    return FAILED


@njit(cache=True, nogil=True)
def _index_problem(index, digits, prev, shift, limit):
    """0 for a valid index of ``digits`` digits after ``prev`` on its line, else the error code
    (E_EXCEEDS: beyond ``limit``, an error unless the base is still to be decided)."""
    if digits > 18 or index > MAX_RAW_INDEX:
        return E_INDEX_BIG
    if index <= prev:
        return E_ORDER
    if index < shift:
        return E_INDEX_ZERO
    if index > limit:
        return E_EXCEEDS
    return 0


@njit(cache=True, nogil=True)
def _note_out_of_range(state, index, n_features, line):
    """In AUTO mode, remember the first line with an index > n_features or == n_features: which
    of them is an error depends on the base, decided at the end of the file."""
    if index > n_features and state[FIRST_GT] == 0:
        state[FIRST_GT] = line
        state[FIRST_GT_INDEX] = index
    elif index == n_features and state[FIRST_EQ] == 0:
        state[FIRST_EQ] = line


@njit(cache=True, nogil=True)
def parse_lines(
    buf, end, final, state, labels, qids, indptr, indices, data, mode, n_features, max_rows
):
    """Parse the complete lines of ``buf[state[POS]:end]`` into the output arrays.

    Parameters
    ----------
    buf : uint8 array, length > end; ``buf[end]`` must be a newline (it stops every scan).
    end : number of valid bytes.
    final : whether ``buf[:end]`` ends the input (its last line then needs no newline).
    state : int64 array of length STATE_SIZE, read and updated (see the field names above).
    labels : float64 (capacity,); qids : int64 (capacity,); indptr : int64 (capacity + 1,).
    indices : int32 (nnz capacity,), stored minus one in ONE_BASED mode, as written otherwise.
    data : float32 or float64 (nnz capacity,).
    mode : ONE_BASED, ZERO_BASED or AUTO. n_features : int, or -1 when not given.
    max_rows : stop with ROWS_FULL once this many rows are stored.

    Returns
    -------
    One of DONE, NEED_INPUT, NEED_SPACE, ROWS_FULL, FAILED.
    """
    pos = state[POS]
    line = state[LINE]
    row = state[ROWS]
    nnz = state[NNZ]
    max_index = state[MAX_INDEX]
    min_index = state[MIN_INDEX]
    shift = 1 if mode == ONE_BASED else 0
    if n_features < 0:
        limit = MAX_RAW_INDEX
    elif mode == ONE_BASED:
        limit = n_features
    else:
        limit = n_features - 1
    status = DONE
    while pos < end:
        eol = pos
        while buf[eol] != _LF:
            eol += 1
        if eol == end and not final:
            status = NEED_INPUT
            break
        p = pos
        while p < eol and _is_space(buf[p]):
            p += 1
        if p == eol or buf[p] == _HASH:
            status = _comment_error(state, buf, p, eol)
            if status == FAILED:
                break
            pos = eol + 1
            line += 1
            continue
        if row >= max_rows:
            status = ROWS_FULL
            break
        need = (eol - p) // 4 + 1
        if row >= labels.shape[0] or nnz + need > indices.shape[0]:
            state[NEED] = nnz + need
            status = NEED_SPACE
            break
        token = p
        label, p, num = _parse_number(buf, p)
        if num != NUM_OK or not _ends_token(buf[p]):
            code = E_LABEL_INF if num == NUM_INFINITE and _ends_token(buf[p]) else E_LABEL
            status = _fail(state, code, buf, token, eol, -1)
            break
        qid = 0
        seen_qid = False
        prev = -1
        row_nnz = nnz
        while True:
            while p < eol and _is_space(buf[p]):
                p += 1
            if p == eol:
                break
            token = p
            c = buf[p]
            if c == _HASH:
                status = _comment_error(state, buf, p, eol)
                break
            if c == 113 and prev == -1 and buf[p + 1] == 105 and buf[p + 2] == 100:  # qid
                if buf[p + 3] == _COLON and not seen_qid:
                    seen_qid = True
                    qid, p, ok = _parse_qid(buf, p + 4)
                    if not ok:
                        status = _fail(state, E_QID, buf, token, eol, -1)
                        break
                    state[HAS_QID] = 1
                    continue
            index = 0
            while _ZERO <= buf[p] <= _NINE:
                index = index * 10 + (buf[p] - _ZERO)
                p += 1
            if buf[p] != _COLON or p == token:
                negative = c == _MINUS and _ZERO <= buf[token + 1] <= _NINE
                code = E_INDEX_NEG if negative else E_PAIR
                status = _fail(state, code, buf, token, eol, prev)
                break
            code = _index_problem(index, p - token, prev, shift, limit)
            if code == E_EXCEEDS and mode == AUTO:  # decided once the base is known
                _note_out_of_range(state, index, n_features, line)
            elif code != 0:
                status = _fail(state, code, buf, token, eol, prev)
                break
            # The common case (plain decimal, no exponent, at most 18 digits) is parsed here:
            # Numba does not inline calls that return tuples, and a call per entry halves the
            # speed. Anything else goes through _parse_number, which gives the same result.
            p += 1
            start = p
            negative = buf[p] == _MINUS
            if negative or buf[p] == _PLUS:
                p += 1
            first = p
            mantissa = 0
            while _ZERO <= buf[p] <= _NINE:
                mantissa = mantissa * 10 + (buf[p] - _ZERO)
                p += 1
            n_digits = p - first
            exp10 = 0
            if buf[p] == _DOT:
                p += 1
                first = p
                while _ZERO <= buf[p] <= _NINE:
                    mantissa = mantissa * 10 + (buf[p] - _ZERO)
                    p += 1
                exp10 = first - p
                n_digits += p - first
            fast = 0 < n_digits <= 18 and mantissa <= _EXACT_MANTISSA and exp10 >= -22
            if fast and buf[p] != 101 and buf[p] != 69:  # no e, E
                value = float(mantissa)
                value = value / _POW10[-exp10] if exp10 < 0 else value
                value = -value if negative else value
                num = NUM_OK
            else:
                value, p, num = _parse_number(buf, start)
            if num != NUM_OK or not _ends_token(buf[p]):
                code = E_VALUE_INF if num == NUM_INFINITE and _ends_token(buf[p]) else E_VALUE
                status = _fail(state, code, buf, token, eol, prev)
                break
            indices[nnz] = index - shift
            data[nnz] = value
            if np.isinf(data[nnz]):  # finite as float64, beyond float32's range
                status = _fail(state, E_RANGE, buf, token, eol, prev)
                break
            nnz += 1
            prev = index
        if status == FAILED:
            break
        if nnz > row_nnz:
            max_index = max(max_index, prev)
            min_index = min(min_index, indices[row_nnz] + shift)
        labels[row] = label
        qids[row] = qid
        row += 1
        indptr[row] = nnz
        pos = eol + 1
        line += 1
    state[POS] = min(pos, end)
    state[LINE] = line
    state[ROWS] = row
    state[NNZ] = nnz
    state[MAX_INDEX] = max_index
    state[MIN_INDEX] = min_index
    return status
