"""STORAGE_URL: the file storage (default) and S3 storage against a real S3-speaking server
(moto's), through the API: uploads stored as objects, jobs and predictions read them through the
local cache, deletion removes them, an unreachable store answers 503 and stores nothing, and
`margin storage migrate` copies a data directory into a bucket."""

from __future__ import annotations

import csv
import io
import time

import numpy as np
import pytest

from app.config import Settings
from app.jobs.runner import RunContext, run_job
from app.storage import FileStorage, S3Storage, StorageUnavailable, open_storage
from tests.app.conftest import HEART, finished_run, upload

pytestmark = pytest.mark.timeout(120)


def _stores(storage, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.npy").write_bytes(b"alpha")
    (src / "b.npy").write_bytes(b"beta" * 1000)
    storage.store_dir(src, "datasets/ds_1")
    assert not src.exists()
    assert [(o.key, o.size) for o in storage.list("datasets/")] == [
        ("datasets/ds_1/a.npy", 5),
        ("datasets/ds_1/b.npy", 4000),
    ]
    assert storage.exists("datasets/ds_1/a.npy") and not storage.exists("datasets/ds_1/c.npy")
    assert storage.size("datasets/ds_1/b.npy") == 4000 and storage.size("datasets/ds_1/c") is None
    storage.fetch("datasets/ds_1/b.npy", tmp_path / "b")
    assert (tmp_path / "b").read_bytes() == b"beta" * 1000
    assert b"".join(storage.read("datasets/ds_1/a.npy")) == b"alpha"
    with pytest.raises(FileNotFoundError):
        storage.fetch("datasets/ds_1/missing.npy", tmp_path / "m")
    with pytest.raises(FileNotFoundError):
        b"".join(storage.read("datasets/ds_1/missing.npy"))
    one = tmp_path / "one.csv"
    one.write_text("row,label\n")
    storage.store_file(one, "predictions/pred_1.csv")
    assert not one.exists() and storage.exists("predictions/pred_1.csv")
    assert storage.delete_prefix("datasets/ds_1") == 2
    assert storage.list("datasets/") == []
    storage.delete("predictions/pred_1.csv")
    assert not storage.exists("predictions/pred_1.csv")


def test_file_storage_operations(tmp_path):
    storage = open_storage(f"file://{tmp_path / 'root'}")
    assert isinstance(storage, FileStorage)
    storage.ensure_bucket()
    _stores(storage, tmp_path)
    with pytest.raises(ValueError, match="outside the storage root"):
        storage.local_path("../escape")


def test_s3_storage_operations(s3_env, tmp_path):
    server, bucket = s3_env
    storage = open_storage(f"s3://{bucket}/some/prefix", timeout_s=5)
    _stores(storage, tmp_path)
    assert server.keys(bucket) == []  # everything was under the prefix, and is gone


def test_s3_bucket_is_created_when_missing(s3_env):
    server, _ = s3_env
    storage = open_storage("s3://margin-created-here/x")
    storage.ensure_bucket()
    storage.ensure_bucket()  # exists now: nothing to do
    assert "margin-created-here" in [b["Name"] for b in server.client().list_buckets()["Buckets"]]


@pytest.mark.parametrize(
    "url", ["ftp://host/x", "s3:///no-bucket", "file://host/path", "bucket/prefix"]
)
def test_storage_url_is_checked(url):
    with pytest.raises(ValueError):
        open_storage(url)


def test_upload_train_predict_delete_on_s3(s3_client, s3_settings, s3_env, db_url, fake_trainer):
    server, bucket = s3_env
    fake_trainer()
    response = upload(s3_client, HEART.read_bytes(), "heart_scale")
    assert response.status_code == 201, response.text
    dataset = response.json()
    stored = server.keys(bucket, f"margin/datasets/{dataset['id']}/")
    assert [k.rsplit("/", 1)[1] for k in stored] == [
        "data.npy", "indices.npy", "indptr.npy", "y.npy",
    ]  # fmt: skip
    assert not (s3_settings.data_dir / "datasets" / dataset["id"]).exists()

    job = s3_client.post("/v1/jobs", json={"dataset_id": dataset["id"]}).json()
    app = s3_client.app
    assert run_job(job["id"], RunContext(s3_settings, app.state.db)) == "succeeded"
    cached = list((s3_settings.cache_path).iterdir())
    assert any(p.name != ".locks" for p in cached), "the worker read a downloaded copy"
    model_id = s3_client.get(f"/v1/jobs/{job['id']}").json()["model_id"]

    run = s3_client.post(f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset["id"]})
    assert run.status_code == 202, run.text
    status = finished_run(s3_client, run.headers["Location"])
    assert status["status"] == "succeeded", status
    assert server.keys(bucket, "margin/predictions/") == [f"margin/predictions/{status['id']}.csv"]
    body = s3_client.get(run.headers["Location"])
    assert body.status_code == 200 and body.headers["content-type"].startswith("text/csv")
    assert body.headers["content-length"] == str(len(body.content))  # a client sees it whole
    rows = list(csv.reader(io.StringIO(body.text)))
    assert rows[0] == ["row", "label", "decision_value"] and len(rows) == 271

    assert s3_client.delete(f"/v1/models/{model_id}").status_code == 204
    assert server.keys(bucket, "margin/predictions/") == []
    assert s3_client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204
    assert server.keys(bucket) == []


