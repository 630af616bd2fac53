"""The NUL character (U+0000) in what a client sends. PostgreSQL's text type cannot hold it (its
driver refuses the value), so every id, cursor or filter holding one answered 500 there. A URL
with one is a 422 before routing, on either database; a JSON string or form field with one is a
422 where the database refuses it, with nothing stored; an upload's file name (display only)
loses it."""

from __future__ import annotations

import base64

import pytest

from app.tables import Dataset
from tests.app.conftest import HEART, upload

NUL_CURSOR = base64.urlsafe_b64encode(b"ds_\x00").decode().rstrip("=")


@pytest.mark.parametrize(
    "url",
    [
        "/v1/datasets/ds_%00",
        "/v1/jobs/job_%00/history",
        "/v1/models/mdl_%00/lineage",
        "/v1/jobs?dataset_id=ds_%00",
        "/v1/jobs?status=queued&x=%00",
    ],
)
def test_a_nul_in_the_url_is_a_422(client, url):
    answer = client.get(url)
    assert answer.status_code == 422, answer.text
    assert "NUL" in answer.json()["detail"]


@pytest.mark.parametrize("path", ["/v1/datasets", "/v1/jobs", "/v1/models"])
def test_a_cursor_that_decodes_to_a_nul_is_a_422(client, path):
    answer = client.get(path, params={"cursor": NUL_CURSOR})
    assert answer.status_code == 422, answer.text
    assert answer.json()["title"] == "Invalid cursor"


def test_a_nul_in_a_json_string_is_a_4xx(client, db):
    answer = client.post("/v1/jobs", json={"dataset_id": "ds_\x00"})
    assert answer.status_code in (404, 422), answer.text  # SQLite finds no such dataset


def test_a_nul_in_the_name_field_stores_nothing_or_keeps_it(client, db, app):
    answer = upload(client, HEART.read_bytes(), name="heart\x00")
    if db.is_sqlite:  # SQLite's text holds it
        assert answer.status_code == 201, answer.text
        return
    assert answer.status_code == 422, answer.text
    assert "NUL" in answer.json()["detail"]
    with db.session() as session:
        assert session.query(Dataset).count() == 0
    data = app.state.settings.data_dir
    assert not list((data / "tmp").iterdir()) and not list((data / "datasets").iterdir())


def test_a_nul_in_the_file_name_is_dropped(client):
    # written by hand: httpx would send the NUL as %00
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="heart\x00.svm"\r\n\r\n'
        + HEART.read_bytes()
        + b"\r\n--b--\r\n"
    )
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    answer = client.post("/v1/datasets", content=body, headers=headers)
    assert answer.status_code == 201, answer.text
    assert answer.json()["filename"] == "heart.svm"


def _parquet(label, feature: str = "a") -> bytes:
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq

    out = io.BytesIO()
    pq.write_table(pa.table({"label": label, feature: [1.0, 2.0, 3.0]}), out)
    return out.getvalue()


def _dictionary():
    import pyarrow as pa

    return pa.array(["x", "x", "\x00"]).dictionary_encode()


def _npz(labels: list[str]) -> bytes:
    import io

    import numpy as np

    out = io.BytesIO()
    np.savez(
        out, data=np.ones(3), indices=np.zeros(3, dtype=np.int32), indptr=np.arange(4),
        shape=np.array([3, 1]), format=np.array(b"csr"), y=np.asarray(labels),
    )  # fmt: skip
    return out.getvalue()


