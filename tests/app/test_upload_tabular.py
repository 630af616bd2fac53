"""CSV, TSV and Parquet uploads: the stored arrays equal the table's non-zeros (checked against
numpy and pyarrow's own readers), the feature names are kept, the label column and empty-cell
policy are honoured, errors name the line (row) and column and store nothing, and every bound
(line length, columns, row group size, a lying page header) answers before memory is spent."""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from app.services.dataset_files import load_arrays
from app.services.datasets import dataset_dir
from app.tables import Dataset

CSV_FIELD = csv.field_size_limit()  # the csv module's bound on a cell: 131072 characters


def table(seed=0, n=60, d=5):
    rng = np.random.default_rng(seed)
    X = np.round(rng.standard_normal((n, d)), 3)
    X[rng.random((n, d)) < 0.5] = 0
    y = np.where(X.sum(axis=1) > 0, 1.0, -1.0)
    return X, y


def csv_bytes(X, y, names=None, sep=",", label="label", label_first=True):
    names = names or [f"f{j}" for j in range(X.shape[1])]
    header = [label, *names] if label_first else [*names, label]
    lines = [sep.join(header)]
    for row, target in zip(X, y, strict=True):
        cells = [f"{v:g}" for v in row]
        lines.append(sep.join([f"{target:g}", *cells] if label_first else [*cells, f"{target:g}"]))
    return ("\n".join(lines) + "\n").encode()


def post(client, body: bytes, filename="data.csv", **params):
    return client.post("/v1/datasets", files={"file": (filename, body)}, params=params)


def stored(settings, body):
    X, y, _ = load_arrays(dataset_dir(settings, body["id"]), body["n_features"])
    return X, y


def nothing_stored(client, settings):
    assert client.get("/v1/datasets").json()["items"] == []
    assert not any((settings.data_dir / "datasets").iterdir())


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


def test_label_column_by_query_or_by_a_field_before_the_file(client, settings):
    X, y = table(2)
    text = csv_bytes(X, y, label="target", label_first=False)
    first = post(client, text, filename="a.csv")  # no 'label' column: the first one is it
    assert first.json()["feature_names"] == ["f1", "f2", "f3", "f4", "target"]
    by_query = post(client, text, filename="b.csv", label_column="target")
    assert by_query.status_code == 201 and by_query.json()["id"] != first.json()["id"]
    assert np.array_equal(stored(settings, by_query.json())[1], y)
    # multipart fields sent before the file part
    fields = [("label_column", (None, "target")), ("format", (None, "csv")),
              ("file", ("noext", text))]
    by_field = client.post("/v1/datasets", files=fields)
    assert by_field.status_code == 200, by_field.text  # the same bytes and options: a duplicate
    assert by_field.json()["id"] == by_query.json()["id"]
    late = client.post("/v1/datasets", files=[("file", ("c.csv", text)),
                                                ("label_column", (None, "target"))])
    assert late.status_code == 422 and "before the file part" in late.json()["detail"]
    missing = post(client, text, label_column="nope")
    assert missing.status_code == 422 and "'nope'" in missing.json()["detail"]


def test_a_tables_parse_option_on_a_file_without_columns_is_refused(client, settings):
    # before: label_column and empty_cells were ignored for LIBSVM and npz, so a user who named
    # the label column trained on whatever the file's own labels were
    from margin_client._encode import npz_bytes

    libsvm = b"1 1:0.5 2:1\n-1 1:-0.5\n"
    refused = post(client, libsvm, filename="data.txt", label_column="target")
    assert refused.status_code == 422
    assert refused.json()["detail"].startswith(
        "label_column: applies to csv, tsv, parquet uploads, not to this libsvm file"
    ), refused.json()["detail"]
    npz = npz_bytes(np.eye(2), np.array([1.0, -1.0]))
    refused = post(client, npz, filename="data.npz", empty_cells="zero")
    assert refused.status_code == 422 and "not to this npz file" in refused.json()["detail"]
    nothing_stored(client, settings)
    assert post(client, libsvm, filename="data.txt").status_code == 201


def test_a_text_label_read_as_a_feature_says_which_column_is_the_label(client, settings):
    # before: "line 2, column 'target': 'setosa' is not a number", with nothing to say that
    # the first column had been taken as the label
    text = b"width,height,target\n1.5,2,setosa\n2.5,1,virginica\n"
    refused = post(client, text, filename="flowers.csv")
    assert refused.status_code == 422
    assert refused.json()["detail"] == (
        "line 2, column 'target': 'setosa' is not a number (a feature column: with no "
        "label_column named and no column 'label', the label is the first column, 'width'; "
        "send label_column to name it)")
    nothing_stored(client, settings)
    named = post(client, b"label,a,b\n1,2,x\n", filename="named.csv")  # the label as named
    assert named.json()["detail"] == "line 2, column 'b': 'x' is not a number"
    accepted = post(client, text, filename="flowers.csv", label_column="target")
    assert accepted.status_code == 201, accepted.text


