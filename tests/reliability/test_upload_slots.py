"""The uploads an API process receives at once are bounded, against a real `margin api` on
SQLite: per tenant (MAX_UPLOADS_PER_TENANT, default 2), here without keys (every upload is the
tenant `local`): two uploads at once are served, a third while they are held open is 429, and
once they have finished (201) the next one is served again; and in all (MAX_UPLOADS_IN_FLIGHT),
with keys of several tenants: each upload held open has a parser of its own, and one more is 429
before its body is read. The attack with several tenants and trickled bodies is
`test_attacks_uploads.py -k leave_a_parser` (PostgreSQL)."""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from app.db import Database
from app.services import keys
from tests.reliability.helpers import Margin, free_port, wait_for

pytestmark = [pytest.mark.timeout(180)]


def held_upload(
    url: str, label: int, release: threading.Event, answers: list, headers: dict | None = None
) -> threading.Thread:
    """An upload (chunked) whose first line is sent at once and the rest once `release` is set;
    its response goes to `answers`."""

    def body():
        yield f"{label} 1:0.5 2:1\n".encode()
        release.wait(60)
        yield b"".join(b"%d 1:0.25 3:%d\n" % (label, i) for i in range(1000))

    def send():
        answers.append(
            httpx.post(f"{url}/v1/datasets", content=body(), headers=headers, timeout=90)
        )

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


def refused_before_its_body(port: int, headers: dict) -> bytes:
    """The whole answer to an upload that declares 1 MB and sends none of it: an answer at all
    shows the body was not waited for."""
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(
            b"POST /v1/datasets HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream"
            b"\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n"
            % (headers["Authorization"].encode(), 1 << 20)
        )
        return whole_answer(sock)


def whole_answer(sock: socket.socket) -> bytes:
    """Headers and body of one response: the server may send them in separate segments, so
    one recv can hold the headers alone."""
    answer = b""
    while b"\r\n\r\n" not in answer:
        answer += sock.recv(65536) or b"\r\n\r\n"  # closed early: what came is the answer
    head, body = answer.split(b"\r\n\r\n", 1)
    length = next(
        (int(line.split(b":", 1)[1]) for line in head.lower().split(b"\r\n")[1:]
         if line.startswith(b"content-length:")),
        0,
    )  # fmt: skip
    while len(body) < length and (more := sock.recv(65536)):
        body += more
    return head + b"\r\n\r\n" + body


def test_uploads_of_several_tenants_are_bounded_in_all(tmp_path):
    """MAX_UPLOADS_PER_TENANT bounded one tenant only: the process ran one parser more than it,
    so two tenants' uploads held open took every parser and a third tenant's upload waited behind
    their bodies. With MAX_UPLOADS_IN_FLIGHT=3 (a tenant's 1) three tenants' uploads held open
    are each parsed as they arrive, a fourth tenant's is 429 with Retry-After without its body
    being read, and once the three have ended (201) it is served."""
    data = tmp_path / "data"
    port = free_port()
    margin = Margin(
        tmp_path, data_dir=data, auth_mode="required", body_timeout_s=60,
        max_uploads_per_tenant=1, max_uploads_in_flight=3,
    )  # fmt: skip
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        db = Database(f"sqlite:///{data / 'margin.db'}")
        tenants = [keys.create_key(db, f"t{i}", "upload", ["train"])[1] for i in range(4)]
        db.dispose()
        auth = [{"Authorization": f"Bearer {key}"} for key in tenants]
        _, http = margin.api(port)
        url = str(http.base_url).rstrip("/")
        release, answers = threading.Event(), []
        held = [held_upload(url, 1, release, answers, h) for h in auth[:3]]
        tmp = data / "tmp"
        wait_for(lambda: len(list(tmp.glob("upload-*.part"))) == 3, 30, "three uploads")
        # each is followed by a parser of its own (a parse makes its output directory first)
        wait_for(lambda: len(list(tmp.glob("parsed-*"))) == 3, 30, "three parsers")
        fourth = refused_before_its_body(port, auth[3])
        release.set()
        for thread in held:
            thread.join(90)
        after = http.post("/v1/datasets", content=b"1 1:1\n-1 2:1\n", headers=auth[3])
    finally:
        margin.close()
    assert fourth.startswith(b"HTTP/1.1 429"), fourth
    assert b"retry-after: 5" in fourth.lower(), fourth
    assert b"MAX_UPLOADS_IN_FLIGHT" in fourth, fourth
    assert sorted(a.status_code for a in answers) == [201] * 3, [a.text for a in answers]
    assert after.status_code == 201, after.text
