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