def test_csv_is_recognised_without_a_name_or_format(client):
    X, y = table(3)
    response = client.post(
        "/v1/datasets", content=csv_bytes(X, y), headers={"content-type": "text/csv"}
    )
    assert response.status_code == 201 and response.json()["format"] == "csv"


def test_a_recognised_format_counts_as_the_format_named(client, settings):
    """The content key held "libsvm" for any format not named: the same CSV bytes sent with
    format=csv (or a name saying .csv) after they were sent unnamed were stored again, and a
    retry under the first one's Idempotency-Key naming csv was told it sent another body."""
    text, raw = csv_bytes(*table(5)), {"content-type": "text/csv"}
    first = client.post("/v1/datasets", content=text, headers=raw)
    assert first.status_code == 201 and first.json()["format"] == "csv"
    for again in (
        client.post("/v1/datasets", content=text, headers=raw),
        client.post("/v1/datasets", content=text, headers=raw, params={"format": "csv"}),
        post(client, text, filename="named.csv"),
        post(client, text, filename="noext"),
    ):
        assert again.status_code == 200, again.text
        assert again.json()["id"] == first.json()["id"]
    other = post(client, text, filename="noext", label_column="f0")  # another parse
    assert other.status_code == 201 and other.json()["id"] != first.json()["id"]
    keyed = {**raw, "Idempotency-Key": "k1"}
    body = csv_bytes(*table(6))
    created = client.post("/v1/datasets", content=body, headers=keyed)
    assert created.status_code == 201, created.text
    named = client.post("/v1/datasets", content=body, headers=keyed, params={"format": "csv"})
    assert named.status_code == 201 and named.headers["idempotent-replayed"] == "true"
    assert named.json()["id"] == created.json()["id"]
    as_tsv = client.post("/v1/datasets", content=body, headers=keyed, params={"format": "tsv"})
    assert as_tsv.status_code == 422 and as_tsv.json()["title"] == "Idempotency-Key reused"
    assert len(client.get("/v1/datasets").json()["items"]) == 3


def test_an_unnamed_upload_stored_under_the_old_content_key_is_found(client, db):
    """Uploads of no named format stored before the format was in the content key hold a key
    saying "libsvm" whatever they were read as: the same CSV bytes again were stored twice and
    a retry under the first upload's Idempotency-Key was a 422. Both find the stored dataset."""
    text, keyed = csv_bytes(*table(5)), {"content-type": "text/csv", "Idempotency-Key": "k1"}
    first = client.post("/v1/datasets", content=text, headers=keyed)
    assert first.status_code == 201 and first.json()["format"] == "csv"
    with db.write() as session:
        stored = session.get(Dataset, first.json()["id"])
        # the earlier release's key: the bytes' hash and the format "libsvm", no options
        text_key = json.dumps({"format": "libsvm", "sha256": stored.sha256}, sort_keys=True)
        stored.content_key = hashlib.sha256(text_key.encode()).hexdigest()
    retry = client.post("/v1/datasets", content=text, headers=keyed)
    assert retry.status_code == 201 and retry.headers["idempotent-replayed"] == "true"
    assert retry.json()["id"] == first.json()["id"]
    again = client.post("/v1/datasets", content=text, headers={"content-type": "text/csv"})
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    as_tsv = client.post("/v1/datasets", content=text, headers=keyed, params={"format": "tsv"})
    assert as_tsv.status_code == 422 and as_tsv.json()["title"] == "Idempotency-Key reused"
    assert len(client.get("/v1/datasets").json()["items"]) == 1


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


@pytest.mark.parametrize("first", [b"label", b"category", b"sepal_length"])
def test_an_unnamed_csv_is_recognised_whatever_its_first_column_name(client, first):
    # the format of an upload that names none is recognised from its first 4096 bytes; the
    # read-ahead handed back 8, so a first name of 8 characters or more read as LIBSVM
    text = first + b",a,b\n1,2,3\n-1,0,1\n"
    response = client.post("/v1/datasets", content=text, headers={"content-type": "text/csv"})
    assert response.status_code == 201, response.text
    assert response.json()["format"] == "csv" and response.json()["n_rows"] == 2


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


