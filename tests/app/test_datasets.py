"""Dataset upload, listing and deletion over HTTP, on SQLite and PostgreSQL; every bad upload is
rejected with its status and message and leaves neither row nor file behind."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import time
from datetime import timedelta

import numpy as np
import pytest
from sqlalchemy import func, select, update

from app.services import dataset_files
from app.tables import Dataset, IdempotencyKey, utcnow
from tests.app.conftest import HEART, upload

pytestmark = pytest.mark.timeout(120)


def stored(settings, db) -> tuple[int, list[str], list[str]]:
    """(dataset rows, dataset directories, temporary files) currently stored."""
    with db.session() as session:
        rows = session.scalar(select(func.count()).select_from(Dataset))
    dirs = sorted(p.name for p in (settings.data_dir / "datasets").iterdir())
    tmp = sorted(p.name for p in (settings.data_dir / "tmp").iterdir())
    return rows, dirs, tmp


def test_upload_stores_arrays_and_summary(client, settings, db):
    content = HEART.read_bytes()
    response = upload(client, content, "heart_scale", name="heart")
    assert response.status_code == 201, response.text
    body = response.json()
    assert response.headers["location"] == f"/v1/datasets/{body['id']}"
    assert body["name"] == "heart" and body["filename"] == "heart_scale"
    assert (body["n_rows"], body["n_features"], body["nnz"]) == (270, 13, 3378)
    assert body["zero_based"] is False
    assert body["sha256"] == hashlib.sha256(content).hexdigest()
    assert body["size_bytes"] == len(content)
    assert body["labels"] == {
        "kind": "classes",
        "classes": [{"label": -1, "count": 150}, {"label": 1, "count": 120}],
    }
    assert client.get(f"/v1/datasets/{body['id']}").json() == body
    from sklearn.datasets import load_svmlight_file

    X_ref, y_ref = load_svmlight_file(str(HEART))
    X, y, qid = dataset_files.load_arrays(settings.data_dir / "datasets" / body["id"], 13)
    assert qid is None and abs(X - X_ref).max() == 0 and np.array_equal(y, y_ref)
    assert stored(settings, db) == (1, [body["id"]], [])


@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress], ids=["gz", "bz2"])
def test_compressed_uploads(client, compress):
    response = upload(client, compress(HEART.read_bytes()), "upload.bin")
    assert response.status_code == 201, response.text
    assert response.json()["n_rows"] == 270


def test_raw_body_upload_and_real_target(client):
    content = b"0.5 1:1 3:2\n-1.25 2:1\n3.75 0:2 3:1\n"
    response = client.post(
        "/v1/datasets?name=reg",
        content=content,
        headers={"content-type": "application/octet-stream"},
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["name"] == "reg"
    assert body["zero_based"] is True and body["n_features"] == 4
    assert body["labels"] == {"kind": "real", "min": -1.25, "max": 3.75, "mean": 1.0}


@pytest.mark.parametrize(
    ("content", "status", "fragment"),
    [
        (b"1 1:2\n1 x:3\n", 422, "line 2"),
        (b"1 1:2\n-1 3:1 2:1\n", 422, "line 2"),
        (b"", 422, "empty"),
        (b"\x00\x01\x02binary", 422, "line 1"),
    ],
    ids=["bad-token", "unsorted", "empty", "binary"],
)
def test_malformed_files_are_422_and_store_nothing(client, settings, db, content, status, fragment):
    response = upload(client, content)
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert fragment in problem["detail"]
    assert "Traceback" not in response.text and str(settings.data_dir) not in response.text
    assert stored(settings, db) == (0, [], [])


def test_line_number_is_reported(client):
    response = upload(client, b"1 1:1\n-1 2:1\n1 3:abc\n")
    assert response.status_code == 422
    assert response.json()["line"] == 3


def test_too_large_is_413_and_stores_nothing(client, settings, db):
    big = (b"1 1:0.5 2:0.25 3:0.125\n") * 60_000  # ~1.4 MB, over the 1 MB limit
    response = upload(client, big)
    assert response.status_code == 413
    assert "MAX_UPLOAD_MB" in response.json()["detail"]
    assert stored(settings, db) == (0, [], [])


def test_too_large_streamed_without_length_is_413(client, settings, db):
    def chunks():
        for _ in range(40):
            yield b"1 1:0.5 2:0.25 3:0.125\n" * 2000

    response = client.post(
        "/v1/datasets", content=chunks(), headers={"content-type": "application/octet-stream"}
    )
    assert response.status_code == 413
    assert stored(settings, db) == (0, [], [])


def test_missing_file_field_is_422(client, settings, db):
    response = client.post("/v1/datasets", data={"name": "x"}, files={"other": ("a", b"1 1:1\n")})
    assert response.status_code == 422
    assert "file" in response.json()["detail"]
    assert stored(settings, db) == (0, [], [])


def test_a_multipart_body_cut_before_its_closing_boundary_is_422(client, settings, db):
    # before: 201, the last row stored as 2:123 where the file was cut mid-number
    body = (b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="cut.txt"\r\n\r\n'
            b"1 1:1 2:0.5\n-1 1:-1 2:0.25\n1 1:0.75 2:123")  # fmt: skip
    headers = {"content-type": "multipart/form-data; boundary=XyZ"}
    response = client.post("/v1/datasets", content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "closing boundary (--XyZ--)" in response.json()["detail"]
    deadline = time.monotonic() + 10  # the parser following the file stops within a poll or two
    while stored(settings, db) != (0, [], []) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert stored(settings, db) == (0, [], [])
    whole = client.post("/v1/datasets", content=body + b"\r\n--XyZ--\r\n", headers=headers)
    assert whole.status_code == 201, whole.text


def test_idempotency_key_returns_the_first_dataset(client, settings, db):
    first = upload(client, HEART.read_bytes(), headers={"Idempotency-Key": "abc"})
    again = upload(client, HEART.read_bytes(), headers={"Idempotency-Key": "abc"})
    assert first.status_code == 201 and again.status_code == 201
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["idempotent-replayed"] == "true"
    # other bytes (the same file repeated without a key would be the stored dataset again)
    other = upload(client, HEART.read_bytes() + b"\n", headers={"Idempotency-Key": "def"})
    assert other.json()["id"] != first.json()["id"]
    with db.session() as session:
        assert session.scalar(select(func.count()).select_from(IdempotencyKey)) == 2
    assert stored(settings, db)[0] == 2


def test_idempotency_key_with_another_file_or_options_is_422(client, settings, db):
    first = upload(client, HEART.read_bytes(), headers={"Idempotency-Key": "abc"})
    assert first.status_code == 201, first.text
    other_file = (HEART.read_bytes() + b"\n", {})
    other_options = (HEART.read_bytes(), {"format": "csv"})
    for content, params in (other_file, other_options):
        again = client.post(
            "/v1/datasets", params=params, headers={"Idempotency-Key": "abc"},
            files={"file": ("heart_scale", content)},
        )  # fmt: skip
        assert again.status_code == 422, again.text
        assert again.json()["title"] == "Idempotency-Key reused"
    assert stored(settings, db) == (1, [first.json()["id"]], [])
    # the same file as a raw body, not multipart: the same upload, replayed
    raw = client.post(
        "/v1/datasets", content=HEART.read_bytes(),
        headers={"Idempotency-Key": "abc", "content-type": "application/octet-stream"},
    )  # fmt: skip
    assert raw.status_code == 201 and raw.json()["id"] == first.json()["id"]


def test_an_idempotency_key_whose_dataset_was_deleted_is_409(client, settings, db):
    """Deleting the dataset left its key naming nothing: the key's next upload was a 500 (its
    insert hit the stale key). A late retry must not create a second dataset: 409, before the
    body is parsed; another key uploads."""
    key = {"Idempotency-Key": "abc"}
    first = upload(client, HEART.read_bytes(), headers=key)
    assert client.delete(f"/v1/datasets/{first.json()['id']}").status_code == 204
    again = upload(client, HEART.read_bytes(), headers=key)
    assert again.status_code == 409, again.text
    assert again.json()["title"] == "Idempotency-Key of a deleted resource"
    assert stored(settings, db) == (0, [], [])
    assert upload(client, HEART.read_bytes(), headers={"Idempotency-Key": "new"}).status_code == 201


def test_an_idempotency_key_past_its_ttl_uploads_afresh(client, settings, db):
    """Past IDEMPOTENCY_TTL_HOURS a key's upload with another file was still a 422 (the key was
    kept forever): it is a fresh upload, and the key then names the new dataset."""
    key = {"Idempotency-Key": "abc"}
    first = upload(client, HEART.read_bytes(), headers=key)
    with db.write() as session:
        session.execute(update(IdempotencyKey).values(created_at=utcnow() - timedelta(hours=25)))
    other = upload(client, HEART.read_bytes() + b"\n", headers=key)
    assert other.status_code == 201, other.text
    assert other.json()["id"] != first.json()["id"] and "idempotent-replayed" not in other.headers
    again = upload(client, HEART.read_bytes() + b"\n", headers=key)
    assert again.json()["id"] == other.json()["id"] and again.headers["idempotent-replayed"]
    with db.session() as session:
        assert session.scalars(select(IdempotencyKey.resource_id)).all() == [other.json()["id"]]


def test_list_pages_newest_first(client):
    ids = [upload(client, f"1 {i + 1}:1\n-1 1:1\n".encode()).json()["id"] for i in range(3)]
    page = client.get("/v1/datasets?limit=2").json()
    assert [d["id"] for d in page["items"]] == ids[::-1][:2]
    rest = client.get(f"/v1/datasets?limit=2&cursor={page['next']}").json()
    assert [d["id"] for d in rest["items"]] == ids[:1] and rest["next"] is None
    assert client.get("/v1/datasets?cursor=%%%").status_code == 422
    assert client.get("/v1/datasets?limit=0").status_code == 422


def test_unknown_dataset_is_404_problem(client):
    response = client.get("/v1/datasets/ds_nope")
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["title"] == "Dataset not found"
    assert client.delete("/v1/datasets/ds_nope").status_code == 404


def test_delete_removes_row_and_files(client, settings, db, heart):
    assert client.delete(f"/v1/datasets/{heart['id']}").status_code == 204
    assert client.get(f"/v1/datasets/{heart['id']}").status_code == 404
    assert stored(settings, db) == (0, [], [])


def test_delete_while_a_job_is_queued_is_409(client, settings, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]})
    assert job.status_code == 202, job.text
    response = client.delete(f"/v1/datasets/{heart['id']}")
    assert response.status_code == 409
    assert job.json()["id"] in response.json()["detail"]
    assert stored(settings, db)[:2] == (1, [heart["id"]])


def test_sweep_removes_leftovers_of_dead_processes(settings, db):
    from app.services.sweep import sweep_partial_uploads

    tmp = settings.data_dir / "tmp"
    dead = tmp / "upload-deadhost-1-abc.part"
    dead.write_bytes(b"x")
    import socket

    gone = tmp / f"upload-{socket.gethostname()}-999999999-abc.part"
    gone.write_bytes(b"x")
    mine = tmp / f"upload-{socket.gethostname()}-{__import__('os').getpid()}-abc.part"
    mine.write_bytes(b"x")
    orphan = settings.data_dir / "datasets" / "ds_orphan"
    orphan.mkdir()
    import os

    os.utime(orphan, (0, 0))
    removed = sweep_partial_uploads(settings, db)
    assert sorted(removed) == sorted([str(gone), str(orphan)])
    assert dead.exists() and mine.exists()


def test_label_summary_rules():
    assert dataset_files.summarize_labels(np.array([1.0, 1.0]))["label_kind"] == "classes"
    assert dataset_files.summarize_labels(np.arange(10.0))["label_kind"] == "real"
    classes = dataset_files.summarize_labels(np.repeat(np.arange(5.0), 3))
    assert [c["count"] for c in classes["classes"]] == [3] * 5
    assert dataset_files.summarize_labels(np.array([0.5, 0.5, 1.0]))["label_kind"] == "real"


def test_a_list_page_stops_before_its_feature_names_pass_the_bound(client, service):
    """A table's 100,000 column names take 889 kB; 40 such datasets made one GET /v1/datasets a
    36 MB answer and 390 MB of the API's memory. A page (of datasets, or of models, which keep
    their training columns' names) now ends before its names pass MAX_PAGE_BULK (4 MiB; a page
    holds one item at least); `next` goes on, and every item is still listed once."""
    import json

    from app.schemas.common import MAX_PAGE_BULK

    names = [f"column_{j}" for j in range(70_000)]  # 1.1 MB of names: 3 fit, not 4
    header = ("label," + ",".join(names)).encode()
    row = b"," + b",".join([b"0"] * len(names))
    ids = []
    for i in range(5):
        answer = client.post(
            "/v1/datasets",
            params={"format": "csv"},
            files={"file": ("wide.csv", header + b"\n" + str(i).encode() + row + b"\n")},
        )
        assert answer.status_code == 201, answer.text
        ids.append(answer.json()["id"])
    size = len(json.dumps(names))
    assert 3 * size <= MAX_PAGE_BULK < 4 * size
    pages, cursor = [], None
    while True:
        page = client.get("/v1/datasets", params={"limit": 500, "cursor": cursor}).json()
        pages.append([d["id"] for d in page["items"]])
        assert all(d["feature_names"] == names for d in page["items"])
        if not (cursor := page["next"]):
            break
    assert [len(p) for p in pages] == [3, 2]  # a fourth would make 4.4 MB
    assert sorted(sum(pages, [])) == sorted(ids)
    models = [service.add_model(np.zeros((1, len(names))), [0.0], classes=[0, 1],
                                feature_names=names) for _ in range(5)]  # fmt: skip
    page = client.get("/v1/models", params={"limit": 500}).json()
    assert len(page["items"]) == 3 and page["next"]
    rest = client.get("/v1/models", params={"cursor": page["next"]}).json()
    assert sorted(m["id"] for m in page["items"] + rest["items"]) == sorted(models)


def test_a_list_page_counts_the_class_names_and_params_in_its_bound(client, service):
    """The bound counted the feature names only: a dataset of 1,000 text classes of 255
    characters (a 262 kB CSV) lists 265 kB of class names, and 21 such datasets made one
    GET /v1/datasets a 5.5 MB page (500 of them: 132 MB); a model keeps the names with its
    params (class weights keyed by them) and calibration. Those count in the page's bound too."""
    import json

    from app.schemas.common import MAX_PAGE_BULK

    names = [f"c{i:04d}" + "x" * 250 for i in range(1000)]
    rows = "label,a\n" + "".join(f"{name},{i % 7}\n" for i, name in enumerate(names))
    made = []
    for i in range(20):
        answer = upload(client, (rows + f"{names[0]},{100 + i}\n").encode(), "many.csv")
        assert answer.status_code == 201, answer.text
        made.append(answer.json()["id"])
    weights = {"class_weight": dict.fromkeys(names, 1.0)}
    models = [service.add_model(np.zeros((len(names), 1)), np.zeros(len(names)), classes=names,
                                params=weights) for _ in range(10)]  # fmt: skip
    for path, expected in (("/v1/datasets", made), ("/v1/models", models)):
        pages, cursor = [], None
        while True:
            page = client.get(path, params={"limit": 500, "cursor": cursor}).json()
            pages.append([item["id"] for item in page["items"]])
            assert len(json.dumps(page)) <= MAX_PAGE_BULK + 100_000 or len(page["items"]) == 1
            if not (cursor := page["next"]):
                break
        assert len(pages) > 1
        assert sorted(sum(pages, [])) == sorted(expected)


