"""The sparse feature column of a Parquet upload: its two types (``struct<indices:
list<integer>, values: list<floating>>`` and ``list<struct<index: integer, value: floating>>``)
and their rows as CSR parts; ranges and finiteness are checked by the reader (`.parquet`)."""

from __future__ import annotations

import numpy as np

from app.services.formats.parquet_labels import is_numeric


def sparse_kind(kind) -> str | None:
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


def sparse_parts(column):
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
    if not (is_numeric(indices.type) and pa.types.is_integer(indices.type)):
        raise ValueError("parquet: sparse indices must be integers")
    if not is_numeric(values.type):
        raise ValueError("parquet: sparse values must be numbers")
    return (
        indptr,
        indices.to_numpy(zero_copy_only=False).astype(np.int64),
        values.to_numpy(zero_copy_only=False).astype(np.float64),
    )


def entries_per_row(column) -> np.ndarray:
    """How many (index, value) entries each row of a sparse column holds (0 for a null row)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lists = pc.struct_field(column, "indices") if pa.types.is_struct(column.type) else column
    lengths = pc.fill_null(pc.list_value_length(lists), 0)
    return lengths.to_numpy().astype(np.int64)
