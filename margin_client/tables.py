"""A CSV or TSV file of instances read for prediction: its columns matched to a model's features
by name (the header), in the model's column order.

The model's own names decide: every feature the model was trained on must be a column, the
label column (``label`` unless named) is left out when present, and any other column is an
error that names it, as is an empty or non-numeric cell (by line and column), so that a file
meant for another model is refused rather than scored.
"""

from __future__ import annotations

import csv
import math
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
    header = next(reader, None)
    if header is None:
        raise TableError("the file is empty: expected a header line naming the columns")
    positions = _positions(header, [str(name) for name in feature_names], label_column)
    rows = []
    for line, cells in enumerate(reader, start=2):
        if not any(cell.strip() for cell in cells):
            continue  # a blank line
        if len(cells) != len(header):
            raise TableError(f"line {line}: {len(cells)} cells, the header names {len(header)}")
        rows.append([_number(cells[p], line, header[p]) for p in positions])
    if not rows:
        raise TableError("no instances after the header line")
    return np.array(rows, dtype=np.float64)


def _positions(header: list[str], names: list[str], label_column: str | None) -> list[int]:
    """Where each of the model's features is in the header."""
    label = label_column or "label"
    where = {name.strip(): k for k, name in enumerate(header)}
    if label_column is not None and label_column not in where:
        raise TableError(f"no column named {label_column!r} (the label column)")
    missing = [name for name in names if name not in where]
    if missing:
        raise TableError(f"the model's feature {missing[0]!r} is not a column of the file "
                         f"({len(missing)} of its {len(names)} features missing)")  # fmt: skip
    extra = [name for name in where if name not in set(names) and name != label]
    if extra:
        raise TableError(f"column {extra[0]!r} is not one of the model's features (nor the "
                         f"label column {label!r}; name another with --label-column)")  # fmt: skip
    return [where[name] for name in names]


def _number(cell: str, line: int, column: str) -> float:
    if not cell.strip():
        raise TableError(f"line {line}, column {column!r}: the cell is empty")
    try:
        value = float(cell)
    except ValueError:
        raise TableError(f"line {line}, column {column!r}: {cell!r} is not a number") from None
    if not math.isfinite(value):
        raise TableError(f"line {line}, column {column!r}: {cell!r} is not a finite number")
    return value
