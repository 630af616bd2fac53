"""CSV and TSV uploads: the stored arrays equal the table's non-zeros (checked against numpy's
own reader), the empty-cell policy is honoured, errors name the line and column and store
nothing, and every bound (a cell, a line's length, the columns) answers before memory is spent."""

from __future__ import annotations

import csv
import gzip
import io

import numpy as np
import pytest

from tests.app.table_helpers import csv_bytes, nothing_stored, post, stored, table

pytestmark = pytest.mark.one_database

CSV_FIELD = csv.field_size_limit()  # the csv module's bound on a cell: 131072 characters


def test_csv_upload_stores_the_nonzeros_and_the_feature_names(client, settings):
    X, y = table()
    response = post(client, csv_bytes(X, y))
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["format"] == "csv" and body["zero_based"] is True
    assert body["feature_names"] == ["f0", "f1", "f2", "f3", "f4"]
    assert (body["n_rows"], body["n_features"], body["nnz"]) == (60, 5, np.count_nonzero(X))
    Xs, ys = stored(settings, body)
    reference = np.loadtxt(io.BytesIO(csv_bytes(X, y)), delimiter=",", skiprows=1)
    assert np.array_equal(Xs.toarray(), reference[:, 1:]) and np.array_equal(ys, reference[:, 0])


def test_tsv_by_its_gzip_file_name_with_the_label_last(client, settings):
    X, y = table(1)
    body = gzip.compress(csv_bytes(X, y, sep="\t", label_first=False))
    response = post(client, body, filename="train.tsv.gz")
    assert response.status_code == 201, response.text
    assert response.json()["format"] == "tsv"
    Xs, ys = stored(settings, response.json())
    assert np.array_equal(Xs.toarray(), X) and np.array_equal(ys, y)


def test_empty_cells_are_an_error_or_zero(client, settings):
    text = b"label,a,b,c\n1,0.5,,2\n-1,,1,\n"
    refused = post(client, text)
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith("line 2, column 'b': the cell is empty")
    nothing_stored(client, settings)
    accepted = post(client, text, empty_cells="zero")
    assert accepted.status_code == 201, accepted.text
    # an empty label of numbers: the hint still applies (a text column's empty label is refused
    # either way, tests/app/test_text_labels_upload.py)
    refused = post(client, b"label,a\n1,2\n,3\n")
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "line 3: the label is empty (send empty_cells=zero to read empty cells as 0)"
    )
    Xs, ys = stored(settings, accepted.json())
    assert Xs.toarray().tolist() == [[0.5, 0, 2], [0, 1, 0]] and ys.tolist() == [1, -1]


