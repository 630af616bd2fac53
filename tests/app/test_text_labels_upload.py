"""Text class labels in CSV and TSV uploads: a column of numbers stays numeric and a mixed one is
text, names are read as written (quoted, spaced, digits numpy does not read), text after blocks
of numbers renames the earlier labels, the bounds (label length, class count, an empty label)
answer just over their limits with nothing stored, and a block of text labels holds no more
memory than one of numbers."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.services.dataset_store import MAX_CLASSES
from app.services.formats.labels import MAX_LABEL_CHARS
from tests.app.text_label_helpers import nothing_stored, parquet_data, post

pytestmark = pytest.mark.timeout(180)


def test_a_mixed_column_is_text_and_a_numeric_one_is_unchanged(client):
    mixed = b"label,a\n1,0.5\na,1\n1.0,2\n02,3\n2,1\n"
    body = post(client, mixed, "m.csv").json()
    # numbers in a text column are named as numbers: 1 and 1.0 are "1", 02 is "2"
    assert body["labels"]["classes"] == [{"label": "1", "count": 2}, {"label": "2", "count": 2},
                               {"label": "a", "count": 1}]  # fmt: skip
    numeric = post(client, b"label,a\n1,0.5\n-1,1\n1.0,2\n-1,3\n", "n.csv").json()
    assert numeric["labels"]["classes"] == [{"label": -1, "count": 2}, {"label": 1, "count": 2}]
    strings = parquet_data(np.ones((4, 4)), ["1", "-1", "1.0", "-1"])
    assert post(client, strings, "n.parquet").json()["labels"] == numeric["labels"]


def test_label_length_bound(client, settings):
    at_limit = "x" * MAX_LABEL_CHARS
    ok = post(client, f"label,a\n{at_limit},1\nb,2\n".encode(), "ok.csv")
    assert ok.status_code == 201 and ok.json()["labels"]["classes"][1]["label"] == at_limit
    client.delete(f"/v1/datasets/{ok.json()['id']}")
    over = post(client, f"label,a\nb,1\nb,2\n{at_limit}y,2\n".encode(), "long.csv")
    assert over.status_code == 422, over.text
    assert over.json()["detail"].startswith("line 4: the label has 256 characters")
    nothing_stored(client, settings)
    column = ["b", "x" * (MAX_LABEL_CHARS + 1)]
    over = post(client, parquet_data(np.ones((2, 4)), column), "long.parquet")
    assert over.status_code == 422 and over.json()["detail"].startswith("row 2: the label has")
    nothing_stored(client, settings)


def test_class_count_bound(client, settings):
    def classes(n):
        return ("label,a\n" + "".join(f"c{i},{i % 7}\n" for i in range(n))).encode()

    at_limit = post(client, classes(MAX_CLASSES), "k.csv").json()["labels"]["classes"]
    assert len(at_limit) == MAX_CLASSES and at_limit[-1] == {"label": "c999", "count": 1}
    client.delete(f"/v1/datasets/{client.get('/v1/datasets').json()['items'][0]['id']}")
    over = post(client, classes(MAX_CLASSES + 1), "k.csv")
    assert over.status_code == 422, over.text
    assert over.json()["detail"].startswith(f"line {MAX_CLASSES + 2}: more than {MAX_CLASSES}")
    nothing_stored(client, settings)


def test_an_empty_label_names_its_line(client, settings):
    for params in ({}, {"empty_cells": "zero"}):
        refused = post(client, b"label,a\nspam,1\n,2\n", "e.csv", **params)
        assert refused.status_code == 422, refused.text
        assert refused.json()["detail"] == "line 3: the label is empty"
        nothing_stored(client, settings)
    missing = parquet_data(np.ones((2, 4)), ["spam", None])
    refused = post(client, missing, "e.parquet")
    assert refused.status_code == 422 and "row 2: the label is missing" in refused.json()["detail"]


def test_text_after_a_block_of_numbers_rewrites_the_earlier_labels(tmp_path, monkeypatch):
    """The column turns text in a later block (CSV) or row group (Parquet): the labels already
    stored as numbers are named as numbers and every row ends as its class's code."""
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 4096)  # after the header's first 64 KiB
    cells = ["1", "2", "1.0", "3"] * 6000 + ["2", "1", "spam", "2", "ham", "3", "1.0"]
    path = tmp_path / "mixed.csv"
    path.write_text("label,a\n" + "".join(f"{c},{i}\n" for i, c in enumerate(cells)))
    assert path.stat().st_size > 2 * (1 << 16)
    meta = parse_to_arrays(str(path), str(tmp_path / "csv"), fmt="csv")
    names = ["1", "2", "3", "ham", "spam"]
    assert [c["label"] for c in meta["classes"]] == names
    y = np.load(tmp_path / "csv" / "y.npy")
    as_named = ["1" if c == "1.0" else c for c in cells]
    assert [names[int(v)] for v in y] == as_named

    table = pa.table({"label": cells, "a": np.arange(float(len(cells)))})
    pq.write_table(table, tmp_path / "mixed.parquet", row_group_size=1000)
    meta = parse_to_arrays(str(tmp_path / "mixed.parquet"), str(tmp_path / "pq"), fmt="parquet")
    assert [c["label"] for c in meta["classes"]] == names
    assert [names[int(v)] for v in np.load(tmp_path / "pq" / "y.npy")] == as_named


