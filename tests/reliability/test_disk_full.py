"""Disk full. While storing an upload (the data directory is a 1 MB tmpfs; the database lives
elsewhere): a clear 507 naming no path, nothing partial left, and the service stores uploads
again once there is room. With SQLite in the data directory (the default layout): creating or
cancelling a job or uploading on a full disk is a 507 that changes nothing; a job running when the
disk fills fails with "disk full" at once (not "no heartbeat" a minute later), and the service
works again once there is room."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.config import Settings
from app.main import create_app
from tests.app.conftest import HEART
from tests.reliability.helpers import Margin, free_port, wait_for, write_classification_file


@contextmanager
def tmpfs(path, size: str):
    path.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.fixture
def small_disk(tmp_path, sqlite_template):  # noqa: F811
    shutil.copy(sqlite_template, tmp_path / "margin.db")
    with tmpfs(tmp_path / "data", "1m") as data:
        yield data


def fill(disk) -> None:
    """Write to `disk` until it has no byte left."""
    with open(disk / f"filler-{time.monotonic_ns()}", "wb", buffering=0) as out:
        for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
            try:
                while True:
                    out.write(b"\0" * chunk)
            except OSError:
                pass


def unfill(disk) -> None:
    for path in disk.glob("filler-*"):
        path.unlink()


def _service(data, shared_parser):
    database = f"sqlite:///{data.parent / 'margin.db'}"
    app = create_app(Settings(data_dir=data, database_url=database, max_upload_mb=8))
    app.state.parser = shared_parser
    return app


def _nothing_kept(app):
    """Nothing of the failed upload stays. The request waits PARSE_STOP_S (5 s) for its parser to
    stop at the abort marker, then removes the upload's files; a parser slower to stop (a loaded
    machine) has them removed once it stops, after the answer: asserted at once, the files were
    still there."""
    data = app.state.settings.data_dir
    wait_for(lambda: not list((data / "tmp").iterdir()), 60, "the failed upload's files to go")
    assert list((data / "datasets").iterdir()) == []
    with app.state.db.session() as session:
        assert session.execute(text("SELECT count(*) FROM datasets")).scalar() == 0


def test_disk_full_while_receiving_an_upload(small_disk, tmp_path, shared_parser):  # noqa: F811
    app = _service(small_disk, shared_parser)
    big = write_classification_file(tmp_path / "big.svm", 800, 100)  # ~0.8 MB per copy
    content = big.read_bytes() * 2
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        response = client.post("/v1/datasets", files={"file": ("big.svm", content)})
        assert response.status_code == 507, response.text
        detail = response.json()["detail"]
        assert "disk is full" in detail and "nothing was kept" in detail
        assert str(small_disk) not in response.text and "Errno" not in response.text
        _nothing_kept(app)
        # once there is room (the partial upload is gone), uploads work again
        assert client.post("/v1/datasets", files={"file": HEART.open("rb")}).status_code == 201


def test_disk_full_while_storing_the_parsed_arrays(small_disk, tmp_path, shared_parser):  # noqa: F811
    app = _service(small_disk, shared_parser)
    # the text fits in 1 MB, but its parsed arrays (float64 values + int32 indices) do not
    source = write_classification_file(tmp_path / "dense.svm", 1000, 60)
    assert source.stat().st_size < 700_000
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        response = client.post("/v1/datasets", files={"file": source.open("rb")})
        assert response.status_code == 507, response.text
        assert "disk is full" in response.json()["detail"]
        assert str(small_disk) not in response.text
        _nothing_kept(app)


def test_job_create_cancel_and_upload_on_a_full_disk_are_507(tmp_path, sqlite_template):  # noqa: F811
    with tmpfs(tmp_path / "data", "8m") as data:
        shutil.copy(sqlite_template, data / "margin.db")  # the default layout: SQLite in DATA_DIR
        app = create_app(Settings(data_dir=data))
        with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
            dataset = client.post("/v1/datasets", files={"file": HEART.open("rb")}).json()["id"]
            queued = client.post("/v1/jobs", json={"dataset_id": dataset}).json()["id"]
            fill(data)
            for response in (
                client.post("/v1/jobs", json={"dataset_id": dataset}),
                client.post(f"/v1/jobs/{queued}/cancel"),
                client.post("/v1/datasets", files={"file": HEART.open("rb")}),
            ):
                assert response.status_code == 507, response.text
                assert "disk is full" in response.json()["detail"], response.text
                assert str(data) not in response.text and "Errno" not in response.text
            assert client.get("/healthz").status_code == 200
            jobs = client.get("/v1/jobs").json()["items"]  # reading still works; nothing changed
            assert [(j["id"], j["status"]) for j in jobs] == [(queued, "queued")]
            unfill(data)
            assert client.post(f"/v1/jobs/{queued}/cancel").json()["status"] == "cancelled"
            assert client.post("/v1/jobs", json={"dataset_id": dataset}).status_code == 202


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_running_job_fails_with_disk_full_when_the_disk_fills(tmp_path):
    with tmpfs(tmp_path / "data", "16m") as data:
        margin = Margin(tmp_path, disk_reserve_mb=1, progress_interval_s=0.1, job_stall_s=60)
        try:
            port = free_port()
            serve = margin.start(
                "serve",
                "--data-dir",
                str(data),
                "--port",
                str(port),
                "--workers",
                "1",
                name="serve",
            )
            http = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30)

            def ready():
                assert serve.poll() is None, margin.logs()
                try:
                    return http.get("/readyz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_for(ready, 120, "the service to be ready")
            assert (data / ".disk-reserve").stat().st_size == 1024 * 1024
            dataset = http.post("/v1/datasets", files={"file": HEART.open("rb")}).json()["id"]
            body = {
                "dataset_id": dataset,
                "params": {"loss": "hinge", "tol": 1e-12, "max_iter": 10_000_000, "time_limit": 60},
            }
            job = http.post("/v1/jobs", json=body).json()["id"]
            wait_for(lambda: http.get(f"/v1/jobs/{job}").json()["progress"], 60, "progress")
            filled = time.monotonic()
            fill(data)
            view = wait_for(
                lambda: (v := http.get(f"/v1/jobs/{job}").json())["status"] != "running" and v,
                30,
                "the job to end",
            )
            assert view["status"] == "failed" and "disk full" in view["error"], view
            took = time.monotonic() - filled
            assert took < 30  # not JOB_STALL_S (60 s) later
            print(f"the job failed {took:.1f} s after the disk filled: {view['error']}")
            assert http.get("/healthz").status_code == 200
            # once there is room: the reserve comes back and jobs run again
            unfill(data)
            wait_for(lambda: (data / ".disk-reserve").exists(), 30, "the disk reserve")
            quick = http.post("/v1/jobs", json={"dataset_id": dataset}).json()["id"]
            wait_for(
                lambda: http.get(f"/v1/jobs/{quick}").json()["status"] == "succeeded",
                60,
                "a job after the disk was freed",
            )
        except BaseException:
            print(margin.logs())
            raise
        finally:
            margin.close()