# ------------------------------------------------------------------------------------------
# Parquet


def parquet_bytes(tbl: pa.Table, **options) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(tbl, buffer, **options)
    return buffer.getvalue()


def test_dense_parquet_in_several_row_groups(client, settings):
    X, y = table(4, n=300)
    columns = {"label": y, **{f"x{j}": X[:, j] for j in range(5)}}
    columns["x2"] = X[:, 2].astype(np.float32)  # any numeric type
    columns["x4"] = (X[:, 4] > 0)  # booleans are 0/1
    data = parquet_bytes(pa.table(columns), row_group_size=70)
    response = post(client, data, filename="t.parquet")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["format"] == "parquet" and body["feature_names"] == [f"x{j}" for j in range(5)]
    stored_table = pq.read_table(io.BytesIO(data))
    expected = np.column_stack([c.to_numpy().astype(np.float64) for c in stored_table.columns])
    Xs, ys = stored(settings, body)
    assert np.array_equal(Xs.toarray(), expected[:, 1:]) and np.array_equal(ys, expected[:, 0])


def test_parquet_nulls_follow_the_empty_cell_policy(client, settings):
    data = parquet_bytes(pa.table({"label": [1.0, -1.0], "a": [0.5, None], "b": [None, 2.0]}))
    refused = post(client, data, filename="n.parquet")
    assert refused.status_code == 422
    assert "row 2, column 'a'" in refused.json()["detail"]
    nothing_stored(client, settings)
    accepted = post(client, data, filename="n.parquet", empty_cells="zero")
    assert stored(settings, accepted.json())[0].toarray().tolist() == [[0.5, 0], [0, 2]]


@pytest.mark.parametrize("layout", ["struct", "list"])
def test_sparse_parquet_columns(client, settings, layout):
    X = sp.random(40, 30, density=0.2, random_state=5, format="csr")
    y = np.arange(40) % 3
    rows = [(X.indices[X.indptr[i]:X.indptr[i + 1]].tolist(),
             X.data[X.indptr[i]:X.indptr[i + 1]].tolist()) for i in range(40)]
    if layout == "struct":
        column = [{"indices": i, "values": v} for i, v in rows]
    else:
        column = [[{"index": a, "value": b} for a, b in zip(i, v, strict=True)] for i, v in rows]
    data = parquet_bytes(pa.table({"y": y, "features": column}), row_group_size=15)
    response = post(client, data, filename="s.parquet", label_column="y")
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["feature_names"] is None and body["n_features"] == X.indices.max() + 1
    Xs, ys = stored(settings, body)
    assert abs(Xs - X[:, : body["n_features"]]).max() == 0 and np.array_equal(ys, y)


def test_a_parquet_decompression_bomb_is_413_before_decoding(client, settings):
    n = 12_000_000  # 96 MB of zeros in one row group, about 10 kB compressed
    zeros = pa.array(np.zeros(n))
    data = parquet_bytes(
        pa.table({"label": zeros, "x": zeros}), compression="zstd", row_group_size=n,
        use_dictionary=False, write_statistics=False,
    )
    assert len(data) < 200_000
    response = post(client, data, filename="bomb.parquet")
    assert response.status_code == 413, response.text
    assert "row group 0" in response.json()["detail"]
    nothing_stored(client, settings)


def test_a_page_header_that_disagrees_with_the_footer_is_422(client, settings):
    data = bytearray(parquet_bytes(pa.table({"label": [1.0, 2.0], "a": [3.0, 4.0]}),
                                   compression="none", use_dictionary=False))
    meta = pq.read_metadata(io.BytesIO(bytes(data))).row_group(0).column(1)
    start = meta.data_page_offset
    # the page header's uncompressed size (field 2, zigzag varint) made larger than declared
    assert data[start] == 0x15 and data[start + 2] == 0x15
    data[start + 3] = 0x7E  # 63 bytes instead of the real size
    response = post(client, bytes(data), filename="lie.parquet")
    assert response.status_code == 422, response.text
    assert "column a" in response.json()["detail"]
    nothing_stored(client, settings)


def test_a_corrupt_gzip_page_is_422(client, settings):
    """Bytes of a gzip-compressed page changed (its header intact): pyarrow's OSError while the
    row group was read was a 500."""
    rng = np.random.default_rng(0)
    tbl = pa.table({"label": rng.integers(0, 2, 5000).astype(float), "a": rng.random(5000)})
    data = bytearray(parquet_bytes(tbl, compression="gzip", use_dictionary=False))
    meta = pq.read_metadata(io.BytesIO(bytes(data))).row_group(0).column(1)
    middle = meta.data_page_offset + meta.total_compressed_size // 2
    data[middle : middle + 64] = bytes(b ^ 0x5A for b in data[middle : middle + 64])
    response = post(client, bytes(data), filename="corrupt.parquet")
    assert response.status_code == 422, response.text
    assert response.json()["detail"].startswith("parquet: row group 0 cannot be read")
    nothing_stored(client, settings)


