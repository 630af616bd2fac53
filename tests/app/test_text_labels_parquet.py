"""Text class labels in Parquet and npz uploads: the npz's unicode array, a Parquet label column
read as a dictionary (a repeated long name costs its indices, whatever the footer lists), its
encodings, and a label that is not UTF-8 named by its row without a copy of it per row."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.services.formats.labels import MAX_LABEL_CHARS
from tests.app.text_label_helpers import flowers, nothing_stored, post, sklearn_reference, train

pytestmark = pytest.mark.timeout(180)


def test_npz_text_labels(app, client, settings):
    """An npz whose y is a unicode array (as the client sends (X, y) with text labels): the
    same classes and model as the CSV; a label over the bound is refused before it is read."""
    from margin_client._encode import npz_bytes

    X, labels = flowers(14)
    uploaded = post(client, npz_bytes(X, labels), "f.npz")  # an object array of str
    assert uploaded.status_code == 201, uploaded.text
    names, counts = np.unique(labels.astype(str), return_counts=True)
    assert uploaded.json()["labels"]["classes"] == [
        {"label": n, "count": int(c)} for n, c in zip(names, counts, strict=True)
    ]
    model = train(app, client, uploaded.json()["id"])
    predicted = client.post(f"/v1/models/{model['id']}/predict", json={"instances": X.tolist()})
    expected = sklearn_reference(X, labels.astype(str)).predict(X).tolist()
    assert predicted.json()["labels"] == expected
    client.delete(f"/v1/datasets/{uploaded.json()['id']}")
    wide = labels.astype(str).astype(f"<U{MAX_LABEL_CHARS + 1}")
    wide[3] = "x" * (MAX_LABEL_CHARS + 1)
    refused = post(client, npz_bytes(X, wide), "w.npz")
    assert refused.status_code == 422 and "256 characters" in refused.json()["detail"]
    # the width bounds the array, whose names may all be short: the message says so
    padded = post(client, npz_bytes(X, labels.astype(str).astype("<U300")), "p.npz")
    assert padded.status_code == 422
    assert "a unicode array of 300 characters a label (its width)" in padded.json()["detail"]
    nothing_stored(client, settings)


_PARSE_PEAK = """
import resource, sys
from app.services.dataset_files import parse_to_arrays
meta = parse_to_arrays(sys.argv[1], sys.argv[2], fmt="parquet")
print(meta.get("error", "no error"))
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def _one_name_file(tmp_path, name: str):
    """A Parquet file of one name over a million rows (dictionary-encoded, one row group)."""
    n = 1_000_000
    labels = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), [name])
    path = tmp_path / f"{len(name)}.parquet"
    table = pa.table({"label": labels.dictionary_decode(), "a": np.zeros(n)})
    pq.write_table(table, path, row_group_size=n)
    assert path.stat().st_size < 100_000
    return path


def _parse_peak_kb(path, tmp_path, error: str = "no error") -> int:
    """The peak resident memory of a process that parses the Parquet file at `path`, which
    ends with `error`."""
    import subprocess
    import sys

    run = [sys.executable, "-c", _PARSE_PEAK, str(path), str(tmp_path / f"out-{path.stem}")]
    done = subprocess.run(run, capture_output=True, text=True, timeout=120, check=True)
    said, peak = done.stdout.splitlines()[-2:]
    assert said == error, done.stdout
    return int(peak)


def test_a_repeated_long_parquet_name_costs_its_indices_not_its_copies(tmp_path):
    """A dictionary-encoded label column of one 255-character name over a million rows (a 33 kB
    file) decoded, read as plain strings, to a copy of the name per row (255 MB more than a
    one-character name, beyond the row group's decoded bound); read as a dictionary, the
    names cost their indices."""
    long, short = _one_name_file(tmp_path, "x" * MAX_LABEL_CHARS), _one_name_file(tmp_path, "x")
    assert _parse_peak_kb(long, tmp_path) < _parse_peak_kb(short, tmp_path) + 64 * 1024


