"""CSV and TSV uploads: a header row, a label column and numeric features, read as they stream.

The header names the columns. The label is the column named `label_column` (default ``label``;
without such a column, the first column), every other column is a feature, in order: feature j
(zero-based) is the j-th non-label column, and the names are kept as the dataset's feature names.
Cells are numbers (quoted or not); an empty cell is an error, or 0 with ``empty_cells="zero"``.
A row is one line: a line break inside a quoted cell is a 422 naming the line the row starts
on (the text is cut into blocks at line ends, and a row cut in two would be read as two).
Zeros are not stored: the rows become the same CSR arrays as a LIBSVM file's.

Bounds, checked while the text streams (the reader never holds more than one block of lines):
the header's column count (MAX_FEATURES + 1, before it is split), every line's length
(MAX_LINE_MB), and the decompressed size (by `app.limits.open_expanded`, before this reader).
Blocks of whole lines are converted by numpy's C reader; a block that fails is read again line by
line to name the line and column at fault.
"""

from __future__ import annotations

import csv
import io
import itertools
import re
from typing import BinaryIO

import numpy as np

from app.services.formats.labels import LabelColumn, refuse_nul
from solvers.io import LibsvmLimitError

BLOCK_BYTES = 4 << 20  # text converted at a time
MAX_COLUMNS = 100_000  # a table's columns: each is a dense column and a kept name
EMPTY_POLICIES = ("error", "zero")


