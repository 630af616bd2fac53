"""The end of a chunked body, against a real uvicorn with the guarded protocol (in a thread, on
SQLite): trailer fields, which httptools hands over as headers, had no size or time bound once
the headers were read. 150 MB of `a: b` lines after `0\\r\\n` grew the API process by 3 GB, and
a trailer trickled past BODY_TIMEOUT_S got its 408 on a connection left open, still read."""

from __future__ import annotations

import shutil
import socket
import threading
import time

import pytest
import uvicorn

from app.config import Settings
from app.http_guard import guarded_protocol
from app.main import create_app
from tests.reliability.helpers import free_port, wait_for

pytestmark = pytest.mark.timeout(60)
BODY = (
    b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
    b"Content-Type: application/json\r\n\r\n2\r\n{}\r\n0\r\n"
)  # then trailers, or the blank line that ends the body


@pytest.fixture
def port(tmp_path, sqlite_template, shared_parser):
    database = tmp_path / "data" / "margin.db"
    database.parent.mkdir()
    shutil.copy(sqlite_template, database)
    settings = Settings(
        data_dir=tmp_path / "data",
        database_url=f"sqlite:///{database}",
        auth_mode="off",
        body_timeout_s=0.5,
        max_header_kb=16,
        max_request_kb=4,
    )
    app = create_app(settings)
    app.state.parser = shared_parser
    config = uvicorn.Config(
        app, port=free_port(), http=guarded_protocol(settings), log_level="warning"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_for(lambda: server.started, 30, "the server to start")
    yield config.port
    server.should_exit = True
    thread.join(30)


def read_until_closed(sock: socket.socket, within_s: float) -> tuple[bytes, bool]:
    """What the server sends within `within_s`, and whether it closed the connection."""
    reply, deadline = b"", time.monotonic() + within_s
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            data = sock.recv(65536)
        except TimeoutError:
            break
        except OSError:
            return reply, True  # reset
        if not data:
            return reply, True
        reply += data
    return reply, False


def test_a_body_without_trailers_is_read(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(BODY + b"\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 422 ")  # {} names no dataset


@pytest.mark.parametrize(
    ("trailer", "status"),
    [(b"a: b\r\n" * 10_000, b"400"), (b"b" * 60_000, b"431")],
    ids=["many fields", "one endless field"],
)
def test_trailers_are_refused_early_and_the_connection_closed(port, trailer, status):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(BODY + b"a: ")
        sent = 0
        try:
            while sent < (16 << 20):
                sock.sendall(trailer)
                sent += len(trailer)
        except OSError:
            pass  # the server closed the connection
        assert sent < (8 << 20), sent
        reply, closed = read_until_closed(sock, 5)
    assert reply.startswith(b"HTTP/1.1 " + status + b" "), reply[:200]
    assert closed


def test_a_trickled_trailer_is_408_and_the_connection_closed(port):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(BODY + b"a: ")
        reply, closed = b"", False
        for _ in range(30):  # a byte every 0.1 s: 3 s, for a BODY_TIMEOUT_S of 0.5
            try:
                sock.sendall(b"b")
            except OSError:
                closed = True
                break
            data, closed = read_until_closed(sock, 0.1)
            reply += data
            if closed:
                break
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:200]
    assert closed


def test_a_chunked_body_over_its_limit_is_413_and_the_connection_closed(port):
    """The answer came, but the connection stayed open reading whatever the client still sent,
    with no deadline once the response was complete."""
    head = (
        b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Type: application/json\r\n\r\n"
    )
    chunk = b"1000\r\n" + b" " * 0x1000 + b"\r\n"  # 4 KiB a chunk: the second one is over
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(head + chunk * 2)
        reply, closed = read_until_closed(sock, 0.5)
        for _ in range(20):  # the rest keeps coming, slowly, and never ends
            if closed:
                break
            try:
                sock.sendall(chunk)
            except OSError:
                closed = True
                break
            data, closed = read_until_closed(sock, 0.1)
            reply += data
    assert reply.startswith(b"HTTP/1.1 413 "), reply[:200]
    assert closed

