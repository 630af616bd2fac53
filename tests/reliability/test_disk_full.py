"""Disk full while storing an upload (the data directory is a 1 MB tmpfs; the database lives
elsewhere): a clear 507 naming no path, nothing partial left, and the service stores uploads
again once there is room."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text

from app.config import Settings
from app.main import create_app
from tests.app.conftest import HEART
from tests.reliability.helpers import write_classification_file


@pytest.fixture
def small_disk(tmp_path, sqlite_template):  # noqa: F811
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(sqlite_template, tmp_path / "margin.db")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(data)],
        capture_output=True,
        text=True,
    )
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mount.stderr.strip()}")
    yield data
    subprocess.run(["umount", "-l", str(data)], check=False)


def _service(data, shared_parser):
    database = f"sqlite:///{data.parent / 'margin.db'}"
    app = create_app(Settings(data_dir=data, database_url=database, max_upload_mb=8))
    app.state.parser = shared_parser
    return app


def _nothing_kept(app):
    data = app.state.settings.data_dir
    assert list((data / "tmp").iterdir()) == []
    assert list((data / "datasets").iterdir()) == []
    with app.state.db.session() as session:
        assert session.execute(text("SELECT count(*) FROM datasets")).scalar() == 0


def test_disk_full_while_receiving_an_upload(small_disk, tmp_path, shared_parser):  # noqa: F811
    app = _service(small_disk, shared_parser)
    big = write_classification_file(tmp_path / "big.svm", 800, 100)  # ~0.8 MB per copy
    content = big.read_bytes() * 2
    with TestClient(app, raise_server_exceptions=False) as client:
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
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/datasets", files={"file": source.open("rb")})
        assert response.status_code == 507, response.text
        assert "disk is full" in response.json()["detail"]
        assert str(small_disk) not in response.text
        _nothing_kept(app)
