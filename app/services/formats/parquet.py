"""Parquet uploads (pyarrow): a label column plus numeric columns, or plus one sparse column.

Layouts:
  dense   the label column (named `label_column`, default ``label``, else the first column) and
          numeric (integer, floating or boolean) feature columns; feature j is the j-th
          non-label column and the column names are the dataset's feature names. A null cell is
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
read one at a time and handed on in chunks of rows.
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
from app.services.formats.parquet_pages import CorruptPages, page_budget, walk_chunk
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
# Parquet's enum of encodings, as page headers hold them
_DICTIONARY_ENCODINGS = {2, 8}  # PLAIN_DICTIONARY, RLE_DICTIONARY
_DELTA_LENGTH_BYTE_ARRAY, _DELTA_BYTE_ARRAY = 6, 7


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
        label_column: str | None = None,
        empty_cells: str = "error",
    ):
        self.stream = stream
        self.source = source
        self.limits = limits
        self.chunk_rows = chunk_rows
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
            try:
                table = pf.read_row_group(group, columns=columns, use_threads=False)
            except unreadable as exc:  # a corrupt page (gzip's was a 500), whatever pyarrow says
                raise ValueError(f"parquet: row group {group} cannot be read: {exc}") from None
            for start in range(0, table.num_rows, self.chunk_rows):
                part = table.slice(start, self.chunk_rows)
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
        """The file with a text label column read as a dictionary: a dictionary-encoded column
        of one long name repeated decodes, read as plain strings, to a copy of the name per row
        (a 64 kB file of 2 million 255-character labels took 930 MB), beyond the row group's
        decoded bound (8 bytes a value); as a dictionary it costs its indices. pyarrow reads
        the delta encodings only as plain strings: DELTA_LENGTH_BYTE_ARRAY's pages hold every
        byte of its strings (counted), DELTA_BYTE_ARRAY's only what differs from the previous
        string, so its decoded size is unknown until decoded: refused. `encodings` are those
        of the label's data pages, read from their headers (the footer's list of a column
        chunk's encodings is the writer's word, and may leave out dictionary pages)."""
        if not _text(pf.schema_arrow.field(label).type):
            return pf
        if _DELTA_BYTE_ARRAY in encodings:
            raise ValueError(
                f"parquet: the label column {label!r} is written with the DELTA_BYTE_ARRAY "
                "encoding, whose decoded size its pages do not tell; write it with dictionary "
                "or plain encoding (pyarrow's default)"
            )
        if _DELTA_LENGTH_BYTE_ARRAY in encodings and not encodings & _DICTIONARY_ENCODINGS:
            return pf  # a mix is read as a dictionary: pyarrow refuses its delta pages (422)
        try:
            return self._parquet_file(read_dictionary=[label])
        except Exception as exc:
            raise ValueError(f"parquet: the file cannot be read: {exc}") from None

    def _layout(self, schema):
        """(label column, dense feature columns, sparse column or None)."""
        names = list(schema.names)
        if len(set(names)) != len(names):
            raise ValueError("parquet: two columns have the same name")
        if not names:
            raise ValueError("parquet: the file has no columns")
        for name in names:
            refuse_nul(name, "parquet: the column name")
        wanted = self.label_column or "label"
        if wanted in names:
            label = wanted
        elif self.label_column is not None:
            raise ValueError(f"label_column: the file has no column named {wanted!r}")
        else:
            label = names[0]
        kind = schema.field(label).type
        if not _numeric(kind) and not _text(kind):
            raise ValueError(
                f"parquet: the label column {label!r} is {kind}, expected numbers or text "
                "(string, or dictionary of strings)"
            )
        others = [n for n in names if n != label]
        sparse = [n for n in others if _sparse_kind(schema.field(n).type)]
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
            if not _numeric(kind):
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
                decoded = 0
                for c in range(rg.num_columns):
                    column = rg.column(c)
                    encodings = label_encodings if column.path_in_schema == label else set()
                    decoded += _column_cost(raw, column, size, pages, encodings)
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
        if _text(column.type):
            try:
                cells = _label_cells(column)
            except UnicodeDecodeError:  # pyarrow reads a Parquet string column unchecked
                bad = _first_undecodable(column)
                raise ValueError(f"row {first + bad}: the label is not UTF-8 text") from None
            return self.labels.cells(cells, lambda r: f"row {first + r}")
        labels = column.to_numpy(zero_copy_only=False).astype(np.float64)
        return self.labels.numeric(labels, lambda r: f"row {first + r}")

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
        indptr, indices, values = _sparse_parts(column)
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


def _label_cells(column) -> list[str]:
    """A text label column's cells; a dictionary's names made once each (the cells share
    them), and only the names its rows use."""
    import pyarrow as pa
    import pyarrow.types as pt

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    cells: list[str] = []
    for chunk in chunks:
        if not pt.is_dictionary(chunk.type):
            cells += [str(v) for v in chunk.to_pylist()]
            continue
        codes = chunk.indices.to_numpy(zero_copy_only=False)
        used = np.unique(codes)
        texts = [str(v) for v in chunk.dictionary.take(used).to_pylist()]
        names = dict(zip(used.tolist(), texts, strict=True))
        cells += [names[code] for code in codes.tolist()]
    return cells


def _first_undecodable(column) -> int:
    """The index of the first cell of a text column whose bytes are not UTF-8; a dictionary's
    names are checked once each (decoded, a long name made a copy per row: 8 kB over 65,536
    rows took 1 GB)."""
    import pyarrow as pa
    import pyarrow.types as pt

    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    offset = 0
    for chunk in chunks:
        names, codes = chunk, None
        if pt.is_dictionary(chunk.type):
            names, codes = chunk.dictionary, chunk.indices.to_numpy(zero_copy_only=False)
        bad = [i for i, name in enumerate(names.cast(pa.binary()).to_pylist()) if not _utf8(name)]
        rows = np.asarray(bad) if codes is None else np.flatnonzero(np.isin(codes, bad))
        if rows.size:
            return offset + int(rows[0])
        offset += len(chunk)
    return 0


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _numeric(kind) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(kind) or pt.is_floating(kind) or pt.is_boolean(kind)


def _text(kind) -> bool:
    import pyarrow.types as pt

    if pt.is_dictionary(kind):
        return _text(kind.value_type) or _numeric(kind.value_type)
    return pt.is_string(kind) or pt.is_large_string(kind)


def _sparse_kind(kind) -> str | None:
    import pyarrow.types as pt

    if pt.is_struct(kind):
        names = {kind.field(i).name for i in range(kind.num_fields)}
        if names == {"indices", "values"}:
            return "struct"
    if pt.is_list(kind) or pt.is_large_list(kind):
        inner = kind.value_type
        if pt.is_struct(inner):
            names = {inner.field(i).name for i in range(inner.num_fields)}
            if names == {"index", "value"}:
                return "list"
    return None


def _sparse_parts(column):
    """(indptr, indices, values) of a sparse column (struct of lists, or list of structs)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_struct(column.type):
        idx_list, val_list = column.field("indices"), column.field("values")
        idx_off = np.asarray(idx_list.offsets, dtype=np.int64)
        val_off = np.asarray(val_list.offsets, dtype=np.int64)
        if not np.array_equal(idx_off - idx_off[0], val_off - val_off[0]):
            raise ValueError("parquet: a row's indices and values differ in length")
        indices, values = pc.list_flatten(idx_list), pc.list_flatten(val_list)
        indptr = idx_off - idx_off[0]
    else:
        indptr = np.asarray(column.offsets, dtype=np.int64)
        indptr = indptr - indptr[0]
        entries = pc.list_flatten(column)
        indices, values = entries.field("index"), entries.field("value")
    if indices.null_count or values.null_count:
        raise ValueError("parquet: a sparse index or value is null")
    if not (_numeric(indices.type) and pa.types.is_integer(indices.type)):
        raise ValueError("parquet: sparse indices must be integers")
    if not _numeric(values.type):
        raise ValueError("parquet: sparse values must be numbers")
    return (
        indptr,
        indices.to_numpy(zero_copy_only=False).astype(np.int64),
        values.to_numpy(zero_copy_only=False).astype(np.float64),
    )


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


