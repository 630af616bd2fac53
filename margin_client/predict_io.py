"""What `margin predict` reads and writes: its input file as instances (LIBSVM lines, or a CSV
or TSV table matched to the model's features), and its predictions as CSV rows or JSON.

A file may be stdin (-) and gzip, bz2 or xz compressed; numpy and the table reader are imported
only when a prediction needs them, so that importing the CLI stays cheap.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def open_text(path: Path):
    """A text handle on a file or stdin (-), gzip, bz2 or xz compressed or not; a UTF-8
    byte-order mark is dropped."""
    import bz2
    import gzip
    import io
    import lzma

    raw = io.BytesIO(sys.stdin.buffer.read()) if str(path) == "-" else path.open("rb")
    head = raw.read(6)
    raw.seek(0)
    opener = (
        gzip.open if head.startswith(b"\x1f\x8b")
        else bz2.open if head.startswith(b"BZh")
        else lzma.open if head.startswith(b"\xfd7zXZ")
        else None
    )  # fmt: skip
    binary = raw if opener is None else opener(raw)
    return io.TextIOWrapper(binary, encoding="utf-8-sig", newline="")


def read_lines(path: Path) -> list[str]:
    from margin_client.tables import TableError

    with open_text(path) as handle:
        try:
            text = handle.read()
        except UnicodeDecodeError as exc:
            raise TableError(f"not UTF-8 text ({exc})") from None
    return [line for line in text.splitlines() if line.strip()]


def instances(client, args):
    """(what to predict, the model's record or None): LIBSVM lines, or a table's rows matched
    to the model's features by name."""
    from margin_client.tables import TableError, read_instances, table_format

    fmt = args.format or (None if str(args.file) == "-" else table_format(args.file)) or "libsvm"
    if fmt == "libsvm":
        if args.label_column is not None:
            raise TableError("--label-column is for CSV and TSV tables (a LIBSVM line's label "
                             "comes first)")  # fmt: skip
        return read_lines(args.file), None
    model = client.models.get(args.model)
    with open_text(args.file) as handle:
        return read_instances(handle, fmt, model.get("feature_names"), args.label_column), model


def _number(value: float | str) -> str:
    if isinstance(value, str):  # a class name of text labels (numpy str_ too)
        return str(value)
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def prediction_json(result) -> dict[str, Any]:
    out = {}
    for key in ("labels", "decision_values", "values", "probabilities"):
        value = getattr(result, key)
        if value is not None:
            out[key] = value.tolist()
    if result.labels is not None and result.labels.dtype.kind == "f":  # as the service sends them
        out["labels"] = [_label(v) for v in out["labels"]]
    return out


def _label(value: float) -> int | float:
    """A numeric class label as the service writes it: -1, not -1.0 (the client holds labels
    as floats)."""
    return int(value) if value.is_integer() else value


def prediction_rows(result, classes: list) -> list[list[str]]:
    if result.values is not None:
        return [["row", "value"]] + [[str(i), repr(float(v))] for i, v in enumerate(result.values)]
    k = result.decision_values.shape[1]
    header = ["row", "label"] + (
        ["decision_value"] if k == 1 else [f"decision_value_{_number(c)}" for c in classes]
    )
    import numpy as np

    columns = result.decision_values
    if result.probabilities is not None:
        header += [f"probability_{_number(c)}" for c in classes]
        columns = np.hstack([columns, result.probabilities])
    return [header] + [
        [str(i), _number(label), *(repr(float(v)) for v in values)]
        for i, (label, values) in enumerate(zip(result.labels, columns, strict=True))
    ]


def csv_text(rows: list[list[str]]) -> str:
    """Rows as CSV, a field quoted where it holds a comma, a quote or a line break (a class
    name may: joined with bare commas, "a,b" made two columns of one)."""
    import csv
    import io

    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(rows)
    return out.getvalue()
