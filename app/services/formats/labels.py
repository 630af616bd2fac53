"""The label column of a table upload (CSV, TSV, Parquet): numbers, or text class names.

Rule: a label column where every cell reads as a number is numeric, exactly as before text
labels existed. Otherwise every label is text (the class names), so ``1`` and ``a`` are two text
classes; a cell that reads as a number is then named by that number as the service writes it
(``1``, ``1.0`` and ``01`` are all the class ``"1"``; ``2.5`` is ``"2.5"``). A cell that reads
as nan or inf is refused in either case, as before, and a number of magnitude 2^53 or more in a
text column too (`dataset_store.inexact_class`: float64 merges distinct integers there; a numeric
column holding such a number is a real-valued target, `dataset_store.LabelSummary`). A name
holding a NUL character is refused (`refuse_nul`).

The column is decided while it streams: chunks are numbers until the first cell that is not.
While they are numbers their distinct values are kept (at most MAX_CLASSES), so that rows
already written can be named if text comes later; the writer (`DatasetWriter.finish`) then
rewrites the stored labels as class codes: 0..k-1 in the sorted order of the names, which is
scikit-learn's ``classes_`` order. Bounds, checked per cell: MAX_LABEL_CHARS characters in a
name and MAX_CLASSES distinct names; an empty cell is an error.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from app.services.dataset_store import MAX_CLASSES, MAX_EXACT_CLASS, inexact_class

MAX_LABEL_CHARS = 255


def refuse_nul(name: str, what: str) -> None:
    """A feature or class name holding a NUL character (U+0000) is refused: the service keeps
    names as text, and text elsewhere (PostgreSQL's text type, C strings in export readers)
    holds no NUL; other control characters are kept, and printed as escapes."""
    if "\x00" in name:
        raise ValueError(f"{what} {name!r} holds a NUL character (U+0000), which a name cannot")


def number_name(value: float) -> str:
    """The class name of a label that reads as a number (integers without a decimal point)."""
    value = float(value)
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _refuse_inexact(numbers: np.ndarray, where: Callable[[int], str]) -> None:
    """Numbers of a text label column are classes: none may reach 2^53 (`inexact_class`)."""
    huge = np.flatnonzero(np.abs(numbers) >= MAX_EXACT_CLASS)
    if huge.size:
        raise ValueError(f"{where(int(huge[0]))}: {inexact_class(float(numbers[huge[0]]))}")


def _as_number(cell: str) -> float | None:
    if "_" in cell or not cell.isascii():  # Python's float() takes "1_000", "١" and "１";
        return None  # the numeric readers (numpy's) do not: such a cell is a name
    try:
        return float(cell)
    except ValueError:
        return None


def _meaning(cell: str | None) -> float | str | None:
    """A label cell as a number, as text (stripped), or None when it is empty."""
    if cell is None or not cell.strip():
        return None
    text = cell.strip()
    value = _as_number(text)
    return text if value is None else value


class LabelColumn:
    """Labels chunk by chunk; `where(i)` names the i-th cell of a chunk in messages."""

    def __init__(self, empty_hint: str = ""):
        self.empty_hint = empty_hint  # how a numeric column may send an empty label, if it may
        self.rows = 0
        self.numbers: dict[float, None] | None = {}  # distinct numbers while numeric
        self.codes: dict[str, int] | None = None  # name -> code (first seen), once text
        self.text_from: int | None = None  # the first row of the chunk where text began
        self.number_codes: dict[float, int] = {}  # numbers of the rows before it -> code
        self.zeroed_at: str | None = None  # the first empty label read as 0 (empty_cells=zero)

    def numeric(self, y: np.ndarray, where: Callable[[int], str]) -> np.ndarray:
        """A chunk whose cells all read as numbers: the numbers (still numeric) or the codes."""
        bad = np.flatnonzero(~np.isfinite(y))
        if bad.size:
            raise ValueError(f"{where(int(bad[0]))}: the label is not a finite number")
        self.rows += y.size
        if self.codes is None:
            self._remember(y)
            return y
        _refuse_inexact(y, where)
        return self._encode([number_name(v) for v in y.tolist()], where)

    def cells(self, cells: list[str | None], where: Callable[[int], str]) -> np.ndarray:
        """A chunk of label cells as text (None: a missing cell). Each distinct cell is read
        once (a column of classes repeats a few texts)."""
        meaning = {cell: _meaning(cell) for cell in set(cells)}

        def first(test) -> int:
            return next(i for i, cell in enumerate(cells) if test(meaning[cell]))

        if None in meaning.values():
            numeric = self.codes is None and not any(isinstance(m, str) for m in meaning.values())
            hint = self.empty_hint if numeric else ""  # no hint where text makes it no help
            raise ValueError(f"{where(first(lambda m: m is None))}: the label is empty{hint}")
        if all(isinstance(m, float) for m in meaning.values()):
            return self.numeric(np.asarray([meaning[c] for c in cells], dtype=np.float64), where)
        if any(isinstance(m, float) and not np.isfinite(m) for m in meaning.values()):
            bad = first(lambda m: isinstance(m, float) and not np.isfinite(m))
            raise ValueError(f"{where(bad)}: the label is not a finite number")
        numbers = [m if isinstance(m, float) else 0.0 for m in map(meaning.get, cells)]
        _refuse_inexact(np.asarray(numbers), where)
        self._start_text(where(first(lambda m: isinstance(m, str))))
        self.rows += len(cells)
        names = {c: number_name(m) if isinstance(m, float) else m for c, m in meaning.items()}
        return self._encode([names[c] for c in cells], where)

    def zeroed(self, where: str) -> None:
        """An empty label was read as 0 (empty_cells=zero): a number while the column is
        numeric, but never a made-up class: refused once the column is text, now or later."""
        if self.codes is not None:
            raise ValueError(f"{where}: the label is empty")
        self.zeroed_at = self.zeroed_at or where

    def _remember(self, y: np.ndarray) -> None:
        if self.numbers is None:
            return
        values = np.unique(y)
        if values.size <= MAX_CLASSES:  # more are never kept (a regression target's block)
            self.numbers.update(dict.fromkeys(values.tolist()))
        if values.size > MAX_CLASSES or len(self.numbers) > MAX_CLASSES:
            self.numbers = None  # too many to be classes: a later text cell is refused

    def _start_text(self, where: str) -> None:
        if self.codes is not None:
            return
        if self.numbers is None:
            raise ValueError(
                f"{where}: a text label after more than {MAX_CLASSES} distinct numeric labels "
                f"(a text label column has at most {MAX_CLASSES} classes)"
            )
        if self.zeroed_at is not None:
            raise ValueError(
                f"{self.zeroed_at}: the label is empty (empty_cells=zero reads it as 0 only in "
                f"a numeric label column; this one has text labels, from {where})"
            )
        huge = [v for v in self.numbers if abs(v) >= MAX_EXACT_CLASS]
        if huge:
            raise ValueError(f"{where}: a text label makes every label a class, and "
                             f"{inexact_class(huge[0])}")
        self.codes = {}
        self.text_from = self.rows
        for value in sorted(self.numbers):
            name = number_name(value)
            self.number_codes[value] = self.codes.setdefault(name, len(self.codes))

    def _encode(self, names: list[str], where: Callable[[int], str]) -> np.ndarray:
        out = np.empty(len(names), dtype=np.float64)
        for i, name in enumerate(names):
            code = self.codes.get(name)
            if code is None:
                refuse_nul(name, f"{where(i)}: the label")
                if len(name) > MAX_LABEL_CHARS:
                    raise ValueError(
                        f"{where(i)}: the label has {len(name)} characters, more than the "
                        f"{MAX_LABEL_CHARS} accepted"
                    )
                if len(self.codes) >= MAX_CLASSES:
                    raise ValueError(
                        f"{where(i)}: more than {MAX_CLASSES} distinct labels (classes); a "
                        f"text label column has at most {MAX_CLASSES}"
                    )
                code = self.codes[name] = len(self.codes)
            out[i] = code
        return out

    def text(self) -> dict | None:
        """What the writer needs to store text labels (None: the column is numeric)."""
        if self.codes is None:
            return None
        return {
            "names": list(self.codes),  # by code
            "text_from": self.text_from,
            "number_codes": self.number_codes,
        }


def text_classes(classes: list[dict] | None) -> list[str] | None:
    """The class names of a dataset whose labels are text (its stored y holds their codes, in
    this order), else None."""
    if classes and isinstance(classes[0].get("label"), str):
        return [c["label"] for c in classes]
    return None


def class_name(label) -> str:
    """A class as text, to match classes between a model and a dataset by name: text as it
    is, a number as `number_name` writes it."""
    return label if isinstance(label, str) else number_name(label)


def recode(y: np.ndarray, names: list[str], onto: list) -> np.ndarray:
    """Codes `y` of the classes `names`, as indices into `onto` (a model's classes); -1 for a
    class `onto` does not hold."""
    position = {class_name(c): i for i, c in enumerate(onto)}
    table = np.asarray([position.get(n, -1) for n in names] or [-1], dtype=np.int64)
    return table[np.asarray(y, dtype=np.int64)]


def named_values(y: np.ndarray, names: list[str], numbers: list[float]) -> np.ndarray:
    """Codes `y` of the classes `names`, as the numeric classes `numbers` whose name they are
    (NaN, equal to no prediction, for a name that is no number of `numbers`)."""
    value = {number_name(v): v for v in numbers}
    table = np.asarray([value.get(n, np.nan) for n in names] or [np.nan], dtype=np.float64)
    return table[np.asarray(y, dtype=np.int64)]


def coded_weights(params: dict, names: list[str]) -> dict:
    """Job params for a dataset of text labels: a class_weight dict keyed by class name is
    keyed by the classes' codes, as the stored labels are."""
    weights = params.get("class_weight")
    if not isinstance(weights, dict):
        return params
    code = {name: i for i, name in enumerate(names)}
    return {**params, "class_weight": {code[str(k)]: v for k, v in weights.items()}}
