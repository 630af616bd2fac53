"""Parquet uploads: the stored arrays equal the table's non-zeros (checked against pyarrow's own
reader), dense and sparse (struct, list) columns, nulls follow the empty-cell policy, errors name
the column and store nothing, and every bound (row group size, pages, column chunks, a lying page
header) answers before memory is spent."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from tests.app.table_helpers import nothing_stored, parquet_bytes, post, stored, table

pytestmark = pytest.mark.one_database


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


def test_a_footer_of_no_bytes_is_422_saying_so(client, settings):
    """The length before the closing magic says 0: pyarrow's refusal of a thrift limit of 0
    was the message, naming none of the file."""
    data = parquet_bytes(pa.table({"label": [1.0, 2.0], "a": [3.0, 4.0]}))
    response = post(client, data[:-8] + bytes(4) + b"PAR1", filename="empty.parquet")
    assert response.status_code == 422, response.text
    assert response.json()["detail"] == "parquet: the footer is empty (0 bytes)"
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


@pytest.mark.parametrize("layout", ["dense", "struct", "list"])
@pytest.mark.parametrize("chunk_nnz", [1, 7, 1000])
def test_row_groups_are_read_in_slices_of_at_most_chunk_nnz_cells(tmp_path, layout, chunk_nnz):
    """The bound the attack tests measure (a row group made dense or sorted whole took several
    times its size), on slices small enough to cut rows of every size: the same rows."""
    from app.services.formats.parquet import ParquetChunks

    X = sp.random(50, 30, density=0.2, random_state=5, format="csr")
    rows = [(X.indices[X.indptr[i]:X.indptr[i + 1]].tolist(),
             X.data[X.indptr[i]:X.indptr[i + 1]].tolist()) for i in range(50)]  # fmt: skip
    if layout == "dense":
        columns = {f"x{j}": X[:, j].toarray().ravel() for j in range(30)}
    elif layout == "struct":
        columns = {"f": [{"indices": i, "values": v} for i, v in rows]}
    else:
        columns = {"f": [[{"index": a, "value": b} for a, b in zip(i, v, strict=True)]
                         for i, v in rows]}  # fmt: skip
    path = tmp_path / "t.parquet"
    path.write_bytes(parquet_bytes(pa.table({"y": np.arange(50), **columns}), row_group_size=17))
    with open(path, "rb") as stream:
        chunks = list(ParquetChunks(stream, str(path), {}, 5, chunk_nnz, label_column="y"))
    for indptr, _, _, _, _ in chunks:
        cells = (len(indptr) - 1) * 30 if layout == "dense" else indptr[-1]
        assert len(indptr) == 2 or cells <= chunk_nnz
    got = sp.vstack([sp.csr_matrix(c[:3][::-1], shape=(len(c[0]) - 1, 30)) for c in chunks])
    assert abs(got - X).max() == 0
    assert np.concatenate([c[3] for c in chunks]).tolist() == list(range(50))