def test_unreachable_storage_is_503_within_the_timeout_and_stores_nothing(
    s3_client, s3_settings, s3_env
):
    server, bucket = s3_env
    first = upload(s3_client, HEART.read_bytes(), "heart_scale")
    assert first.status_code == 201
    before = server.keys(bucket)
    other = HEART.read_bytes().replace(b"+1 ", b"-1 ", 5)
    server.pause()
    try:
        start = time.monotonic()
        response = upload(s3_client, other, "other")
        took = time.monotonic() - start
    finally:
        server.resume()
    assert response.status_code == 503, response.text
    assert "object storage" in response.json()["detail"]
    # one try: botocore's 1 s wait for "100 Continue", then the read timeout (3.0 s measured,
    # up to 3.9 s with the parse on a loaded machine); a second try would take 6 s or more
    assert took < 2 * (1 + s3_settings.storage_timeout_s), took
    assert [d["id"] for d in s3_client.get("/v1/datasets").json()["items"]] == [first.json()["id"]]
    assert server.keys(bucket) == before  # nothing of the failed upload was stored
    again = upload(s3_client, other, "other")
    assert again.status_code == 201, again.text
    assert len(server.keys(bucket)) == 2 * len(before)


def test_storage_migrate_copies_a_data_directory_into_the_bucket(
    tmp_path, client, settings, s3_env, monkeypatch
):
    from app import cli

    server, bucket = s3_env
    dataset = upload(client, HEART.read_bytes(), "heart_scale").json()
    files = sorted(p.name for p in (settings.data_dir / "datasets" / dataset["id"]).iterdir())
    monkeypatch.setenv("DATABASE_URL", settings.db_url)
    monkeypatch.setenv("STORAGE_URL", f"s3://{bucket}/moved")
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "new-local"))
    argv = ["storage", "migrate", "--from", f"file://{settings.data_dir}"]
    assert cli.main(argv) == 0
    keys = server.keys(bucket)
    assert keys == [f"moved/datasets/{dataset['id']}/{name}" for name in files]
    assert cli.main(argv) == 0  # a second run copies nothing again
    assert server.keys(bucket) == keys
    # the migrated dataset loads from the bucket, equal to the original
    from app.db import Database
    from app.services.datasets import load_dataset
    from app.tables import Dataset

    moved = Settings(
        data_dir=tmp_path / "new-local", database_url=settings.db_url,
        storage_url=f"s3://{bucket}/moved",
    )  # fmt: skip
    db = Database(settings.db_url)
    with db.session() as session:
        row = session.get(Dataset, dataset["id"])
    db.dispose()
    X, y, _ = load_dataset(moved, row)
    X0, y0, _ = load_dataset(settings, row)
    assert (X != X0).nnz == 0 and np.array_equal(y, y0)


