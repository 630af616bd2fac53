"""Hostile input: request size limits on every endpoint (declared and chunked bodies), compressed
uploads limited by their expanded size, path-like upload names, and error responses that never
carry a stack trace or an internal path."""

from __future__ import annotations

import bz2
import gzip
import lzma

import pytest
from sqlalchemy import text

from app.services import job_views
from tests.security.conftest import HEART, upload

LEAKS = ("Traceback", 'File "', "site-packages", ".py", "/tmp/", "/work/")


def assert_clean(response, *secrets: str) -> None:
    """A problem document that names no code, file or internal path."""
    assert response.headers["content-type"].startswith("application/problem+json"), response.text
    for leak in (*LEAKS, *secrets):
        assert leak not in response.text, (leak, response.text)


def _nothing_stored(app) -> None:
    data = app.state.settings.data_dir
    assert not list((data / "datasets").iterdir())
    assert not list((data / "tmp").iterdir())
    with app.state.db.session() as session:
        assert session.execute(text("SELECT count(*) FROM datasets")).scalar() == 0


def test_json_bodies_over_the_limit_are_refused(make_service):
    client, app = make_service(max_request_kb=4)
    big = {"dataset_id": "x" * 8000}
    response = client.post("/v1/jobs", json=big)
    assert response.status_code == 413
    assert "limit of 4096 bytes" in response.json()["detail"]
    assert_clean(response)
    small = client.post("/v1/jobs", json={"dataset_id": "nope"})
    assert small.status_code == 404