def test_a_footer_that_leaves_out_the_dictionary_does_not_hide_it(tmp_path):
    """The footer's list of a column chunk's encodings is the writer's word: the dictionary-
    encoded labels above, listed as DELTA_LENGTH_BYTE_ARRAY instead of RLE_DICTIONARY, were
    read as plain strings (a copy of the name per row, 255 MB more); the encodings in the page
    headers decide."""
    long, short = _one_name_file(tmp_path, "x" * MAX_LABEL_CHARS), _one_name_file(tmp_path, "x")
    data = bytearray(long.read_bytes())
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    # the label column's metadata: field 1 type BYTE_ARRAY (6), then field 2 its encodings
    at = data.index(b"\x15\x0c\x19", footer) + 3
    listed = data[at + 1 : at + 1 + (data[at] >> 4)]
    data[at + 1 + listed.index(2 * 8)] = 2 * 6  # RLE_DICTIONARY -> DELTA_LENGTH_BYTE_ARRAY
    long.write_bytes(data)
    encodings = pq.read_metadata(long).row_group(0).column(0).encodings
    assert "DELTA_LENGTH_BYTE_ARRAY" in encodings and "RLE_DICTIONARY" not in encodings
    assert _parse_peak_kb(long, tmp_path) < _parse_peak_kb(short, tmp_path) + 64 * 1024


@pytest.mark.parametrize("dictionary", [False, True])
def test_a_parquet_label_that_is_not_utf8_names_its_row(client, settings, dictionary):
    """pyarrow reads a Parquet string column without checking it: bytes that are not UTF-8 were
    refused with Python's "'utf-8' codec can't decode byte 0xff in position 0", no row named."""
    items = [b"spam", b"ham", b"\xff\xfe", b"ham"]
    offsets = np.cumsum([0] + [len(i) for i in items]).astype(np.int32)
    buffers = [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(b"".join(items))]
    labels = pa.Array.from_buffers(pa.string(), len(items), buffers)
    out = io.BytesIO()
    table = pa.table({"label": labels, "a": np.arange(4.0)})
    pq.write_table(table, out, use_dictionary=dictionary, row_group_size=2)
    refused = post(client, out.getvalue(), "bad.parquet")
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"] == "row 3: the label is not UTF-8 text"
    nothing_stored(client, settings)


def test_a_long_name_that_is_not_utf8_is_found_without_a_copy_per_row(tmp_path):
    """The row of a name that is not UTF-8 was found on the decoded column: a dictionary of one
    8,000-byte name over 65,536 rows (a 1.5 kB file) became a copy of the name per row, +1 GB
    of the parser; the dictionary's names are checked once each."""

    def one_name(size: int):
        name = b"\xff" * size
        offsets = pa.py_buffer(np.array([0, size], np.int32).tobytes())
        names = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(name)])
        n = 65_536
        labels = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), names)
        path = tmp_path / f"bad{size}.parquet"
        pq.write_table(pa.table({"label": labels, "a": np.zeros(n)}), path)
        assert path.stat().st_size < 10_000
        return _parse_peak_kb(path, tmp_path, "row 1: the label is not UTF-8 text")

    assert one_name(8000) < one_name(1) + 128 * 1024


@pytest.mark.parametrize("encoding", ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"])
def test_parquet_label_encodings(client, settings, encoding):
    """Labels read as a dictionary: pyarrow cannot read the delta encodings so (a 500, "Not yet
    implemented: DecodeArrow of DictAccumulator"); DELTA_LENGTH_BYTE_ARRAY is read as plain
    strings (its pages hold every byte), DELTA_BYTE_ARRAY, whose pages hold only what differs
    from the previous name, is refused by name."""
    labels = ["spam", "ham", "spam", "eggs"] * 10
    out = io.BytesIO()
    table = pa.table({"label": labels, "a": np.arange(40.0)})
    pq.write_table(table, out, use_dictionary=False, column_encoding={"label": encoding})
    answer = post(client, out.getvalue(), f"{encoding}.parquet")
    if encoding == "DELTA_BYTE_ARRAY":
        assert answer.status_code == 422, answer.text
        assert "DELTA_BYTE_ARRAY" in answer.json()["detail"]
        nothing_stored(client, settings)
        return
    assert answer.status_code == 201, answer.text
    counts = {c["label"]: c["count"] for c in answer.json()["labels"]["classes"]}
    assert counts == {"eggs": 10, "ham": 10, "spam": 20}
