"""Fixtures for the security tests: a service per test with the AUTH_MODE and limits it needs
(migrated SQLite in a temporary data directory), and API keys made with the service's own code."""

from __future__ import annotations

import shutil
import time

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.services import keys
from tests.app.conftest import (  # noqa: F401 - fixtures shared with the service tests
    HEART,
    fake_trainer,
    shared_parser,
    sqlite_template,
    upload,
)


@pytest.fixture
def make_service(tmp_path, sqlite_template, shared_parser):  # noqa: F811
    """make_service(**settings) -> (TestClient, app); closed at the end of the test."""
    opened = []

    def make(**overrides):
        data = tmp_path / f"data{len(opened)}"
        data.mkdir()
        shutil.copy(sqlite_template, data / "margin.db")
        values = {"data_dir": data, "progress_interval_s": 0.01, "max_upload_mb": 1}
        values.update(overrides)
        app = create_app(Settings(**values))
        app.state.parser = shared_parser
        client = TestClient(app, base_url="http://localhost", raise_server_exceptions=False)
        client.__enter__()
        opened.append(client)
        return client, app

    yield make
    for client in opened:
        client.__exit__(None, None, None)


def new_key(app, tenant: str, *scopes: str) -> dict[str, str]:
    """Authorization headers for a new key of `tenant` with `scopes`."""
    _, key = keys.create_key(app.state.db, tenant, f"{tenant}-key", scopes)
    return {"Authorization": f"Bearer {key}"}


def room_in_window(seconds: float, room: float = 1.0) -> None:
    """Wait until `room` seconds or more are left in the clock's current window of `seconds`.
    The rates count in windows aligned to the clock (limits' sliding window counter): once a
    window ends, the requests counted in it weigh less and less, so a window ending among a
    test's requests (15-70 ms for ten of them) lets one more through than the rate says."""
    deadline = time.monotonic() + room + 1
    while time.time() % seconds > seconds - room and time.monotonic() < deadline:
        time.sleep(0.01)
