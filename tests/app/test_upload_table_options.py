"""The parse options and format of a table upload: the label column named by the query or by a
form field sent before the file, options refused for a file without columns, a text label read
as a feature, CSV recognised without a name or format, and a recognised format counted as the
format named (for duplicates and Idempotency-Key retries, old content keys included)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from app.tables import Dataset
from tests.app.table_helpers import csv_bytes, nothing_stored, post, stored, table

pytestmark = pytest.mark.one_database


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


@pytest.mark.parametrize("first", [b"label", b"category", b"sepal_length"])
def test_an_unnamed_csv_is_recognised_whatever_its_first_column_name(client, first):
    # the format of an upload that names none is recognised from its first 4096 bytes; the
    # read-ahead handed back 8, so a first name of 8 characters or more read as LIBSVM
    text = first + b",a,b\n1,2,3\n-1,0,1\n"
    response = client.post("/v1/datasets", content=text, headers={"content-type": "text/csv"})
    assert response.status_code == 201, response.text
    assert response.json()["format"] == "csv" and response.json()["n_rows"] == 2
