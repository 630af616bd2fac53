"""The label column of a Parquet upload: which column types hold labels, which encodings of a
text label column can be read within the decoded bounds, and the text labels' cells.

A text label column is read as a dictionary (`read_as_dictionary`) and its cells are made once
per distinct name (`text_cells`); what the cells mean (numbers or class names) is
`formats.labels`'s rule, as for CSV.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

# Parquet's enum of encodings, as page headers hold them
_DICTIONARY_ENCODINGS = {2, 8}  # PLAIN_DICTIONARY, RLE_DICTIONARY
_DELTA_LENGTH_BYTE_ARRAY, _DELTA_BYTE_ARRAY = 6, 7


def is_numeric(kind) -> bool:
    import pyarrow.types as pt

    return pt.is_integer(kind) or pt.is_floating(kind) or pt.is_boolean(kind)


def is_text(kind) -> bool:
    import pyarrow.types as pt

    if pt.is_dictionary(kind):
        return is_text(kind.value_type) or is_numeric(kind.value_type)
    return pt.is_string(kind) or pt.is_large_string(kind)


def read_as_dictionary(label: str, encodings: set[int]) -> bool:
    """Whether a text label column is read as a dictionary: a dictionary-encoded column of one
    long name repeated decodes, read as plain strings, to a copy of the name per row (a 64 kB
    file of 2 million 255-character labels took 930 MB), beyond the row group's decoded bound
    (8 bytes a value); as a dictionary it costs its indices. pyarrow reads the delta encodings
    only as plain strings: DELTA_LENGTH_BYTE_ARRAY's pages hold every byte of its strings
    (counted), DELTA_BYTE_ARRAY's only what differs from the previous string, so its decoded
    size is unknown until decoded: refused. `encodings` are those of the label's data pages,
    read from their headers (the footer's list of a column chunk's encodings is the writer's
    word, and may leave out dictionary pages)."""
    if _DELTA_BYTE_ARRAY in encodings:
        raise ValueError(
            f"parquet: the label column {label!r} is written with the DELTA_BYTE_ARRAY "
            "encoding, whose decoded size its pages do not tell; write it with dictionary "
            "or plain encoding (pyarrow's default)"
        )
    # a mix is read as a dictionary: pyarrow refuses its delta pages (422)
    return not (_DELTA_LENGTH_BYTE_ARRAY in encodings and not encodings & _DICTIONARY_ENCODINGS)


def text_cells(column, where: Callable[[int], str]) -> list[str]:
    """The cells of a text label column; `where(r)` names its r-th row in an error."""
    try:
        return _label_cells(column)
    except UnicodeDecodeError:  # pyarrow reads a Parquet string column unchecked
        bad = _first_undecodable(column)
        raise ValueError(f"{where(bad)}: the label is not UTF-8 text") from None


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