def test_a_file_of_tiny_pages_is_413_after_its_page_budget(client, settings):
    from app.services.formats.parquet_pages import MIN_PAGE_BUDGET

    def pages_file(n):  # one value a page: 2 (n - 2) pages beyond the first two of each chunk
        column = pa.array(np.arange(n) % 100, type=pa.int8())
        return parquet_bytes(
            pa.table({"label": column, "x": column}), data_page_size=1, write_batch_size=1,
            compression="none", use_dictionary=False, write_statistics=False,
        )  # fmt: skip

    at_budget = pages_file(MIN_PAGE_BUDGET // 2 + 2)  # exactly MIN_PAGE_BUDGET counted pages
    assert len(at_budget) // 512 < MIN_PAGE_BUDGET
    assert post(client, at_budget, filename="pages.parquet").status_code == 201
    # two pages over (each row adds a page to both columns); before: each page header was read
    # through a 1 MiB window, about 65 µs a page, so that a few MB of such pages held an API
    # thread for minutes
    response = post(client, pages_file(MIN_PAGE_BUDGET // 2 + 3), filename="pages.parquet")
    assert response.status_code == 413, response.text
    assert f"more than {MIN_PAGE_BUDGET} pages" in response.json()["detail"]


def test_a_wide_file_of_small_row_groups_in_default_pages_is_accepted(client, settings):
    from app.services.formats.parquet_pages import MIN_PAGE_BUDGET

    rows, width, groups = 3000, 200, 30  # 30 × 200 chunks of a dictionary and a data page
    X = sp.random(rows, width, density=0.01, random_state=3, format="csr")
    table = pa.table({"label": np.arange(rows) % 2, **{f"f{j}": X[:, j].toarray().ravel()
                                                       for j in range(width)}})  # fmt: skip
    data = parquet_bytes(table, row_group_size=rows // groups)  # pyarrow's default pages
    assert groups * (width + 1) * 2 > MIN_PAGE_BUDGET > len(data) // 512
    settings.max_upload_mb = 8  # the footer of 6,000 chunks takes more than the tests' 1 MB
    response = post(client, data, filename="wide.parquet", label_column="label")
    assert response.status_code == 201, response.text
    assert abs(stored(settings, response.json())[0] - X).max() == 0


def test_a_file_of_tiny_row_groups_or_many_columns_is_413_after_its_chunk_budget(
    client, settings
):
    from app.services.formats.parquet import CHUNK_BYTES, MIN_CHUNK_BUDGET

    def groups_file(n):  # n row groups of one row: 2 n column chunks
        column = pa.array(np.arange(n) % 2, type=pa.int8())
        return parquet_bytes(
            pa.table({"label": column, "x": column}), row_group_size=1, compression="none",
            use_dictionary=False, write_statistics=False,
        )  # fmt: skip

    def wide_file(columns):  # one row group of two rows: `columns` column chunks
        zeros = pa.array(np.zeros(2))
        return parquet_bytes(
            pa.table({"label": [1.0, -1.0], **{f"f{j}": zeros for j in range(columns - 1)}}),
            compression="none", use_dictionary=False, write_statistics=False,
        )  # fmt: skip

    settings.max_upload_mb = 8  # footers of 10,000 chunks take more than the tests' 1 MB
    at_budget = groups_file(MIN_CHUNK_BUDGET // 2)
    assert len(at_budget) // CHUNK_BYTES < MIN_CHUNK_BUDGET
    response = post(client, at_budget, filename="groups.parquet")
    assert response.status_code == 201, response.text
    assert response.json()["n_rows"] == MIN_CHUNK_BUDGET // 2
    # one row group over; before: each chunk cost about 0.1 ms to walk and decode, so that
    # 17 MB of one-row row groups held a parser process for 30 s (a dataset of 100,000 rows)
    response = post(client, groups_file(MIN_CHUNK_BUDGET // 2 + 1), filename="groups.parquet")
    assert response.status_code == 413, response.text
    assert f"more than the {MIN_CHUNK_BUDGET} accepted" in response.json()["detail"]
    # the same bound for columns: 17 MB of 100,000 columns of two rows took 15 s
    response = post(client, wide_file(MIN_CHUNK_BUDGET), filename="wide.parquet")
    assert response.status_code == 201, response.text
    response = post(client, wide_file(MIN_CHUNK_BUDGET + 1), filename="wide.parquet")
    assert response.status_code == 413, response.text
    assert "column chunks" in response.json()["detail"]
    assert len(client.get("/v1/datasets").json()["items"]) == 2


def test_page_headers_longer_than_the_first_window_are_walked(tmp_path):
    from app.services.formats.parquet_pages import FIRST_READ_BYTES, walk_chunk

    long = "x" * (2 * FIRST_READ_BYTES)  # page statistics (min, max) make the header longer
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({"s": [long, long + "y"]}), path, compression="none",
                   use_dictionary=False, write_page_index=False)  # fmt: skip
    column = pq.read_metadata(path).row_group(0).column(0)
    with open(path, "rb") as raw:
        pages = list(walk_chunk(raw, column.data_page_offset, column.total_compressed_size,
                                path.stat().st_size))  # fmt: skip
    assert sum(page.num_values for page in pages) == 2
    assert max(page.header_bytes for page in pages) > FIRST_READ_BYTES


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_page_headers_name_their_values_encoding(tmp_path, version):
    """A data page's header names its encoding (field 2 of a v1 header, 4 of a v2 one); the
    dictionary page names none (-1). Parquet's enum: RLE_DICTIONARY 8, DELTA_LENGTH_... 6."""
    from app.services.formats.parquet_pages import walk_chunk

    path = tmp_path / "encodings.parquet"
    table = pa.table({"d": ["spam", "ham"] * 50, "p": ["spam", "ham"] * 50})
    pq.write_table(table, path, data_page_version=version, use_dictionary=["d"],
                   column_encoding={"p": "DELTA_LENGTH_BYTE_ARRAY"})  # fmt: skip
    group = pq.read_metadata(path).row_group(0)
    found = []
    with open(path, "rb") as raw:
        for c, start in enumerate([group.column(0).dictionary_page_offset,
                                   group.column(1).data_page_offset]):  # fmt: skip
            chunk = walk_chunk(raw, start, group.column(c).total_compressed_size,
                               path.stat().st_size)  # fmt: skip
            found.append([page.encoding for page in chunk])
    assert found == [[-1, 8], [6]]


def test_parquet_errors(client, settings):
    strings = parquet_bytes(pa.table({"label": [1.0], "name": ["x"]}))
    response = post(client, strings, filename="s.parquet")
    assert response.status_code == 422 and "'name'" in response.json()["detail"]
    truncated = parquet_bytes(pa.table({"label": [1.0], "a": [2.0]}))[:-20]
    assert post(client, truncated, format="parquet").status_code == 422
    nothing_stored(client, settings)


@pytest.mark.parametrize("name", ["", "  "])
def test_a_parquet_column_with_no_name_is_422_naming_its_position(client, settings, name):
    # as a CSV header's "label,,b": the empty name was kept as a feature name
    data = parquet_bytes(pa.table({"label": [1.0, -1.0], name: [0.5, 2.0], "b": [1.0, 0.0]}))
    response = post(client, data, filename="unnamed.parquet")
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "parquet: column 2 has no name"
    nothing_stored(client, settings)


def test_empty_parquet_row_groups_are_skipped(client, settings):
    # a writer given an empty table writes a row group of no rows, whose column chunks pyarrow
    # places at offset 0: such a valid file was refused as "a column chunk lies outside the
    # file", and a file of no rows at all never heard that it holds no rows
    tbl = pa.table({"label": [1.0, -1.0, 1.0], "a": [0.5, 2.0, 0.0]})
    buffer = io.BytesIO()
    with pq.ParquetWriter(buffer, tbl.schema) as writer:
        writer.write_table(tbl.slice(0, 2))
        writer.write_table(tbl.slice(0, 0))
        writer.write_table(tbl.slice(2))
    assert pq.ParquetFile(io.BytesIO(buffer.getvalue())).metadata.row_group(1).num_rows == 0
    response = post(client, buffer.getvalue(), filename="t.parquet")
    assert response.status_code == 201, response.text
    Xs, ys = stored(settings, response.json())
    assert Xs.toarray().ravel().tolist() == [0.5, 2.0, 0.0] and ys.tolist() == [1.0, -1.0, 1.0]
    empty = post(client, parquet_bytes(tbl.slice(0, 0)), filename="e.parquet")
    assert empty.status_code == 422
    assert empty.json()["detail"] == "parquet: the file holds no rows"
