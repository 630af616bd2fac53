"""Parquet uploads (pyarrow): a label column plus numeric columns, or plus one sparse column.

Layouts:
  dense   the label column (named `label_column`, default ``label``, else the first column) and
          numeric (integer, floating or boolean) feature columns; feature j is the j-th
          non-label column and the column names are the dataset's feature names (every column
          must have one: a name that is empty or only spaces is refused). A null cell is
          an error, or 0 with ``empty_cells="zero"``.
  sparse  the label column and one column of type ``struct<indices: list<integer>, values:
          list<floating>>`` or ``list<struct<index: integer, value: floating>>``; indices are
          zero-based, the dataset has max(index) + 1 features.

A Parquet file is read from its footer, so the reader waits for the whole upload. pyarrow
decodes a row group whole, so the file is checked before anything is decoded: the footer's size
(MAX_LINE_MB), its column count (MAX_FEATURES), its column chunks (row groups × columns, at most
one per CHUNK_BYTES of the file, or MIN_CHUNK_BUDGET), and every page header (`.parquet_pages`): the
pages' declared sizes must agree with the footer, each row group may take at most
ROW_GROUP_BYTES decoded, and all of them together at most MAX_EXPANDED_MB. Row groups are then
read one at a time and handed on in chunks of rows. The label column's types and text cells are
`.parquet_labels`'s, the sparse column's types and parts `.parquet_sparse`'s.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO

import numpy as np
import scipy.sparse as sp

from app.limits import ExpansionTooLarge
from app.services.formats.delimited import MAX_COLUMNS
from app.services.formats.labels import LabelColumn, refuse_nul
from app.services.formats.parquet_labels import is_numeric, is_text, read_as_dictionary, text_cells
from app.services.formats.parquet_pages import PageCount, column_cost, page_budget
from app.services.formats.parquet_sparse import entries_per_row, sparse_kind, sparse_parts
from solvers.io import LibsvmLimitError

MAGIC = b"PAR1"
ROW_GROUP_BYTES = 64 << 20  # decoded size of one row group (pyarrow holds a row group whole)
# Column chunks (row groups × columns) a file may hold: MIN_CHUNK_BUDGET, or one per CHUNK_BYTES
# of it where that is more. Each chunk costs about 0.1 ms to check and decode however little it
# holds: 17 MB of one-row row groups took a parser process 30 s, and 17 MB of 100,000 columns
# holding two rows 15 s.
MIN_CHUNK_BUDGET = 10_000
CHUNK_BYTES = 2048
MAX_INDEX = 2**31 - 2


class ParquetChunks:
    """Row chunks of a Parquet upload, for `DatasetWriter` (see the module docstring)."""

    zero_based = True
    has_qid = False

    def __init__(
        self,
        stream: BinaryIO,
        source: str,
        limits: dict,
        chunk_rows: int,
        chunk_nnz: int,
        label_column: str | None = None,
        empty_cells: str = "error",
    ):
        self.stream = stream
        self.source = source
        self.limits = limits
        self.chunk_rows = chunk_rows
        self.chunk_nnz = chunk_nnz
        self.label_column = label_column
        self.empty_cells = empty_cells
        self.n_rows = 0
        self.n_features = 0
        self.feature_names: list[str] | None = None
        self.labels = LabelColumn()
        self.footer = 0  # its length in bytes, once the file is opened

    def __iter__(self):
        while self.stream.read(1 << 20):
            pass  # a Parquet file is read from its end: wait for all of it
        pf = self._open()
        label, features, sparse = self._layout(pf.schema_arrow)
        label_encodings = self._check_sizes(pf, label)
        pf = self._text_label_file(pf, label, label_encodings)
        columns = [label, *features] if not sparse else [label, sparse]
        unreadable = (OSError, _arrow_error())
        for group in range(pf.metadata.num_row_groups):
            if pf.metadata.row_group(group).num_rows == 0:
                continue  # nothing to read (and no pages: `_check_sizes` skipped it)
            try:
                table = pf.read_row_group(group, columns=columns, use_threads=False)
            except unreadable as exc:  # a corrupt page (gzip's was a 500), whatever pyarrow says
                raise ValueError(f"parquet: row group {group} cannot be read: {exc}") from None
            for start, stop in self._slices(table, features, sparse):
                part = table.slice(start, stop - start)
                labels = self._labels(part.column(0), start)
                if sparse:
                    chunk = self._sparse(part.column(1), start)
                else:
                    chunk = self._dense(part, features, start)
                self.n_rows += part.num_rows
                yield (*chunk, labels, np.zeros(part.num_rows, dtype=np.int64))
            del table
        if self.n_rows == 0:
            raise ValueError("parquet: the file holds no rows")

    def _slices(self, table, features: list[str], sparse: str | None):
        """(start, stop) of the row group's row chunks: at most `chunk_rows` rows and
        `chunk_nnz` cells or sparse entries each (a row of more entries alone), as the text
        formats hold. A row group may hold 8 million cells (ROW_GROUP_BYTES); a slice of
        `chunk_rows` of them made dense, with its non-zeros' coordinates, took six times the
        row group, and its sparse entries copied and sorted three times."""
        n = table.num_rows
        if not sparse:
            step = max(1, min(self.chunk_rows, self.chunk_nnz // max(1, len(features))))
            yield from ((start, min(start + step, n)) for start in range(0, n, step))
            return
        ends = np.cumsum(entries_per_row(table.column(1)))
        start = 0
        while start < n:
            before = int(ends[start - 1]) if start else 0
            stop = int(np.searchsorted(ends, before + self.chunk_nnz, side="right"))
            stop = min(max(stop, start + 1), start + self.chunk_rows, n)
            yield start, stop
            start = stop

    # ------------------------------------------------------------------------------------
    def _open(self):
        size = os.path.getsize(self.source)
        with open(self.source, "rb") as raw:
            head = raw.read(4)
            raw.seek(max(0, size - 8))
            tail = raw.read(8)
        if size < 12 or head != MAGIC or tail[4:] != MAGIC:
            raise ValueError("parquet: not a Parquet file (send it uncompressed, as written)")
        footer = struct.unpack("<I", tail[:4])[0]
        if footer == 0:
            raise ValueError("parquet: the footer is empty (0 bytes)")
        limit = self.limits.get("max_line") or 2**62
        if footer > min(limit, size - 12):
            if footer > size - 12:
                raise ValueError("parquet: the footer is longer than the file")
            raise LibsvmLimitError(
                f"parquet: a footer of {footer} bytes, more than the {limit} accepted "
                "(MAX_LINE_MB)",
                None,
            )
        self.footer = footer
        try:
            return self._parquet_file()
        except Exception as exc:  # pyarrow's ArrowInvalid, OSError, ...
            raise ValueError(f"parquet: the file cannot be read: {exc}") from None

    def _parquet_file(self, read_dictionary: list[str] | None = None):
        import pyarrow.parquet as pq

        return pq.ParquetFile(
            self.source,
            pre_buffer=False,
            buffer_size=1 << 20,
            thrift_string_size_limit=self.footer,
            thrift_container_size_limit=self.footer,
            read_dictionary=read_dictionary,
        )

    def _text_label_file(self, pf, label: str, encodings: set[int]):
        """The file with a text label column read as a dictionary where its encodings allow
        (`parquet_labels.read_as_dictionary`)."""
        text = is_text(pf.schema_arrow.field(label).type)
        if not text or not read_as_dictionary(label, encodings):
            return pf
        try:
            return self._parquet_file(read_dictionary=[label])
        except Exception as exc:
            raise ValueError(f"parquet: the file cannot be read: {exc}") from None

    def _layout(self, schema):
        """(label column, dense feature columns, sparse column or None)."""
        names = list(schema.names)
        if not names:
            raise ValueError("parquet: the file has no columns")
        for i, name in enumerate(names):
            # as a CSV header's: a name of no characters (or only spaces) names no feature
            if not name.strip():
                raise ValueError(f"parquet: column {i + 1} has no name")
            refuse_nul(name, "parquet: the column name")
        if len(set(names)) != len(names):
            raise ValueError("parquet: two columns have the same name")
        wanted = self.label_column or "label"
        if wanted in names:
            label = wanted
        elif self.label_column is not None:
            raise ValueError(f"label_column: the file has no column named {wanted!r}")
        else:
            label = names[0]
        kind = schema.field(label).type
        if not is_numeric(kind) and not is_text(kind):
            raise ValueError(
                f"parquet: the label column {label!r} is {kind}, expected numbers or text "
                "(string, or dictionary of strings)"
            )
        others = [n for n in names if n != label]
        sparse = [n for n in others if sparse_kind(schema.field(n).type)]
        if sparse:
            if len(others) != 1:
                raise ValueError(
                    "parquet: a sparse column must be the only column beside the label"
                )
            return label, [], sparse[0]
        max_features = min(self.limits.get("max_features") or MAX_INDEX, MAX_COLUMNS - 1)
        if len(others) > max_features:
            raise LibsvmLimitError(
                f"parquet: {len(others)} feature columns, more than the {max_features} "
                f"accepted (MAX_FEATURES, and {MAX_COLUMNS} columns in a table; send wider "
                "data as a sparse struct<indices, values> column)",
                None,
            )
        for name in others:
            kind = schema.field(name).type
            if not is_numeric(kind):
                raise ValueError(
                    f"parquet: column {name!r} is {kind}, expected numbers (or a sparse "
                    "struct<indices, values> column)"
                )
        if not others:
            raise ValueError("parquet: expected feature columns beside the label")
        self.feature_names = others
        self.n_features = len(others)
        return label, others, None

    def _check_sizes(self, pf, label: str) -> set[int]:
        """Walk every page header; refuse row groups over ROW_GROUP_BYTES decoded and files
        over MAX_EXPANDED_MB. The encodings of the label column's data pages are returned."""
        meta = pf.metadata
        size = os.path.getsize(self.source)
        _check_chunk_count(meta.num_row_groups, meta.num_columns, size)
        expanded = self.limits.get("max_expanded") or 2**62
        total = 0
        pages = PageCount(page_budget(size))
        label_encodings: set[int] = set()
        with open(self.source, "rb") as raw:
            for group in range(meta.num_row_groups):
                rg = meta.row_group(group)
                if rg.num_rows == 0:  # pyarrow writes its chunks at offset 0, with no pages:
                    continue  # a writer's empty last group made a valid file "corrupt"
                decoded = 0
                for c in range(rg.num_columns):
                    column = rg.column(c)
                    encodings = label_encodings if column.path_in_schema == label else set()
                    decoded += column_cost(raw, column, size, pages, encodings)
                if decoded > ROW_GROUP_BYTES:
                    raise LibsvmLimitError(
                        f"parquet: row group {group} takes {decoded / 2**20:.0f} MB decoded, "
                        f"more than the {ROW_GROUP_BYTES >> 20} MB accepted per row group; "
                        "write the file with smaller row groups (e.g. pyarrow.parquet."
                        "write_table(..., row_group_size=100_000))",
                        None,
                    )
                total += decoded
                if total > expanded:
                    raise ExpansionTooLarge(expanded)
        return label_encodings

    # ------------------------------------------------------------------------------------
    def _labels(self, column, start: int) -> np.ndarray:
        """The labels as numbers, or as class codes once the column reads as text
        (`formats.labels`: a string column whose every cell reads as a number is numeric)."""
        if column.null_count:
            bad = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"row {self.n_rows + bad + 1}: the label is missing (null)")
        first = self.n_rows + 1

        def where(r: int) -> str:
            return f"row {first + r}"

        if is_text(column.type):
            return self.labels.cells(text_cells(column, where), where)
        labels = column.to_numpy(zero_copy_only=False).astype(np.float64)
        return self.labels.numeric(labels, where)

    def label_text(self) -> dict | None:
        return self.labels.text()

    def _dense(self, part, features: list[str], start: int):
        rows = np.empty((part.num_rows, len(features)), dtype=np.float64)
        for j, name in enumerate(features):
            column = part.column(j + 1)
            if column.null_count and self.empty_cells != "zero":
                bad = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise ValueError(
                    f"row {self.n_rows + bad + 1}, column {name!r}: the cell is empty (null); "
                    "send empty_cells=zero to read empty cells as 0"
                )
            column = column.cast("float64")
            if column.null_count:
                column = column.fill_null(0.0)
            rows[:, j] = column.to_numpy(zero_copy_only=False)
        if not np.isfinite(rows).all():
            r, c = np.argwhere(~np.isfinite(rows))[0]
            raise ValueError(
                f"row {self.n_rows + r + 1}, column {features[c]!r}: {rows[r, c]} is not a "
                "finite number"
            )
        present = rows != 0
        row_of, col = np.nonzero(present)
        indptr = np.zeros(part.num_rows + 1, dtype=np.int64)
        np.cumsum(present.sum(axis=1), out=indptr[1:])
        return indptr, col.astype(np.int32), rows[row_of, col]

    def _sparse(self, column, start: int):
        import pyarrow as pa

        column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
        if column.null_count:
            bad = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise ValueError(f"row {self.n_rows + bad + 1}: the sparse features are null")
        indptr, indices, values = sparse_parts(column)
        where = self.n_rows
        if indices.size:
            low, high = int(indices.min()), int(indices.max())
            if low < 0 or high > MAX_INDEX:
                bad = int(np.flatnonzero((indices < 0) | (indices > MAX_INDEX))[0])
                row = int(np.searchsorted(indptr, bad, side="right"))
                raise ValueError(f"row {where + row}: feature index {indices[bad]} out of range")
            max_features = self.limits.get("max_features") or MAX_INDEX + 1
            if high + 1 > max_features:
                raise LibsvmLimitError(
                    f"parquet: feature index {high}, beyond the {max_features} features "
                    "accepted (MAX_FEATURES)",
                    None,
                )
            self.n_features = max(self.n_features, high + 1)
        if not np.isfinite(values).all():
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            row = int(np.searchsorted(indptr, bad, side="right"))
            raise ValueError(f"row {where + row}: a feature value is not a finite number")
        X = sp.csr_matrix(
            (values, indices.astype(np.int32), indptr), shape=(len(indptr) - 1, MAX_INDEX + 1)
        )
        X.sum_duplicates()  # sorted indices, one entry per (row, column)
        return X.indptr.astype(np.int64), X.indices, X.data


def _arrow_error() -> type[Exception]:
    """pyarrow's base error (its ArrowInvalid, ArrowIndexError, ... derive from it)."""
    import pyarrow as pa

    return pa.ArrowException


def chunk_budget(file_size: int) -> int:
    """The most column chunks a Parquet file of this size may hold."""
    return max(MIN_CHUNK_BUDGET, file_size // CHUNK_BYTES)


def _check_chunk_count(row_groups: int, columns: int, file_size: int) -> None:
    """413 when the file holds more column chunks than its budget, before any is walked."""
    budget = chunk_budget(file_size)
    if row_groups * columns > budget:
        raise LibsvmLimitError(
            f"parquet: {row_groups} row groups × {columns} columns = {row_groups * columns} "
            f"column chunks, more than the {budget} accepted for a file of {file_size} bytes "
            f"(one per {CHUNK_BYTES} bytes, at least {MIN_CHUNK_BUDGET}); chunks this small "
            "cost more to read than their data is worth: write larger row groups "
            "(pyarrow.parquet.write_table(..., row_group_size=100_000)), or send wide data "
            "as a sparse struct<indices, values> column",
            None,
        )
