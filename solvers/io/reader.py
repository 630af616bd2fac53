"""Reading sparse datasets in the LIBSVM/SVMlight text format (the driver of the parser).

One example per line: ``label [qid:q] index:value index:value ... [# comment]``. Labels are
integers or reals; indices are strictly increasing within a line and either one-based (LIBSVM's
convention) or zero-based; ``qid`` groups lines (SVMlight's ranking format; a line without it has
qid 0, as in SVMlight). Blank lines and comments are ignored, a line with a label only is a row
with no features, explicit zeros are kept as stored entries.

The text is parsed in chunks by a compiled byte parser (`solvers.io.parser`) straight into
the arrays of the result. For files on disk their final size is extrapolated from the text read
so far; otherwise they grow geometrically; either way they are trimmed in place at the end, so
memory stays near the size of the returned matrix. gzip, bzip2 and xz input is recognised by
its magic bytes.
Every malformed input raises `LibsvmFormatError` naming the line and quoting the text.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from solvers._core.problem import INT32_ENTRIES
from solvers.io import parser as P
from solvers.io.errors import LibsvmFormatError, LibsvmLimitError, format_error, line_too_long
from solvers.io.source import DECOMPRESSION_ERRORS, open_source, read_full

_CHUNK_BYTES = 1 << 20  # bytes of text parsed per compiled call
_GROWTH = 1.5
_INT32_MAX = 2**31 - 1  # also the largest n_features


@dataclass(frozen=True)
class LibsvmData:
    """A parsed file and the conventions it was read with (store them to read its test files).

    X : CSR matrix (n_samples, n_features); y : float64 (n_samples,); qid : int64 (n_samples,)
    when the file has ``qid:`` fields, else None; zero_based : the index base that was used;
    n_features : the number of columns of X.
    """

    X: sp.csr_matrix
    y: np.ndarray
    qid: np.ndarray | None
    zero_based: bool
    n_features: int


def load_libsvm(source, n_features=None, zero_based="auto", dtype=np.float64) -> LibsvmData:
    """Read a LIBSVM/SVMlight file and say which index base and dimension were used.

    Parameters
    ----------
    source : path or binary file object; plain, gzip, bzip2 or xz (detected from the content).
    n_features : int, optional. Columns of X; an index beyond it is an error. Default: the
        largest index in the file (pass the training file's value when reading a test file).
    zero_based : True, False or "auto". "auto" reads the file as zero-based if some index 0
        appears in it and as one-based otherwise (also when it has no index at all).
    dtype : float32 or float64, the type of X's values (parsed straight into it).

    Returns
    -------
    LibsvmData with X (n_samples, n_features) CSR (int32 indices; int64 index arrays only when
    the number of stored entries needs them), y float64 (n_samples,), qid int64 (n_samples,)
    or None when no line has a ``qid:`` field.

    Raises
    ------
    LibsvmFormatError (a ValueError) for malformed, non-text, corrupt-compressed or empty input.
    """
    mode, n_features, dtype = _check_options(n_features, zero_based, dtype)
    with open_source(source) as src:
        reader = _ChunkReader(src, mode, n_features)
        out = _Outputs.for_buffer(reader.buf.shape[0], dtype)
        reader.run(out, max_rows=2**62)
    rows = int(reader.state[P.ROWS])
    if rows == 0:
        raise LibsvmFormatError("no data rows: the input is empty or holds only comments")
    zero_based = _decide_base(reader.state, mode)
    dim = _decide_n_features(reader.state, zero_based, n_features)
    if mode == P.AUTO and not zero_based and out.nnz:
        np.subtract(out.indices, 1, out=out.indices)
    qid = out.qids if reader.state[P.HAS_QID] else None
    X, y, qid = out.finish(rows, dim, keep_qid=qid is not None)
    return LibsvmData(X=X, y=y, qid=qid, zero_based=zero_based, n_features=dim)


def read_libsvm(source, n_features=None, zero_based="auto", dtype=np.float64, query_id=False):
    """Read a LIBSVM/SVMlight file into a CSR matrix and its labels.

    Parameters are those of `load_libsvm`, plus ``query_id``: also return the qid of each row
    (0 for rows without one).

    Returns
    -------
    X : CSR (n_samples, n_features) of ``dtype``; y : float64 (n_samples,);
    qid : int64 (n_samples,), only with ``query_id=True``.
    """
    data = load_libsvm(source, n_features=n_features, zero_based=zero_based, dtype=dtype)
    if not query_id:
        return data.X, data.y
    qid = data.qid if data.qid is not None else np.zeros(data.y.shape[0], dtype=np.int64)
    return data.X, data.y, qid


def iter_libsvm(
    source, *, chunk_rows, n_features, zero_based, dtype=np.float64, query_id=False
) -> Iterator[tuple]:
    """Stream a LIBSVM/SVMlight file as CSR chunks of at most ``chunk_rows`` rows.

    The base and the dimension must be given (a stream cannot look ahead to decide them).
    Memory is bounded by one chunk of text plus one chunk of rows; errors name the line of
    the whole file.

    Yields
    ------
    (X, y) or, with ``query_id=True``, (X, y, qid): X CSR (rows, n_features) of ``dtype``,
    y float64 (rows,), qid int64 (rows,).
    """
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, numbers.Integral):
        raise TypeError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    if chunk_rows < 1:
        raise ValueError(f"chunk_rows must be a positive integer, got {chunk_rows}")
    if n_features is None or zero_based == "auto":
        raise ValueError("iter_libsvm needs explicit n_features and zero_based (True or False)")
    mode, n_features, dtype = _check_options(n_features, zero_based, dtype)
    return _iter_chunks(source, int(chunk_rows), n_features, mode, dtype, query_id)


def _iter_chunks(source, chunk_rows, n_features, mode, dtype, query_id):
    total = 0
    with open_source(source) as src:
        reader = _ChunkReader(src, mode, n_features, estimate=False)
        out = _Outputs(chunk_rows, min(chunk_rows * 16, 1 << 22), dtype)
        while True:
            status = reader.run(out, max_rows=chunk_rows)
            rows = int(reader.state[P.ROWS])
            if rows:
                total += rows
                X, y, qid = out.chunk(rows, n_features)
                yield (X, y, qid) if query_id else (X, y)
                reader.state[P.ROWS] = 0
                reader.state[P.NNZ] = 0
            if status == P.DONE:
                break
    if total == 0:
        raise LibsvmFormatError("no data rows: the input is empty or holds only comments")


class LibsvmChunks:
    """A LIBSVM/SVMlight file read as a stream of raw chunks, in bounded memory.

    Iterating yields ``(indptr, indices, data, labels, qids)`` for up to ``chunk_rows`` rows and
    about ``chunk_nnz`` entries at a time: ``indptr`` int64 starting at 0, ``indices`` int32 as
    written in the file (the index base of a whole file is known only at its end), ``data`` of
    ``dtype``, ``labels`` float64, ``qids`` int64 (0 where a line has none). The arrays are
    reused: copy what is kept. Once iterated, ``zero_based``, ``n_features``, ``has_qid``,
    ``n_rows`` and ``nnz`` describe the file as `load_libsvm` would.

    Limits, checked while reading: a line longer than ``max_line_bytes`` and an index that needs
    more than ``max_features`` columns raise `LibsvmLimitError` naming the line.
    """

    def __init__(
        self, source, *, chunk_rows=65536, chunk_nnz=1 << 20, max_line_bytes=None,
        max_features=None, dtype=np.float64,
    ):  # fmt: skip
        _, self.max_features, self.dtype = _check_options(max_features, "auto", dtype)
        self.source = source
        self.chunk_rows, self.chunk_nnz = int(chunk_rows), int(chunk_nnz)
        self.max_line = max_line_bytes
        self.zero_based = self.n_features = self.has_qid = None
        self.n_rows = self.nnz = 0

    def __iter__(self):
        n_features = -1 if self.max_features is None else self.max_features
        with open_source(self.source) as src:
            reader = _ChunkReader(src, P.AUTO, n_features, estimate=False, max_line=self.max_line)
            out = _Outputs(self.chunk_rows, self.chunk_nnz, self.dtype)
            while True:
                status = reader.run(out, max_rows=self.chunk_rows, grow=False)
                self._check_limit(reader.state)
                rows = int(reader.state[P.ROWS])
                if rows:
                    nnz = int(out.indptr[rows])
                    self.n_rows, self.nnz = self.n_rows + rows, self.nnz + nnz
                    yield (out.indptr[: rows + 1], out.indices[:nnz], out.data[:nnz],
                           out.labels[:rows], out.qids[:rows])  # fmt: skip
                    reader.state[P.ROWS] = 0
                    reader.state[P.NNZ] = 0
                if status == P.DONE:
                    break
        if self.n_rows == 0:
            raise LibsvmFormatError("no data rows: the input is empty or holds only comments")
        self.zero_based = _decide_base(reader.state, P.AUTO)
        largest = int(reader.state[P.MAX_INDEX])
        self.n_features = largest + 1 if self.zero_based else max(largest, 0)
        self.has_qid = bool(reader.state[P.HAS_QID])
        if self.zero_based and reader.state[P.FIRST_EQ]:
            self._too_many(int(reader.state[P.FIRST_EQ]), self.max_features)

    def _check_limit(self, state):
        if state[P.FIRST_GT]:
            self._too_many(int(state[P.FIRST_GT]), int(state[P.FIRST_GT_INDEX]))

    def _too_many(self, line, index):
        raise LibsvmLimitError(
            f"line {line}: feature index {index} is beyond the limit of {self.max_features} "
            "features",
            line,
        )


class _Outputs:
    """Growable result arrays handed to the compiled parser."""

    def __init__(self, rows, nnz, dtype):
        rows, nnz = max(int(rows), 1), max(int(nnz), 16)
        self.labels = np.empty(rows, dtype=np.float64)
        self.qids = np.empty(rows, dtype=np.int64)
        self.indptr = np.zeros(rows + 1, dtype=np.int64)
        self.indices = np.empty(nnz, dtype=np.int32)
        self.data = np.empty(nnz, dtype=dtype)
        self.rows = 0  # stored so far
        self.nnz = 0

    @classmethod
    def for_buffer(cls, buffer_bytes, dtype):
        # Room for any first buffer's entries (each takes at least 4 bytes, "i:v ") and for
        # lines of 16 bytes on average; kept under the 4 MB above which numpy asks for huge
        # pages, which would make each touched page of a small result cost 2 MB.
        return cls(buffer_bytes // 16 + 16, buffer_bytes // 4 + 16, dtype)

    def grow(self, rows_needed, nnz_needed):
        """Room for at least the given counts, growing geometrically."""
        rows, nnz = self.labels.shape[0], self.indices.shape[0]
        self.reserve(
            max(rows_needed, int(rows * _GROWTH)) if rows_needed > rows else rows,
            max(nnz_needed, int(nnz * _GROWTH)) if nnz_needed > nnz else nnz,
        )

    def reserve(self, rows, nnz):
        """Capacity for ``rows`` rows and ``nnz`` entries (never less than what is stored).

        New arrays are left uninitialised and only the stored part is copied, so the kernel
        touches the new pages only as it fills them (``ndarray.resize`` would zero them all).
        """
        if rows > self.labels.shape[0]:
            self.labels = _extended(self.labels, rows, self.rows)
            self.qids = _extended(self.qids, rows, self.rows)
            self.indptr = _extended(self.indptr, rows + 1, self.rows + 1)
        if nnz > self.indices.shape[0]:
            self.indices = _extended(self.indices, nnz, self.nnz)
            self.data = _extended(self.data, nnz, self.nnz)

    def finish(self, rows, n_features, keep_qid):
        """Trim in place (no copy of the entries) and wrap as CSR."""
        nnz = int(self.indptr[rows])
        for name, size in (("labels", rows), ("qids", rows), ("indptr", rows + 1)):
            getattr(self, name).resize(size, refcheck=False)
        self.indices.resize(nnz, refcheck=False)
        self.data.resize(nnz, refcheck=False)
        indptr, indices = _index_arrays(self.indptr, self.indices)
        X = _csr(self.data, indices, indptr, rows, n_features)
        return X, self.labels, (self.qids if keep_qid else None)

    def chunk(self, rows, n_features):
        """Copies of the first ``rows`` rows (the arrays are reused for the next chunk)."""
        nnz = int(self.indptr[rows])
        indptr, indices = _index_arrays(self.indptr[: rows + 1], self.indices[:nnz])
        X = _csr(self.data[:nnz].copy(), indices.copy(), indptr.copy(), rows, n_features)
        return X, self.labels[:rows].copy(), self.qids[:rows].copy()


def _extended(array, size, used):
    out = np.empty(size, dtype=array.dtype)
    out[:used] = array[:used]
    return out


def _index_arrays(indptr, indices):
    # one of the input door's index pairs: int32 unless the entry count needs int64
    if indptr[-1] <= INT32_ENTRIES:
        return indptr.astype(np.int32), indices
    return indptr, indices.astype(np.int64)


def _csr(data, indices, indptr, rows, n_features):
    return sp.csr_matrix((data, indices, indptr), shape=(rows, n_features), copy=False)


class _ChunkReader:
    """Feeds the text to the compiled parser one buffer at a time and turns failures into errors."""

    def __init__(self, src, mode, n_features, estimate=True, max_line=None):
        self.src = src
        self.max_line = max_line
        self.mode = mode
        self.n_features = -1 if n_features is None else n_features
        size = _CHUNK_BYTES if src.size is None else min(_CHUNK_BYTES, max(src.size, 1 << 16))
        if max_line is not None:  # a line that fills the buffer is then over the limit
            size = min(size, max_line + 1)
        self.buf = np.empty(size + 1, dtype=np.uint8)
        self.filled = 0
        self.read = 0  # bytes of text read so far
        self.eof = False
        self.estimate = estimate and src.size is not None
        self._estimate_after = size if src.compression is None else 16 * size
        self.state = np.zeros(P.STATE_SIZE, dtype=np.int64)
        self.state[P.LINE] = 1
        self.state[P.MAX_INDEX] = -1
        self.state[P.MIN_INDEX] = np.iinfo(np.int64).max

    def run(self, out, max_rows, grow=True):
        """Parse until the input ends (DONE) or ``max_rows`` rows are stored (ROWS_FULL); without
        ``grow``, also stop when the outputs are full (NEED_SPACE) and hold a row or more."""
        if self.filled == 0 and not self.eof:
            self._fill()
            if bytes(self.buf[:3]) == b"\xef\xbb\xbf" and self.filled >= 3:
                self.state[P.POS] = 3  # a UTF-8 byte-order mark, as some editors write
        while True:
            self.buf[self.filled] = 10  # a newline past the data stops every number scan
            status = P.parse_lines(
                self.buf, self.filled, self.eof, self.state, out.labels, out.qids,
                out.indptr, out.indices, out.data, self.mode, self.n_features, max_rows,
            )  # fmt: skip
            out.rows, out.nnz = int(self.state[P.ROWS]), int(self.state[P.NNZ])
            if status == P.FAILED:
                raise self._error()
            if status == P.ROWS_FULL:
                return status
            if status == P.NEED_SPACE:
                if not grow and self.state[P.ROWS] > 0:
                    return status
                out.grow(int(self.state[P.ROWS]) + 1, int(self.state[P.NEED]))
            elif self.eof:
                return P.DONE
            else:
                if self.estimate and self.read >= self._estimate_after:
                    self._reserve_for_the_whole_file(out)
                self._fill()

    def _reserve_for_the_whole_file(self, out):
        # Extrapolate the rows and entries per byte of text seen so far to the whole file (for
        # compressed files through the compression ratio so far, after several buffers since
        # decompressors read ahead), with a margin: the arrays are then allocated about once
        # instead of growing and being copied.
        self.estimate = False
        parsed = self.read - (self.filled - int(self.state[P.POS]))
        consumed = self.src.position()
        if parsed <= 0 or consumed <= 0:
            return
        scale = 1.1 * self.src.size * self.read / consumed / parsed
        state = self.state
        out.reserve(int(state[P.ROWS] * scale) + 1024, int(state[P.NNZ] * scale) + 1024)

    def _fill(self):
        start = int(self.state[P.POS])
        tail = self.filled - start
        if tail:
            self.buf[:tail] = self.buf[start : self.filled]
        if tail == self.buf.shape[0] - 1:  # one line longer than the buffer
            if self.max_line is not None and tail >= self.max_line:
                raise line_too_long(int(self.state[P.LINE]), self.buf[:tail], self.max_line)
            size = 2 * self.buf.shape[0] - 1
            if self.max_line is not None:
                size = min(size, self.max_line + 2)
            self.buf.resize(size, refcheck=False)
        self.state[P.POS] = 0
        view = memoryview(self.buf)[tail : self.buf.shape[0] - 1]
        try:
            got = read_full(self.src.stream, view)
        except DECOMPRESSION_ERRORS as exc:
            if self.src.compression is None:
                raise
            raise LibsvmFormatError(
                f"line {self.state[P.LINE]}: corrupt or truncated {self.src.compression} data "
                f"({exc})",
                int(self.state[P.LINE]),
            ) from None
        self.filled = tail + got
        self.read += got
        self.eof = got < len(view)

    def _error(self):
        line_end = self.filled + 1  # the newline stored past the data ends the last line
        return format_error(self.buf[:line_end], self.state, self.mode, self.n_features)


def _decide_base(state, mode):
    if mode != P.AUTO:
        return mode == P.ZERO_BASED
    return bool(state[P.MAX_INDEX] >= 0 and state[P.MIN_INDEX] == 0)


def _decide_n_features(state, zero_based, n_features):
    largest = int(state[P.MAX_INDEX])
    needed = largest + 1 if zero_based else max(largest, 0)
    if n_features is None:
        return needed
    first_gt, first_eq = int(state[P.FIRST_GT]), int(state[P.FIRST_EQ])
    bad = [line for line in (first_gt, first_eq if zero_based else 0) if line]
    if bad:
        line = min(bad)
        index = int(state[P.FIRST_GT_INDEX]) if line == first_gt else n_features
        base = "zero-based" if zero_based else "one-based"
        raise LibsvmFormatError(
            f"line {line}: index {index} is out of range for n_features={n_features} "
            f"(the file reads as {base}; it needs {needed} features)",
            line,
        )
    return n_features


def _check_options(n_features, zero_based, dtype):
    if n_features is not None:
        if isinstance(n_features, bool) or not isinstance(n_features, numbers.Integral):
            raise TypeError(f"n_features must be an integer or None, got {n_features!r}")
        if not 0 <= n_features <= _INT32_MAX:
            raise ValueError(f"n_features must be in [0, {_INT32_MAX}], got {n_features}")
        n_features = int(n_features)
    if isinstance(zero_based, str) and zero_based == "auto":
        mode = P.AUTO
    elif isinstance(zero_based, bool | np.bool_):
        mode = P.ZERO_BASED if zero_based else P.ONE_BASED
    else:
        raise ValueError(f"zero_based must be True, False or 'auto', got {zero_based!r}")
    dtype = np.dtype(dtype)
    if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise ValueError(f"dtype must be float32 or float64, got {dtype}")
    return mode, n_features, dtype