class DelimitedChunks:
    """Row chunks of a CSV (`sep` ``,``) or TSV (``\\t``) upload, for `DatasetWriter`."""

    zero_based = True
    has_qid = False

    def __init__(
        self,
        stream: BinaryIO,
        sep: str,
        limits: dict,
        label_column: str | None = None,
        empty_cells: str = "error",
    ):
        self.stream = stream
        self.sep = sep
        self.max_line = limits.get("max_line") or 2**62
        self.max_features = limits.get("max_features") or 2**31 - 2
        self.label_column = label_column
        self.empty_cells = empty_cells
        self.n_rows = 0
        self.names: list[str] = []
        self.label_at = 0
        self._tail = b""
        self._empty = _empty_cell_pattern(sep)
        zero = " (send empty_cells=zero to read empty cells as 0)" if empty_cells == "error" else ""
        self.labels = LabelColumn(empty_hint=zero)

    @property
    def n_features(self) -> int:
        return max(len(self.names) - 1, 0)

    def label_text(self) -> dict | None:
        return self.labels.text()

    @property
    def feature_names(self) -> list[str]:
        return [n for i, n in enumerate(self.names) if i != self.label_at]

    # ------------------------------------------------------------------------------------
    def __iter__(self):
        self._read_header()
        line = 2  # the file line of the block's first row
        for block in self._blocks():
            rows = self._convert(block, line)
            if rows is None:
                continue
            line += block.count(b"\n")
            self.n_rows += rows.shape[0]
            yield self._csr(rows)
        if self.n_rows == 0:
            raise ValueError("the file has a header but no rows")

    def _read_header(self) -> None:
        header = self._first_line()
        text = _decode(header, 1).strip("\r\n\ufeff")
        if not text.strip():
            raise ValueError("line 1: expected a header row naming the columns")
        if text.count(self.sep) > min(self.max_features, MAX_COLUMNS - 1):
            raise LibsvmLimitError(
                f"line 1: more than {min(self.max_features + 1, MAX_COLUMNS)} columns (at most "
                f"MAX_FEATURES features and a label, and {MAX_COLUMNS} columns in a table; "
                "send wider data as LIBSVM, npz or a sparse Parquet column)",
                1,
            )
        names = [name.strip() for name in next(_records([text], 1, self.sep))[1]]
        for i, name in enumerate(names):
            if not name:
                raise ValueError(f"line 1: column {i + 1} has no name")
            refuse_nul(name, f"line 1: column {i + 1}: the name")
        seen: dict[str, int] = {}
        for i, name in enumerate(names):
            if name in seen:
                raise ValueError(
                    f"line 1: the column name {name!r} appears twice (columns {seen[name] + 1} "
                    f"and {i + 1})"
                )
            seen[name] = i
        if len(names) < 2:
            raise ValueError("line 1: expected a label column and at least one feature column")
        wanted = self.label_column or "label"
        if wanted in seen:
            self.label_at = seen[wanted]
        elif self.label_column is not None:
            raise ValueError(f"label_column: the header has no column named {wanted!r}")
        self.names = names

    def _first_line(self) -> bytes:
        buffer = b""
        while True:
            cut = buffer.find(b"\n")
            if cut >= 0:
                self._tail = buffer[cut + 1 :]
                return buffer[:cut]
            if len(buffer) > self.max_line:
                raise _line_too_long(1, self.max_line)
            more = self.stream.read(1 << 16)
            if not more:
                if not buffer:
                    raise ValueError("the file is empty")
                return buffer
            buffer += more

    def _blocks(self):
        """Whole lines, about BLOCK_BYTES at a time; 413 for a line over MAX_LINE_MB."""
        pending = self._tail
        line = 2
        while True:
            more = self.stream.read(BLOCK_BYTES)
            pending += more
            if not more and not pending:
                return
            cut = pending.rfind(b"\n") if more else len(pending) - 1
            if cut < 0:
                if len(pending) > self.max_line:
                    raise _line_too_long(line, self.max_line)
                continue
            block, pending = pending[: cut + 1], pending[cut + 1 :]
            if len(block) > self.max_line:
                _check_lines(block, line, self.max_line)
            line += block.count(b"\n")
            if block:
                yield block
            if not more:
                return

    def _convert(self, block: bytes, line: int) -> np.ndarray | None:
        """The block's rows as numbers; the label column holds the labels or their class codes
        (`LabelColumn`)."""
        raw = block
        if b'"' in raw:  # only a quote opens a cell that could hold a line break
            _check_one_line_rows(raw, line, self.sep)
        if self.empty_cells == "zero":
            block = self._empty.sub(b"0", block)
        try:
            rows = self._read(block)
        except ValueError:
            return self._convert_text(raw, block, line)  # text labels, or a bad cell to name
        if rows.size == 0:
            return None
        if rows.shape[1] != len(self.names):
            raise self._locate(block, line)
        self._check_finite(rows, block, line)
        if len(block) != len(raw):  # empty cells were read as 0: was a label among them?
            self._zeroed_labels(raw, line)
        rows[:, self.label_at] = self.labels.numeric(
            rows[:, self.label_at], lambda r: f"line {_record(block, line, self.sep, r)[0]}"
        )
        return rows

    def _zeroed_labels(self, raw: bytes, line: int) -> None:
        """Tell `LabelColumn` of the first empty label cell of a block as sent: 0 in a numeric
        column, but no class name in a text one (numpy reads the one column fast)."""
        cells = self._read(raw, [self.label_at], dtype=str)[:, 0]
        empty = np.flatnonzero(np.char.strip(cells) == "")
        if empty.size:
            self.labels.zeroed(f"line {_record(raw, line, self.sep, int(empty[0]))[0]}")

    def _read(self, block: bytes, columns: list[int] | None = None, dtype=np.float64):
        return np.loadtxt(
            io.BytesIO(block),
            delimiter=self.sep,
            dtype=dtype,
            ndmin=2,
            quotechar='"',
            encoding="utf-8",
            comments=None,
            usecols=columns,
        )

    def _check_finite(self, rows: np.ndarray, block: bytes, line: int) -> None:
        bad = ~np.isfinite(rows)
        if bad.any():
            r, c = np.argwhere(bad)[0]
            at, cells = _record(block, line, self.sep, r)
            # the cell as sent: a cell of 1e309 is read as inf, and the message quoted the inf
            cell = cells[c].strip() if c < len(cells) else ""
            raise ValueError(
                f"line {at}, column {self.names[c]!r}: {cell!r} is not a finite number"
            )

    def _convert_text(self, raw: bytes, block: bytes, line: int) -> np.ndarray | None:
        """A block whose labels are not all numbers: the features read as numbers, the label
        cells as text (from the block as sent: an empty label is an error even with
        empty_cells=zero, a text class is never made up)."""
        starts, cells = [], []  # each row's file line and label cell: not every cell of the
        # block as a Python string (many times its bytes)
        for at, row, _ in _records(_block_lines(raw, line), line, self.sep):
            if len(row) != len(self.names):
                raise self._locate(block, line, skip=self.label_at)
            starts.append(at)
            cells.append(row[self.label_at])
        if not cells:
            return None
        features = [i for i in range(len(self.names)) if i != self.label_at]
        try:
            values = self._read(block, features)
        except ValueError:
            raise self._locate(block, line, skip=self.label_at) from None
        if values.shape[0] != len(cells):
            raise self._locate(block, line, skip=self.label_at)
        rows = np.zeros((len(cells), len(self.names)), dtype=np.float64)
        rows[:, features] = values
        self._check_finite(rows, block, line)
        rows[:, self.label_at] = self.labels.cells(cells, lambda r: f"line {starts[r]}")
        return rows

    def _locate(self, block: bytes, line: int, skip: int | None = None) -> ValueError:
        """The first bad cell of a block that numpy refused, named by line and column (`skip`:
        a column whose cells may be text, the labels)."""
        for at, cells, _ in _records(_block_lines(block, line), line, self.sep):
            where = f"line {at}"
            if len(cells) != len(self.names):
                return ValueError(
                    f"{where}: expected {len(self.names)} cells (as the header has), "
                    f"got {len(cells)}"
                )
            for i, (name, cell) in enumerate(zip(self.names, cells, strict=True)):
                if i == skip:
                    continue
                try:
                    # Python's float() takes "1_000" and the digits of every script (and
                    # their spaces), numpy's reader neither
                    if "_" in cell or not cell.isascii():
                        raise ValueError(cell)
                    float(cell)
                except ValueError:
                    if not cell.strip():
                        return ValueError(
                            f"{where}, column {name!r}: the cell is empty (send empty_cells=zero "
                            "to read empty cells as 0)"
                        )
                    return ValueError(f"{where}, column {name!r}: {cell[:40]!r} is not a number"
                                      f"{self._label_hint()}")
        return ValueError(f"line {line}: the lines cannot be read as numbers")

    def _label_hint(self) -> str:
        """Why a column of text was read as a feature, where the label column was chosen by
        default: a header without `label` makes the first column the label, which a table whose
        label is elsewhere (e.g. `target`, last) did not mean."""
        if self.label_column is not None or self.names[self.label_at] == "label":
            return ""
        return (f" (a feature column: with no label_column named and no column 'label', the "
                f"label is the first column, {self.names[self.label_at]!r}; send label_column "
                "to name it)")

    def _csr(self, rows: np.ndarray):
        labels = rows[:, self.label_at].copy()
        present = rows != 0
        present[:, self.label_at] = False
        row_of, col = np.nonzero(present)
        data = rows[row_of, col]
        col -= col > self.label_at  # the label column is not a feature
        indptr = np.zeros(rows.shape[0] + 1, dtype=np.int64)
        np.cumsum(present.sum(axis=1), out=indptr[1:])
        qids = np.zeros(rows.shape[0], dtype=np.int64)
        return indptr, col.astype(np.int32), data, labels, qids


