"""Shared fixtures: where the real datasets live, and a skip when they are absent."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEST_DATA = ROOT / "tests" / "data"
SHARED_DATA = Path(os.environ.get("MARGIN_SHARED_DATA", ROOT.parent / "shared" / "data"))


def shared_file(*parts: str) -> Path:
    """Path of a file under ../shared/data; skips the test with a reason when it is absent."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: the shared LIBSVM datasets are not on this machine")
    return path


@pytest.fixture
def shared_data():
    return shared_file


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """moto's S3 server, started once for the session (tests/s3server.py)."""
    from tests.s3server import MotoServer

    server = MotoServer(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """The AWS variables of the test server in this process's environment, and a new bucket;
    returns (server, bucket). Storage clients built before are forgotten."""
    from app import storage

    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    storage._cached.cache_clear()
    yield s3_server, s3_server.new_bucket()
    storage._cached.cache_clear()