def test_chunked_bodies_are_counted(make_service):
    client, _ = make_service(max_request_kb=4)

    def chunks():
        for _ in range(10):
            yield b'{"dataset_id": "' + b"x" * 1000

    response = client.post(
        "/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    assert_clean(response)


def test_predict_and_upload_have_their_own_limits(make_service):
    client, app = make_service(max_request_kb=1, max_predict_body_mb=0.01)
    # an upload bigger than MAX_REQUEST_KB is fine (it has MAX_UPLOAD_MB)
    assert upload(client, HEART.read_bytes()).status_code == 201
    body = b'{"instances": [' + b"[0.0]," * 5000 + b"[0.0]]}"
    response = client.post(
        "/v1/models/mdl_x/predict", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413
    too_big = upload(client, b"1 1:1\n" * 300_000)  # 1.8 MB > MAX_UPLOAD_MB=1
    assert too_big.status_code == 413
    assert_clean(too_big)


def test_bad_content_length_is_refused(make_service):
    client, _ = make_service()
    response = client.post("/v1/jobs", content=b"{}", headers={"Content-Length": "12abc"})
    assert response.status_code in (400, 413)


@pytest.mark.parametrize(
    "compress", [gzip.compress, bz2.compress, lzma.compress], ids=["gzip", "bzip2", "xz"]
)
def test_decompression_bomb_is_refused_and_leaves_nothing(make_service, compress):
    client, app = make_service(max_upload_mb=1, max_expanded_mb=2)
    bomb = compress(b"1 1:1 2:1 3:1\n" * 400_000)  # 5.6 MB expanded
    assert len(bomb) < 1024 * 1024
    response = upload(client, bomb, filename="bomb.gz")
    assert response.status_code == 413, response.text
    assert "expands beyond" in response.json()["detail"]
    assert_clean(response)
    _nothing_stored(app)


def test_compressed_uploads_within_the_limit_are_fine(make_service):
    client, _ = make_service(max_upload_mb=1, max_expanded_mb=2)
    response = upload(client, gzip.compress(HEART.read_bytes()), filename="heart.gz")
    assert response.status_code == 201, response.text
    assert response.json()["n_rows"] == 270


def test_nested_compression_is_refused(make_service):
    client, app = make_service()
    nested = gzip.compress(gzip.compress(b"1 1:1\n" * 1000))
    response = upload(client, nested, filename="twice.gz")
    assert response.status_code == 422
    assert "nested compression" in response.json()["detail"]
    _nothing_stored(app)


@pytest.mark.parametrize("fmt", ["libsvm", "csv", None])
def test_a_zstd_upload_is_a_422_saying_which_compressions_are_read(make_service, fmt):
    """zstd is not read: its frame was taken for text, "not a text file: NUL byte at column
    5"; inside a gzip file it is nested compression as any other."""
    client, app = make_service()
    frame = b"\x28\xb5\x2f\xfd" + bytes(range(1, 60))  # a zstd frame's magic, then bytes
    for content, expected in [
        (frame, "a zstd-compressed upload: send it uncompressed, or compressed with gzip"),
        (gzip.compress(frame), "the gzip upload contains zstd data: nested compression"),
    ]:
        response = client.post(
            "/v1/datasets", params={"format": fmt} if fmt else None, content=content,
            headers={"Content-Type": "application/octet-stream"},
        )  # fmt: skip
        assert response.status_code == 422, response.text
        assert expected in response.json()["detail"]
    _nothing_stored(app)


def test_corrupt_compressed_upload_is_a_clear_422(make_service):
    client, app = make_service()
    corrupt = gzip.compress(HEART.read_bytes())[:500]
    response = upload(client, corrupt, filename="cut.gz")
    assert response.status_code == 422, response.text
    assert "gzip" in response.json()["detail"]
    assert_clean(response)
    _nothing_stored(app)


@pytest.mark.parametrize(
    "filename",
    [
        "../../../../evil.txt",
        "..\\..\\..\\evil.txt",
        "/etc/evil.txt",
        "sub/../../evil.txt",
        "evil.txt\x00.svm",
        "....//....//evil.txt",
    ],
)
def test_path_like_upload_names_never_leave_the_data_dir(make_service, tmp_path, filename):
    client, app = make_service()
    response = client.post(
        "/v1/datasets",
        files={"file": (filename, HEART.read_bytes())},
        data={"name": "../../named"},
    )
    assert response.status_code == 201, response.text
    shown = response.json()["filename"]
    assert "/" not in shown and "\\" not in shown
    assert not (tmp_path / "evil.txt").exists()
    assert not list(tmp_path.rglob("evil*"))  # nothing named after the upload, anywhere
    data = app.state.settings.data_dir
    stored = list((data / "datasets").iterdir())
    assert [p.name for p in stored] == [response.json()["id"]]


def test_raw_upload_filename_query_is_sanitized(make_service, tmp_path):
    client, _ = make_service()
    response = client.post("/v1/datasets?filename=../../evil.txt", content=HEART.read_bytes())
    assert response.status_code == 201
    assert response.json()["filename"] == "evil.txt"
    assert not list(tmp_path.rglob("evil*"))


def test_unexpected_errors_name_no_code_or_path(make_service, monkeypatch):
    client, app = make_service()

    def boom(*args, **kwargs):
        raise RuntimeError(f"failure in {app.state.settings.data_dir}/secret.py line 3")

    monkeypatch.setattr(job_views, "list_jobs", boom)
    response = client.get("/v1/jobs")
    assert response.status_code == 500
    assert_clean(response, str(app.state.settings.data_dir), "secret")


def test_error_responses_are_clean(make_service):
    client, app = make_service()
    data = str(app.state.settings.data_dir)
    responses = [
        client.get("/v1/datasets/nope"),
        client.get("/v1/datasets?limit=0"),
        client.get("/v1/datasets?cursor=%ff%fe"),
        client.post("/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"}),
        client.post("/v1/jobs", json={"dataset_id": 5, "params": {"C": -1}}),
        client.post(
            "/v1/models/x/predict", content=b"\xff\xfe", headers={"Content-Type": "text/plain"}
        ),
        upload(client, b"\x00\x01\x02garbage"),
        upload(client, b"1 1:1\n-1 2:abc\n"),
        client.post(
            "/v1/datasets",
            content=b"--x\r\n",
            headers={"Content-Type": "multipart/form-data; boundary=x"},
        ),
    ]
    for response in responses:
        assert 400 <= response.status_code < 500, (response.status_code, response.text)
        assert_clean(response, data)