def test_storage_errors_map_to_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    for name, value in {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    storage = open_storage("s3://nowhere/x", timeout_s=1)
    start = time.monotonic()
    with pytest.raises(StorageUnavailable):
        storage.list("datasets/")
    assert time.monotonic() - start < 5


def _model_and_runs(s3_client, s3_settings, fake_trainer, n_runs=1):
    """A model trained on heart_scale in the bucket, and the locations of its n_runs succeeded
    prediction runs over that dataset: (model id, location, ...)."""
    fake_trainer()
    dataset = upload(s3_client, HEART.read_bytes(), "heart_scale").json()
    job = s3_client.post("/v1/jobs", json={"dataset_id": dataset["id"]}).json()
    assert run_job(job["id"], RunContext(s3_settings, s3_client.app.state.db)) == "succeeded"
    model_id = s3_client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    locations = []
    for _ in range(n_runs):
        run = s3_client.post(f"/v1/models/{model_id}/predictions",
                             json={"dataset_id": dataset["id"]})  # fmt: skip
        assert finished_run(s3_client, run.headers["Location"])["status"] == "succeeded"
        locations.append(run.headers["Location"])
    return (model_id, *locations)


def test_prediction_csvs_left_by_a_deletion_during_an_outage_are_swept(
    s3_client, s3_settings, s3_env, fake_trainer, monkeypatch
):
    """Deleting a model while the store is away answers 204 and keeps its runs' CSVs (best
    effort); nothing refers to them any more, so the sweep at the API's start must remove them
    as it removes datasets without a row (before: kept for ever, outside every quota)."""
    from app.services import sweep

    def unavailable(self, key):
        raise StorageUnavailable("object storage unreachable: connection refused")

    server, bucket = s3_env
    model_id = _model_and_runs(s3_client, s3_settings, fake_trainer)[0]
    kept = server.keys(bucket, "margin/predictions/")
    assert len(kept) == 1
    with monkeypatch.context() as away:  # every delete fails as a store that is down does
        away.setattr(S3Storage, "delete", unavailable)
        assert s3_client.delete(f"/v1/models/{model_id}").status_code == 204
    assert server.keys(bucket, "margin/predictions/") == kept
    db = s3_client.app.state.db
    assert sweep.sweep_partial_uploads(s3_settings, db) == []  # within the grace: kept
    monkeypatch.setattr(sweep, "ORPHAN_GRACE_S", 0.0)
    removed = sweep.sweep_partial_uploads(s3_settings, db)
    assert removed == [f"{s3_settings.storage}/{kept[0].removeprefix('margin/')}"]
    assert server.keys(bucket, "margin/predictions/") == []
    assert server.keys(bucket, "margin/datasets/") != []  # the dataset still has its row


def test_deleting_a_model_with_many_runs_during_an_outage_waits_for_one_timeout(
    s3_client, s3_settings, s3_env, fake_trainer, monkeypatch
):
    """`DELETE /v1/models/{id}` removed its runs' CSVs one at a time, each waiting
    STORAGE_TIMEOUT_S for a store that was away: 30 s × the model's runs (a model with 100
    runs held its request 50 minutes). Once one removal finds the store away it stops trying;
    the start-up sweep removes what is left (above)."""
    server, bucket = s3_env
    tried = []

    def unavailable(self, key):
        tried.append(key)
        raise StorageUnavailable("object storage unreachable: read timeout")

    model_id = _model_and_runs(s3_client, s3_settings, fake_trainer, n_runs=3)[0]
    assert len(server.keys(bucket, "margin/predictions/")) == 3
    with monkeypatch.context() as away:
        away.setattr(S3Storage, "delete", unavailable)
        assert s3_client.delete(f"/v1/models/{model_id}").status_code == 204
    assert len(tried) == 1, tried


def test_a_read_while_the_store_is_away_is_503_without_claiming_a_write(
    s3_client, s3_settings, s3_env, fake_trainer, monkeypatch
):
    """A succeeded run's CSV asked for while the store is away: 503 with Retry-After, whose
    detail said "nothing was stored" (the answer written for uploads) to a download."""

    def unavailable(self, key):
        raise StorageUnavailable("object storage unreachable: read timeout")

    model_id, location = _model_and_runs(s3_client, s3_settings, fake_trainer)[:2]
    with monkeypatch.context() as away:
        away.setattr(S3Storage, "size", unavailable)
        response = s3_client.get(location)
    assert response.status_code == 503 and response.headers["Retry-After"]
    detail = response.json()["detail"]
    assert "object storage is unavailable" in detail and "stored" not in detail, detail
    assert s3_client.get(location).status_code == 200


def test_a_request_reading_a_dataset_while_the_store_hangs_is_503_within_the_timeout(
    s3_client, s3_settings, s3_env
):
    """`GET /v1/datasets/{id}/stats` of a dataset not yet in the API's local copy, with the
    store not answering: the download was tried 3 times, 2 s then 4 s apart (the workers'
    patience), so the request waited 3 timeouts and 6 s (12 s here with STORAGE_TIMEOUT_S=2;
    96 s at the default 30 s), where an unreachable store is to fail a request within about
    STORAGE_TIMEOUT_S."""
    server, bucket = s3_env
    dataset = upload(s3_client, HEART.read_bytes(), "heart_scale").json()
    assert not any(p.name != ".locks" for p in s3_settings.cache_path.glob("*"))
    server.pause()
    try:
        start = time.monotonic()
        response = s3_client.get(f"/v1/datasets/{dataset['id']}/stats")
        took = time.monotonic() - start
    finally:
        server.resume()
    assert response.status_code == 503, response.text
    assert took < 2 * (1 + s3_settings.storage_timeout_s), took
    assert s3_client.get(f"/v1/datasets/{dataset['id']}/stats").status_code == 200


def test_a_failed_multipart_upload_leaves_no_parts(s3_env, tmp_path):
    """A part that fails ends the upload, and the multipart upload is aborted: its parts, which
    the bucket bills and lists, are not left behind."""
    from boto3.s3.transfer import TransferConfig

    server, bucket = s3_env
    storage = open_storage(f"s3://{bucket}/p", timeout_s=5)
    storage.transfer = TransferConfig(
        multipart_threshold=5 << 20, multipart_chunksize=5 << 20, max_concurrency=1
    )
    parts = []

    def fail_the_second(params, **kwargs):
        parts.append(params)
        if len(parts) == 2:
            raise ConnectionError("the store went away mid-upload")

    storage.client.meta.events.register("before-parameter-build.s3.UploadPart", fail_the_second)
    big = tmp_path / "big.csv"
    big.write_bytes(b"0" * (11 << 20))
    with pytest.raises(Exception) as raised:  # noqa: B017 - what matters is what it leaves
        storage.store_file(big, "predictions/pred_big.csv")
    assert len(parts) >= 2, raised.value
    assert storage.client.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert server.keys(bucket) == []


def test_a_prediction_run_checking_its_dataset_while_the_store_hangs_is_503_within_the_timeout(
    s3_client, s3_settings, s3_env, fake_trainer
):
    """`POST /v1/models/{id}/predictions` of a zero-based dataset for a one-based model reads
    the dataset's indices to check it before queueing the run: with the store not answering,
    that read was tried with the workers' patience (3 timeouts and 6 s) where the routes that
    read a dataset fail within about STORAGE_TIMEOUT_S."""
    server, bucket = s3_env
    model_id = _model_and_runs(s3_client, s3_settings, fake_trainer, n_runs=0)[0]
    zero_based = upload(s3_client, b"1 0:1 3:0.5\n-1 1:1 2:0.25\n", "zero.svm").json()
    assert zero_based["zero_based"] is True, zero_based
    body = {"dataset_id": zero_based["id"]}
    server.pause()
    try:
        start = time.monotonic()
        response = s3_client.post(f"/v1/models/{model_id}/predictions", json=body)
        took = time.monotonic() - start
    finally:
        server.resume()
    assert response.status_code == 503, response.text
    assert took < 2 * (1 + s3_settings.storage_timeout_s), took


def test_the_sweep_keeps_an_upload_still_storing_its_arrays_in_another_process(
    s3_client, s3_settings, s3_env, monkeypatch
):
    """Several API processes share one bucket. One is storing an upload whose big array takes
    longer than the sweep's grace (5 minutes) to send, its small arrays already stored; another
    starting meanwhile judged the dataset by when its objects last changed, found no row, and
    removed the small arrays from under the upload, whose row then pointed at missing arrays.
    An upload in progress keeps a marker among its objects fresh, so the sweep keeps it."""
    import threading

    from app.services import dataset_commit, sweep
    from app.storage import get_storage

    server, bucket = s3_env
    # S3 keeps whole seconds: a marker rewritten 0.2 s ago may look 1.2 s old, and a busy
    # machine may delay a rewrite; the grace leaves room for both
    monkeypatch.setattr(sweep, "ORPHAN_GRACE_S", 3.0)
    monkeypatch.setattr(dataset_commit, "MARKER_EVERY_S", 0.2)
    storage = get_storage(s3_settings)
    send = storage.client.upload_file
    sent, storing, release = [], threading.Event(), threading.Event()

    def slow_after_the_first(path, *args, **kwargs):
        if sent:  # the arrays after the first take "longer than the grace"
            storing.set()
            assert release.wait(30)
        sent.append(path)
        return send(path, *args, **kwargs)

    monkeypatch.setattr(storage.client, "upload_file", slow_after_the_first)
    answers = []
    uploading = threading.Thread(
        target=lambda: answers.append(upload(s3_client, HEART.read_bytes(), "heart_scale"))
    )
    uploading.start()
    try:
        assert storing.wait(30)
        time.sleep(4.5)  # the first array is older than the grace
        removed = sweep.sweep_partial_uploads(s3_settings, s3_client.app.state.db)
    finally:
        release.set()
        uploading.join(30)
    assert removed == []  # before: the upload's first array
    assert answers[0].status_code == 201, answers[0].text
    dataset_id = answers[0].json()["id"]
    names = [k.rsplit("/", 1)[1] for k in server.keys(bucket, f"margin/datasets/{dataset_id}/")]
    assert names == ["data.npy", "indices.npy", "indptr.npy", "y.npy"]  # no marker left
    assert s3_client.get(f"/v1/datasets/{dataset_id}/stats").status_code == 200