def _empty_cell_pattern(sep: str) -> re.Pattern:
    """Empty cells: a separator at a line's start, or one followed by another or the line end."""
    d = re.escape(sep.encode())
    return re.compile(rb"(?m)^(?=" + d + rb")|(?<=" + d + rb")(?=" + d + rb"|\r?$)")


def _block_lines(block: bytes, line: int) -> list[str]:
    """A block's lines as text (the first is file line `line`); 422 naming a line not UTF-8."""
    try:
        return block.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return [_decode(raw, line + offset) for offset, raw in enumerate(block.split(b"\n"))]


def _record(block: bytes, line: int, sep: str, row: int) -> tuple[int, list[str]]:
    """The file line and cells (as sent, quotes removed) of numpy's row `row` of a block."""
    rows = _records(_block_lines(block, line), line, sep)
    at, cells, _ = next(itertools.islice(rows, row, None), (line, [], 1))
    return at, cells


def _records(lines: list[str], line: int, sep: str):
    """(file line, cells, lines it spans) of each row the csv reader reads from `lines` (the
    first is file line `line`), blank lines left out as numpy's reader leaves them. A row is
    named by the line it starts on. The reader's csv.Error (a 500 before) is a ValueError
    naming that line: a cell beyond the csv module's field size limit (131072 characters: a
    header's long name, a long label or number, or a quote never closed), or a carriage return
    inside a line."""
    reader = csv.reader((text + "\n" for text in lines), delimiter=sep)
    start = 0
    try:
        for cells in reader:
            first, start = start, reader.line_num
            if start - first == 1 and not lines[first].strip():
                continue
            yield line + first, cells, start - first
    except csv.Error as exc:
        raise ValueError(f"line {line + start}: {_csv_problem(exc)}") from None


def _csv_problem(exc: csv.Error) -> str:
    if "field larger than field limit" in str(exc):
        return (
            f"a cell holds more than {csv.field_size_limit()} characters (or a quote opened "
            "there is not closed)"
        )
    if "new-line character" in str(exc):
        return "a carriage return inside a row (lines end with \\n or \\r\\n)"
    return str(exc)


def _check_one_line_rows(block: bytes, line: int, sep: str) -> None:
    """422 for a row of the block that spans lines (a quoted cell holding a line break, or a
    quote never closed), named by the line it starts on."""
    for at, _, spans in _records(_block_lines(block, line), line, sep):
        if spans > 1:
            raise ValueError(
                f"line {at}: a quoted cell holds a line break (or its quote is not closed); "
                "send each row on one line"
            )


def _decode(raw: bytes, line: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"line {line}: byte {exc.start + 1} is not UTF-8 text") from None


def _line_too_long(line: int, limit: int) -> LibsvmLimitError:
    return LibsvmLimitError(
        f"line {line}: longer than the limit of {limit / 2**20:g} MB (MAX_LINE_MB)", line
    )


def _check_lines(block: bytes, first_line: int, limit: int) -> None:
    ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8) == 10)
    lengths = np.diff(ends, prepend=-1)
    if lengths.size and lengths.max() > limit + 1:
        raise _line_too_long(first_line + int(np.argmax(lengths > limit + 1)), limit)
