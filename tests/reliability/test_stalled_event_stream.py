"""An `/events` stream whose client reads nothing is given up after SEND_TIMEOUT_S, against
a real `margin api` (uvicorn, SQLite): the connection is dropped at once, and the server logs the
stream's closing as what it is, not as an application error. (That the stream's place is freed
is `test_more_attacks.py -k reads_nothing`, PostgreSQL.)"""

from __future__ import annotations

import socket

import psutil
import pytest
from sqlalchemy import insert

from app.db import Database
from app.tables import JobProgress
from tests.app.conftest import HEART
from tests.reliability.helpers import Margin, free_port, wait_for

pytestmark = [pytest.mark.timeout(180)]
MEASURES = ("gap", "primal", "dual", "duality_gap", "lower_bound", "upper_bound")


def ended_job_with_records(http, db_url: str, count: int) -> str:
    """A cancelled job with `count` progress records: megabytes of events."""
    dataset = http.post("/v1/datasets", files={"file": HEART.open("rb")}).json()["id"]
    job = http.post("/v1/jobs", json={"dataset_id": dataset}).json()["id"]
    assert http.post(f"/v1/jobs/{job}/cancel").status_code == 200
    record = dict.fromkeys(MEASURES, 1 / 3)
    db = Database(db_url)
    with db.write() as session:
        session.execute(insert(JobProgress), [
            {"job_id": job, "attempt": 1, "iteration": i, "elapsed_s": i / 7, "active": i, **record}
            for i in range(1, count + 1)
        ])  # fmt: skip
    db.dispose()
    return job


def holds(pid: int, client: socket.socket) -> bool:
    """Whether process `pid` still has the server side of `client`'s connection open."""
    port = client.getsockname()[1]
    return any(c.raddr and c.raddr.port == port for c in psutil.Process(pid).net_connections("tcp"))


def test_a_stream_whose_client_reads_nothing_is_dropped_without_an_error(tmp_path):
    """Before: uvicorn logged "ASGI callable returned without completing response" (ERROR) for
    each such stream, and closed the connection gracefully: the socket stayed open, its unsent
    bytes buffered, for as long as the client read nothing."""
    data = tmp_path / "data"
    port = free_port()
    margin = Margin(tmp_path, data_dir=data, auth_mode="off", send_timeout_s=1)
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        api, http = margin.api(port)
        job = ended_job_with_records(http, f"sqlite:///{data / 'margin.db'}", 20_000)
        conn = socket.socket()
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # a tiny receive window
        conn.connect(("127.0.0.1", port))
        conn.sendall(f"GET /v1/jobs/{job}/events HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        log = tmp_path / f"api-{port}.log"
        wait_for(lambda: "read nothing for 1" in log.read_text(), 60, "the stream to be closed")
        wait_for(lambda: not holds(api.pid, conn), 10, "the connection to be dropped")
        conn.close()
        assert http.get("/healthz").status_code == 200
    finally:
        margin.close()
    text = log.read_text()
    assert "without completing response" not in text, text[-3000:]
    assert "Exception in ASGI application" not in text, text[-3000:]