def test_an_upload_whose_commit_answer_is_lost_keeps_the_arrays_of_its_row(
    client, settings, db
):
    """The connection drops after the database has committed the dataset's row but before
    the commit's answer arrives (a restart, a network cut): the upload is a 503, and the
    arrays were removed as for a failed commit, leaving a row whose arrays are missing (its
    jobs, stats and evaluations failing for ever). Arrays whose row may exist are kept; the
    start-up sweep removes them if the row never came."""
    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.orm import Session

    committing = []

    def before(session, _context):  # the dataset's insert (still listed as new here)
        if any(isinstance(obj, Dataset) for obj in session.new):
            committing.append(session)

    def after(session):
        if committing and committing[-1] is session:
            committing.clear()
            raise OperationalError(
                "COMMIT", {}, ConnectionError("server closed the connection unexpectedly")
            )

    event.listen(Session, "after_flush", before)
    event.listen(Session, "after_commit", after)
    try:
        response = upload(client, HEART.read_bytes(), "heart_scale", name="heart")
    finally:
        event.remove(Session, "after_flush", before)
        event.remove(Session, "after_commit", after)
    assert response.status_code == 503, response.text
    rows, dirs, _ = stored(settings, db)
    assert rows == 1 and len(dirs) == 1  # before: the row, and no arrays
    dataset = client.get("/v1/datasets").json()["items"][0]
    assert client.get(f"/v1/datasets/{dataset['id']}/stats").status_code == 200
    again = upload(client, HEART.read_bytes(), "heart_scale", name="heart")
    assert again.status_code == 200 and again.json()["id"] == dataset["id"], again.text
