"""A CSV or TSV file of instances read for prediction: its columns matched to a model's features
by name (the header), in the model's column order.

The model's own names decide: every feature the model was trained on must be a column, the
label column (``label`` unless named, and only when it is not a feature) is left out when
present, and any other column is an error that names it, as is a repeated column name or an
empty or non-numeric cell (by line and column), so that a file meant for another model is
refused rather than scored. The conventions are the service's own for table uploads: a UTF-8
byte-order mark is ignored, blank lines are skipped, a line of empty cells is not blank.
"""

from __future__ import annotations

import csv
import math
from array import array
from pathlib import Path
from typing import IO

import numpy as np

TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv"}
DELIMITERS = {"csv": ",", "tsv": "\t"}


class TableError(ValueError):
    """The file does not fit the model; the message names the line or the column."""


def table_format(path: Path) -> str | None:
    """"csv" or "tsv" by the file's extension (before a compression suffix), else None."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() not in (".gz", ".bz2", ".xz")]
    return TABLE_FORMATS.get(suffixes[-1]) if suffixes else None


def read_instances(
    handle: IO[str], fmt: str, feature_names: list | None, label_column: str | None = None
) -> np.ndarray:
    """The file's rows as an (n, len(feature_names)) array, column j the model's feature j."""
    if not feature_names:
        raise TableError(
            "this model's training data had no column names: predict LIBSVM lines instead"
        )
    reader = csv.reader(handle, delimiter=DELIMITERS[fmt])
    try:
        return _rows(reader, [str(name) for name in feature_names], label_column)
    except UnicodeDecodeError as exc:  # decoded ahead in blocks: no line to name
        raise TableError(f"not UTF-8 text ({exc})") from None
    except csv.Error as exc:
        raise TableError(f"line {reader.line_num}: {exc}") from None


def _rows(reader, names: list[str], label_column: str | None) -> np.ndarray:
    header = next(reader, None)
    if header is None:
        raise TableError("the file is empty: expected a header line naming the columns")
    header[0] = header[0].lstrip("\ufeff")
    positions = _positions(header, names, label_column)
    values = array("d")  # 8 bytes a value while the file is read, not a Python float's 32
    for cells in reader:
        line = reader.line_num
        if cells == [] or cells == [""]:
            continue  # a blank line
        if len(cells) != len(header):
            raise TableError(f"line {line}: {len(cells)} cells, the header names {len(header)}")
        values.extend(_number(cells[p], line, header[p]) for p in positions)
    if not values:
        raise TableError("no instances after the header line")
    return np.frombuffer(values, dtype=np.float64).reshape(-1, len(names))


def _positions(header: list[str], names: list[str], label_column: str | None) -> list[int]:
    """Where each of the model's features is in the header."""
    header = [name.strip() for name in header]
    repeated = next((name for k, name in enumerate(header) if name in header[:k]), None)
    if repeated is not None:
        raise TableError(f"the header names column {repeated!r} twice")
    where = {name: k for k, name in enumerate(header)}
    if label_column is not None and label_column not in where:
        raise TableError(f"no column named {label_column!r} (the label column)")
    missing = [name for name in names if name not in where]
    if missing:
        raise TableError(f"the model's feature {missing[0]!r} is not a column of the file "
                         f"({len(missing)} of its {len(names)} features missing)")  # fmt: skip
    label = label_column or "label"
    extra = [name for name in where if name not in set(names) and name != label]
    if extra:
        raise TableError(f"column {extra[0]!r} is not one of the model's features (nor the "
                         f"label column {label!r}; name another with --label-column)")  # fmt: skip
    return [where[name] for name in names]


def _number(cell: str, line: int, column: str) -> float:
    if not cell.strip():
        raise TableError(f"line {line}, column {column!r}: the cell is empty")
    try:
        if "_" in cell:
            raise ValueError  # float() reads "1_000", the service does not
        value = float(cell)
    except ValueError:
        raise TableError(f"line {line}, column {column!r}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise TableError(f"line {line}, column {column!r}: {cell!r} is not a finite number")
    return value