BAD_CSV = {
    "a word": (b"label,a,b\n1,2,3\n1,x,3\n", "line 3, column 'a': 'x' is not a number"),
    "an underscore": (b"label,a,b\n1,2,3\n1,2,1_000\n", "line 3, column 'b': '1_000' is not"),
    # Python's float() reads the digits of every script, numpy's reader ASCII only: the cell
    # was not found and the message named no column
    "digits of another script": ("label,a,b\n1,2,3\n1,\u0663,3\n".encode(),
                                 "line 3, column 'a': '\u0663' is not a number"),
    "fullwidth digits": ("label,a,b\n1,2,3\n1,2,\uff13\n".encode(),
                         "line 3, column 'b': '\uff13' is not a number"),
    "a short row": (b"label,a,b\n1,2,3\n1,2\n", "line 3: expected 3 cells"),
    "a long row": (b"label,a,b\n1,2,3,4\n", "line 2: expected 3 cells"),
    "nan": (b"label,a,b\n1,nan,3\n", "line 2, column 'a': 'nan' is not a finite number"),
    # read as inf: the message quoted "inf", not what the file holds
    "beyond float64": (b'label,a,b\n1,2,3\n1,2,"1e309"\n',
                       "line 3, column 'b': '1e309' is not a finite number"),
    # a row is one line: a quoted cell holding a line break is refused where the row starts (a
    # block cut at a line end could split such a row into two rows, silently)
    "a cell of two lines": (b'label,a,b\n1,"2\n",3\n1,x,3\n',
                            "line 2: a quoted cell holds a line break"),
    "a text label of two lines": (b'a,b,label\n1,2,x\n3,4,"no\nte"\n',
                                  "line 3: a quoted cell holds a line break"),
    "a number over two lines": (b'label,a,b\n1,2,3\n1,"4\n5",6\n',
                                "line 3: a quoted cell holds a line break"),
    "a quote never closed": (b'label,a,b\n1,2,3\n1,"4,6\n1,2,3\n',
                             "line 3: a quoted cell holds a line break (or its quote is not"),
    "a carriage return inside a row": (b"label,a\n1,2\r-1,3\n",
                                       "line 2: a carriage return inside a row"),
    "no rows": (b"label,a,b\n", "no rows"),
    "duplicate names": (b"label,a,a\n1,2,3\n", "'a' appears twice"),
    "no feature": (b"label\n1\n", "at least one feature"),
    "unnamed column": (b"label,,b\n1,2,3\n", "column 2 has no name"),
    # a cell just over the csv module's field size limit: its csv.Error was a 500
    "a long name": (b"label,a," + b"n" * (CSV_FIELD + 1) + b"\n1,2,3\n",
                    f"line 1: a cell holds more than {CSV_FIELD} characters"),
    "a long label": (b"label,a\n1,2\n" + b"s" * (CSV_FIELD + 1) + b",3\n",
                     f"line 3: a cell holds more than {CSV_FIELD} characters"),
    "a long word": (b"label,a\n1,2\n1," + b"x" * (CSV_FIELD + 1) + b"\n",
                    f"line 3: a cell holds more than {CSV_FIELD} characters"),
    "a long number": (b"label,a\n1,2\n1," + b"9" * (CSV_FIELD + 1) + b"\n",  # read as inf
                      f"line 3: a cell holds more than {CSV_FIELD} characters"),
}


@pytest.mark.parametrize("case", sorted(BAD_CSV))
def test_malformed_csv_is_422_naming_line_and_column(client, settings, case):
    text, message = BAD_CSV[case]
    response = post(client, text)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    nothing_stored(client, settings)


def test_a_quoted_line_break_is_refused_wherever_the_blocks_are_cut(app, client, settings):
    # the text is read in blocks cut at line ends: a row whose quoted label spans lines, cut
    # between two blocks, was stored as two rows with two made-up classes ("note", 'end"')
    row = b'1,2,"note\n3,4,end"\n'
    data = b"a,b,label\n" + b'0,0,"pzzzz"\n' + row * 240_000  # over one 4 MB block
    app.state.settings.max_expanded_mb = 64
    response = post(client, gzip.compress(data), filename="data.csv.gz")
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("line 3: a quoted cell holds a line break")
    nothing_stored(client, settings)
    quoted = post(client, b'label,"a",b\n"1","2",3\n-1,"4",0\n')  # quotes on one line: read
    assert quoted.status_code == 201, quoted.text
    Xs, ys = stored(settings, quoted.json())
    assert Xs.toarray().tolist() == [[2, 3], [4, 0]] and ys.tolist() == [1, -1]


def test_a_name_at_the_csv_field_limit_is_kept(client):
    name = "n" * CSV_FIELD
    response = post(client, f"label,{name}\n1,2\n-1,3\n".encode())
    assert response.status_code == 201, response.text
    assert response.json()["feature_names"] == [name]


def test_a_line_over_max_line_mb_and_a_header_over_max_features_are_413(app, client, settings):
    app.state.settings.max_line_mb = 0.01  # 10 kB
    long_line = b"label,a\n1,2\n" + b"1," + b"0" * 20_000 + b"\n"
    response = post(client, long_line)
    assert response.status_code == 413 and "line 3" in response.json()["detail"]
    app.state.settings.max_line_mb = 16
    app.state.settings.max_features = 100
    wide = ("label," + ",".join(f"c{j}" for j in range(101)) + "\n").encode()
    response = post(client, wide + b"1" + b",0" * 101 + b"\n")
    assert response.status_code == 413 and "MAX_FEATURES" in response.json()["detail"]
    nothing_stored(client, settings)
