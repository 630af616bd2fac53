"""The CSV of a background prediction run: its header, its rows written chunk by chunk, and an
upper estimate of its size (checked against the tenant's storage quota before the run starts).

A run's CSV is written to ``DATA_DIR/tmp/prediction-<host>-<pid>-<run id>.csv.part`` and renamed
when complete, so a stored CSV is whole.
"""

from __future__ import annotations

import csv
import io
import os
import socket
from pathlib import Path

import numpy as np

from app.services.dataset_source import finite_rows
from app.services.prediction import (
    LinearModel,
    decision_function,
    labels_from_decision,
    probabilities_of,
)


def staging_path(data_dir: Path, run_id: str) -> Path:
    """Where a run's CSV is written on this machine before it goes to storage, named after this
    host and process as `uploads.temp_name` names its files: the sweep of temporary files then
    removes the CSV of a process killed mid-run (``<run id>.csv`` was kept a day)."""
    return Path(data_dir) / "tmp" / f"prediction-{socket.gethostname()}-{os.getpid()}-{run_id}.csv"


def csv_header(model: LinearModel, probabilities: bool = False) -> list[str]:
    if model.is_regressor:
        return ["row", "value"]
    extra = [f"probability_{c}" for c in model.classes] if probabilities else []
    if model.coef.shape[0] == 1:
        return ["row", "label", "decision_value", *extra]
    return ["row", "label", *(f"decision_value_{c}" for c in model.classes), *extra]


def header_bytes(model: LinearModel, probabilities: bool = False) -> int:
    """Bytes of the CSV's header line as written: a column per class and output (two with
    probabilities), each naming its class, so with many long class names it outweighs rows."""
    line = io.StringIO()
    csv.writer(line).writerow(csv_header(model, probabilities))
    return len(line.getvalue().encode())


def write_csv(path: Path, model: LinearModel, chunks, probabilities: bool = False) -> int:
    """Write the predictions of every chunk of ``(first row, X, y)`` to ``path`` (atomically);
    returns the row count. `probabilities`: a calibrated classifier's class probabilities
    follow the decision values, a column per class in the model's order."""
    part = path.with_suffix(".csv.part")
    part.parent.mkdir(parents=True, exist_ok=True)
    n_rows = 0
    try:
        with open(part, "w", newline="") as fh:
            out = csv.writer(fh)
            out.writerow(csv_header(model, probabilities))
            for start, X, _ in chunks:
                D = finite_rows(decision_function(model, X), start)
                rows = range(start, start + D.shape[0])
                n_rows += D.shape[0]
                if model.is_regressor:
                    out.writerows(zip(rows, map(repr, D[:, 0].tolist()), strict=True))
                    continue
                labels = labels_from_decision(model, D)
                numbers = np.hstack([D, probabilities_of(model, D)]) if probabilities else D
                values = [[repr(v) for v in r] for r in numbers.tolist()]
                out.writerows([r, lab, *v] for r, lab, v in zip(rows, labels, values, strict=True))
        os.replace(part, path)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    return n_rows


CSV_FIELD_BYTES = 24  # a row index, a label or a float64's repr, with its comma: at most about


def csv_estimate(n_rows: int, outputs: int, label_bytes: int = 0, header: int = 0) -> int:
    """An upper estimate of a run's CSV: its `header` line's bytes, then a row index, a label
    and the decision values (and probabilities) a row (`label_bytes`: the widest label as
    written, when wider than a number: a class name)."""
    row = CSV_FIELD_BYTES * (2 + outputs) + max(0, label_bytes - CSV_FIELD_BYTES)
    return header + n_rows * row


def label_width(classes: list | None) -> int:
    """Bytes of the widest class name in the CSV: quoted, its quotes doubled, with a comma."""
    names = [c for c in classes or [] if isinstance(c, str)]
    return max((2 * len(c.encode()) + 3 for c in names), default=0)
