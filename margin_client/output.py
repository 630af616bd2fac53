"""How the `margin` client commands print: JSON with ``--json``, else tables and fields (rich).

Piped output keeps whole lines (rich would otherwise cut it at the terminal's width), so that
grep and cut see every id; id columns fold rather than lose their end to an ellipsis.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any


def emit(args: argparse.Namespace, value: Any, human: Callable[[Any], None]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
    else:
        human(value)


def console():
    from rich.console import Console

    # piped output keeps whole lines (rich would otherwise cut it at 80 columns), so that
    # grep and cut see every id
    return Console(highlight=False, width=None if sys.stdout.isatty() else PIPE_WIDTH)


def show(renderable) -> None:
    """Print a rich table; piped, without the spaces rich pads every line with to the width of
    the widest (a pipe's width is PIPE_WIDTH)."""
    out = console()
    if sys.stdout.isatty():
        out.print(renderable)
        return
    with out.capture() as captured:
        out.print(renderable)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))


PIPE_WIDTH = 10_000
LONG_VALUE = 200  # a nested value longer than this is cut in a field view (--json shows all)
ID_COLUMNS = ("id", "dataset", "model")  # never cut: an id with an ellipsis names nothing


def table(rows: list[dict], columns: list[tuple[str, Callable[[dict], Any]]]) -> None:
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for title, _ in columns:
        # an id too long for a narrow terminal folds onto a second line instead of losing
        # its end to an ellipsis
        table.add_column(title, overflow="fold" if title in ID_COLUMNS else "ellipsis")
    for row in rows:
        table.add_row(*(plain(text(get(row))) for _, get in columns))
    show(table)


def text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value)
    return visible(str(value))


# control characters and the bidirectional overrides: a class name, a dataset's name or a job's
# error comes from whoever uploaded it, and printed raw an ESC sequence drives the terminal
_HIDDEN = {c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F] if chr(c) not in "\t\n"} | {
    c: f"\\u{c:04x}" for c in [*range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A)]
}


def visible(value: str) -> str:
    """Text for a terminal: control characters but tab and newline written as escapes
    (\\x1b), never sent."""
    return value.translate(_HIDDEN)


def plain(value: str):
    """Text rich prints as it is: ``[red]`` or ``[/bold]`` in a name is no markup (a closing
    tag that closes nothing stopped the command with rich's MarkupError)."""
    from rich.text import Text

    return Text(visible(value))


def fields(record: dict) -> None:
    """One record as name and value lines; a nested value longer than LONG_VALUE is cut (with
    --json every value is whole), and a model's search gets a table of its own below."""
    from rich.table import Table

    table = Table(box=None, show_header=False)
    table.add_column(style="bold")
    table.add_column()
    selection = record.get("selection")
    for key, value in record.items():
        if key == "selection" and selection:
            value = (f"C {text(selection['C'])}, {selection['scoring']} "
                     f"{text(selection['best_score'])} (cross-validation below)")  # fmt: skip
        shown = shortened(value) if isinstance(value, dict | list) else text(value)
        table.add_row(plain(key), plain(shown))
    show(table)
    if selection:
        print()
        search_table(selection)


def shortened(value: dict | list) -> str:
    whole = visible(text(value))
    if len(whole) <= LONG_VALUE:
        return whole
    return f"{whole[: LONG_VALUE - 40]}… ({len(whole):,} characters; --json shows all)"


PASSES_NOTE = (
    "passes: of each fold's solve, started from the previous C's solution "
    "(0: that solution already met tol)"
)


def search_table(selection: dict) -> None:
    """A search's cross-validation: per C the mean and spread of its fold scores, the solver's
    passes (fewest to most over the folds), the statuses and the largest duality gap; the
    chosen C marked."""
    print(PASSES_NOTE)
    print(f"{selection.get('cv')}-fold cross-validation, {selection['scoring']}:")
    rows = [
        {"": "*" if row["C"] == selection["C"] else "", "C": row["C"],
         "mean": row["mean_score"], "std": row["std_score"],
         "passes": "–".join(dict.fromkeys(map(str, (min(row["n_iter"]), max(row["n_iter"]))))),
         "status": ", ".join(sorted(set(row["status"]))),
         "largest gap": max(row["duality_gap"])}
        for row in selection.get("table", [])
    ]  # fmt: skip
    table(rows, [(name, lambda row, name=name: row[name]) for name in rows[0]] if rows else [])


def labels(dataset: dict) -> str:
    labels = dataset.get("labels") or {}
    if labels.get("kind") == "classes":
        return " ".join(f"{text(c['label'])}:{c['count']}" for c in labels.get("classes", []))
    return f"real [{text(labels.get('min'))}, {text(labels.get('max'))}]"


DATASET_COLUMNS = [
    ("id", lambda d: d["id"]),
    ("name", lambda d: d["name"]),
    ("rows", lambda d: d["n_rows"]),
    ("features", lambda d: d["n_features"]),
    ("nnz", lambda d: d["nnz"]),
    ("labels", labels),
]
JOB_COLUMNS = [
    ("id", lambda j: j["id"]),
    ("status", lambda j: j["status"]),
    ("estimator", lambda j: j["estimator"]),
    ("dataset", lambda j: j.get("dataset_id")),
    ("gap", lambda j: (j.get("progress") or {}).get("gap")),
    ("%", lambda j: None if j.get("percent") is None else round(j["percent"])),
    ("model", lambda j: j.get("model_id")),
]
MODEL_COLUMNS = [
    ("id", lambda m: m["id"]),
    ("estimator", lambda m: m["estimator"]),
    ("dataset", lambda m: m.get("dataset_id")),
    ("status", lambda m: m["status"]),
    ("gap", lambda m: m.get("gap")),
    ("duality gap", lambda m: m.get("duality_gap")),
    ("train acc.", lambda m: m.get("train_accuracy")),
    ("created", lambda m: str(m.get("created_at", ""))[:19]),
]

RUN_COLUMNS = [
    ("id", lambda r: r["id"]),
    ("status", lambda r: r["status"]),
    ("dataset", lambda r: r.get("dataset_id")),
    ("rows", lambda r: r.get("n_rows")),
    ("created", lambda r: str(r.get("created_at", ""))[:19]),
    ("error", lambda r: r.get("error")),
]