class PageCount:
    """Pages walked so far in a file beyond the first two of each column chunk, against the
    file's `page_budget`."""

    def __init__(self, budget: int):
        self.budget, self.seen = budget, 0

    def add(self, index_in_chunk: int) -> None:
        self.seen += index_in_chunk >= 2
        if self.seen > self.budget:
            raise LibsvmLimitError(
                f"parquet: more than {self.budget} pages beyond the first two of each column "
                "chunk; pages this small cost more to check than their data is worth: write "
                "the file with larger pages (pyarrow.parquet.write_table(..., "
                "data_page_size=1 << 20), its default)",
                None,
            )


def _column_cost(raw, column, file_size: int, pages: PageCount, encodings: set[int]) -> int:
    """Bytes a column chunk may take decoded: its pages' declared uncompressed sizes, or 8 bytes
    a value (a dictionary or run-length encoding decodes to more than it stores), whichever is
    more. The pages must agree with the footer and fit the file's page budget. The encodings
    of its data pages are added to `encodings`."""
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        start = min(start, column.dictionary_page_offset)
    declared = column.total_uncompressed_size
    unpacked = values = 0
    try:
        chunk = walk_chunk(raw, start, column.total_compressed_size, file_size)
        for index, page in enumerate(chunk):
            pages.add(index)
            unpacked += page.header_bytes + page.uncompressed
            values += page.num_values
            if page.encoding >= 0:
                encodings.add(page.encoding)
            if unpacked > declared:
                raise CorruptPages("the pages declare more data than the footer")
    except CorruptPages as exc:
        raise ValueError(f"parquet: column {column.path_in_schema}: {exc}") from None
    return max(unpacked, 8 * values)