def test_more_numbers_than_classes_before_a_text_label_is_refused(tmp_path, monkeypatch):
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 64)  # the text label in a block of its own
    path = tmp_path / "many.csv"
    rows = ["0.5,1\n"] * 20_000 + [f"{i / 7},1\n" for i in range(MAX_CLASSES + 50)]
    path.write_text("label,a\n" + "".join(rows) + "spam,1\n")
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv")
    line = len(rows) + 2
    assert meta["error"].startswith(f"line {line}: a text label after more than {MAX_CLASSES}")
    assert not (tmp_path / "out").exists()
    # within one block, the class that is one too many is named where it appears
    monkeypatch.setattr(delimited, "BLOCK_BYTES", 1 << 20)
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv")
    # 0.5 and 999 more numbers are 1000 classes: the next number is one too many
    assert meta["error"].startswith(f"line {20_000 + MAX_CLASSES + 1}: more than {MAX_CLASSES} ")


def test_quoted_and_spaced_names_and_an_open_quote(client, settings):
    """A name may be quoted (holding the separator) and is read without surrounding spaces; a
    quote left open is refused, named by the line it opens on."""
    body = b'label,a\n"Smith, J",1\n  ham ,2\n"ham",3\r\nSmith\xc3\xa9,4\n'
    uploaded = post(client, body, "q.csv").json()
    client.delete(f"/v1/datasets/{uploaded['id']}")
    classes = uploaded["labels"]["classes"]
    assert classes == [{"label": "Smith, J", "count": 1}, {"label": "Smith\u00e9", "count": 1},
                       {"label": "ham", "count": 2}]  # fmt: skip
    refused = post(client, b'label,a\nspam,1\n"ham,2\nspam,3\n', "open.csv")
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("line 3: a quoted cell holds a line break (or its")
    nothing_stored(client, settings)


def test_a_block_of_text_labels_holds_no_more_memory_than_one_of_numbers():
    """A wide table's block read with text labels keeps the label cells, not every cell of the
    block as a Python string (which held twice the numeric read's peak: ~110 MB for a 4 MB
    block of 500 two-digit columns, against ~57 MB)."""

    from app.services.formats.delimited import BLOCK_BYTES

    row = ",".join(["12"] * 500)
    n = BLOCK_BYTES // (len(row) + 6)
    header = "label," + ",".join(f"f{i}" for i in range(500)) + "\n"

    def peak(label: str) -> int:
        return _read_peak((header + "".join(f"{label},{row}\n" for _ in range(n))).encode(), n)

    assert peak("spam") < 1.2 * peak("1")


@pytest.mark.parametrize("text_first", [True, False])
def test_an_empty_label_read_as_zero_is_no_text_class(tmp_path, monkeypatch, text_first):
    """With empty_cells=zero an empty label is 0 in a numeric column, but a text column never
    gets a made-up class "0": the empty label is refused by its line whether the text came in
    an earlier block or comes in a later one (each block here holds only numbers or only text,
    so the block of the empty label reads as numbers)."""
    from app.services.dataset_files import parse_to_arrays
    from app.services.formats import delimited

    monkeypatch.setattr(delimited, "BLOCK_BYTES", 4096)  # after the header's first 64 KiB
    numbers, text = ["1,3\n"] * 20_000, ["spam,1\n"] * 20_000
    rows = [*numbers, ",2\n", *numbers]
    rows = [*text, *rows] if text_first else [*rows, *text]
    path = tmp_path / "empty.csv"
    path.write_text("label,a\n" + "".join(rows))
    options = {"empty_cells": "zero"}
    meta = parse_to_arrays(str(path), str(tmp_path / "out"), fmt="csv", options=options)
    empty_line = rows.index(",2\n") + 2
    assert meta["error"].startswith(f"line {empty_line}: the label is empty")
    assert not (tmp_path / "out").exists()
    # a numeric column reads the empty label as 0, as before text labels
    path.write_text("label,a\n" + "".join([*numbers, ",2\n", *numbers]))
    meta = parse_to_arrays(str(path), str(tmp_path / "num"), fmt="csv", options=options)
    assert meta.get("error") is None
    assert [c["label"] for c in meta["classes"]] == [0, 1]
    y = np.load(tmp_path / "num" / "y.npy")
    assert y[20_000] == 0 and np.all(np.delete(y, 20_000) == 1)


def test_a_numeric_target_is_not_kept_as_candidate_class_names():
    """A block of distinct numeric labels (a regression target) is more than MAX_CLASSES
    numbers: none of them is kept for naming later text labels, so the numeric read holds no
    more than it does for a few classes (before: every distinct value of the block was put in a
    dict first, ~40% over the peak)."""

    from app.services.formats.delimited import BLOCK_BYTES

    n = BLOCK_BYTES // 16

    def peak(label) -> int:
        return _read_peak(("label,a\n" + "".join(f"{label(i)},1\n" for i in range(n))).encode(), n)

    assert peak(lambda i: f"{i * 0.001:.3f}") < 1.1 * peak(lambda i: f"{i % 3:.3f}")


def test_digits_numpy_does_not_read_are_names(client):
    """Python's float() reads Arabic-Indic and full-width digits, numpy's reader does not: such
    labels are class names as written, not the numbers 1 and 2 (nor "1" and "2")."""
    body = "label,a\n\u0661,1\n\u0662,2\n\uff11,3\n1,4\n".encode()
    uploaded = post(client, body, "d.csv")
    assert uploaded.status_code == 201, uploaded.text
    classes = [c["label"] for c in uploaded.json()["labels"]["classes"]]
    assert classes == ["1", "\u0661", "\u0662", "\uff11"]  # code point order, as sorted()


def _read_peak(body: bytes, n_rows: int) -> int:
    """The traced peak of reading a CSV body through DelimitedChunks (asserting its row count)."""
    import tracemalloc

    from app.services.formats.delimited import DelimitedChunks

    tracemalloc.start()
    try:
        rows = sum(len(chunk[3]) for chunk in DelimitedChunks(io.BytesIO(body), ",", {}))
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rows == n_rows
    return held