NUL_NAMES = {  # (file name, body, where the detail says the name is)
    "csv-feature": ("d.csv", b"label,a\x00b\nx,1\ny,2\nz,3\n", "line 1: column 2: the name"),
    "csv-class": ("d.csv", b"label,a\nx,1\ny\x00,2\nz,3\n", "line 3: the label"),
    "tsv-class": ("d.tsv", b"label\ta\nx\t1\ny\t2\n\x00z\t3\n", "line 4: the label"),
    "parquet-feature": ("d.parquet", _parquet([1, 2, 1], "a\x00"), "parquet: the column name"),
    "parquet-class": ("d.parquet", _parquet(["x", "y\x00", "z"]), "row 2: the label"),
    "parquet-dictionary-class": ("d.parquet", _parquet(_dictionary()), "row 3: the label"),
    "npz-class": ("d.npz", _npz(["x", "y", "z\x00z"]), "row 3: the label"),  # trailing: padding
}


@pytest.mark.parametrize("case", NUL_NAMES)
def test_a_nul_in_a_feature_or_class_name_is_a_422_in_every_format(client, db, case):
    """They were stored (a text column's class or a header's column name holding U+0000), on
    PostgreSQL too; CSV's path took them as well. Other control characters are kept: names are
    printed with escapes (`tests/client/test_cli_bad_input.py -k hostile_names`)."""
    name, body, where = NUL_NAMES[case]
    answer = client.post("/v1/datasets", files={"file": (name, body)})
    assert answer.status_code == 422, answer.text
    assert answer.json()["detail"].startswith(where), answer.json()["detail"]
    assert "NUL character (U+0000)" in answer.json()["detail"]
    with db.session() as session:
        assert session.query(Dataset).count() == 0


def test_a_control_character_other_than_nul_stays_in_the_names(client):
    body = b"label,a\x07\n\x1b[31mred,1\nx,2\n"
    answer = client.post("/v1/datasets", files={"file": ("d.csv", body)})
    assert answer.status_code == 201, answer.text
    assert answer.json()["feature_names"] == ["a\x07"]
    assert [c["label"] for c in answer.json()["labels"]["classes"]] == ["\x1b[31mred", "x"]


REGISTRY = "/v1/registered-models"
REGISTRY_NUL = {  # the field the 422 names, and the body's NUL text
    "tag-key": ("tags", {"tags": {"k\x00": "v"}}),
    "tag-value": ("tags", {"tags": {"k": "v\x00"}}),
    "description": ("description", {"description": "d\x00"}),
}


@pytest.mark.parametrize("case", REGISTRY_NUL)
def test_a_nul_in_registry_text_is_a_422_on_either_database(client, db, service, case):
    """Tags and descriptions of registered models and versions: a NUL was stored (SQLite, and
    the tags' JSON on PostgreSQL too) or refused by the database (a description on PostgreSQL,
    whose text holds none). Now a 422 at the edge on either, naming the field, nothing stored
    or changed."""
    from tests.app.test_registry_limits import new_model

    field, body = REGISTRY_NUL[case]
    assert client.post(REGISTRY, json={"name": "m", "tags": {"k": "v"}}).status_code == 201

    def refused(answer):
        assert answer.status_code == 422, answer.text
        assert answer.json()["errors"][0]["field"].startswith(field), answer.text
        assert "NUL character (U+0000)" in answer.text

    refused(client.post(REGISTRY, json={"name": "other", **body}))
    assert client.get(f"{REGISTRY}/other").status_code == 404
    refused(client.patch(f"{REGISTRY}/m", json=body))
    assert client.get(f"{REGISTRY}/m").json()["tags"] == {"k": "v"}
    refused(client.post(f"{REGISTRY}/m/versions", json={"model_id": new_model(service), **body}))
    assert client.get(f"{REGISTRY}/m").json()["latest_version"] is None
    version = client.post(f"{REGISTRY}/m/versions", json={"model_id": new_model(service)})
    assert version.status_code == 201, version.text
    refused(client.patch(f"{REGISTRY}/m/versions/1", json=body))
    # other control characters are text like any other
    kept = client.patch(f"{REGISTRY}/m", json={"tags": {"k\x07": "v\x1b"}, "description": "\t"})
    assert kept.status_code == 200, kept.text
    assert kept.json()["tags"] == {"k\x07": "v\x1b"}
