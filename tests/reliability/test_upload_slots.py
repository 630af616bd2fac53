"""A tenant's uploads in flight are bounded per API process (MAX_UPLOADS_PER_TENANT, default 2),
here without keys (every upload is the tenant `local`) against a real `margin api` on SQLite:
two uploads at once are served, a third while they are held open is 429, and once they have
finished (201) the next one is served again. The attack with several tenants and trickled bodies
is `test_attacks.py -k leave_a_parser` (PostgreSQL)."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.reliability.helpers import Margin, free_port, wait_for

pytestmark = [pytest.mark.timeout(180)]


def held_upload(url: str, label: int, release: threading.Event, answers: list) -> threading.Thread:
    """An upload (chunked) whose first line is sent at once and the rest once `release` is set;
    its response goes to `answers`."""

    def body():
        yield f"{label} 1:0.5 2:1\n".encode()
        release.wait(60)
        yield b"".join(b"%d 1:0.25 3:%d\n" % (label, i) for i in range(1000))

    def send():
        answers.append(httpx.post(f"{url}/v1/datasets", content=body(), timeout=90))

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_third_upload_at_once_is_429_until_one_ends(tmp_path):
    data = tmp_path / "data"
    margin = Margin(tmp_path, data_dir=data, auth_mode="off", body_timeout_s=60)
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        _, http = margin.api(free_port())
        url = str(http.base_url).rstrip("/")
        release, answers = threading.Event(), []
        held = [held_upload(url, label, release, answers) for label in (1, -1)]
        tmp = data / "tmp"
        wait_for(lambda: len(list(tmp.glob("upload-*.part"))) == 2, 30, "both uploads")
        third = http.post("/v1/datasets", content=b"1 1:1\n-1 2:1\n")
        release.set()
        for thread in held:
            thread.join(90)
        after = http.post("/v1/datasets", content=b"1 1:1\n-1 2:1\n")
    finally:
        margin.close()
    assert third.status_code == 429, third.text
    assert int(third.headers["Retry-After"]) > 0
    assert "MAX_UPLOADS_PER_TENANT" in third.json()["detail"]
    assert sorted(a.status_code for a in answers) == [201, 201], [a.text for a in answers]
    assert after.status_code == 201, after.text
