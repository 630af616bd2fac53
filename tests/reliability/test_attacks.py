"""Each attack of the adversarial review, CI-sized, against a real `margin serve` (API, parser and
worker processes) on a real PostgreSQL, every process of it under an address-space limit of
SERVER_AS_GB. For each: the expected 4xx, `/healthz` answering within 1 s throughout, nothing
stored or left in tmp/, no job or prediction run left active, and the process tree's resident
memory (mapped file pages included) raised by less than 300 MB (kernel high-water marks).
RELIABILITY.md lists them with their limits."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import httpx
import pytest

from app.db import Database
from app.services import keys
from benchmarks import _process_memory as memory
from tests.app.conftest import HEART, postgres_url_or_skip
from tests.reliability.helpers import ROOT, free_port, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]
SERVER_AS_GB = 2.5
PEAK_LIMIT = 300 * memory.MB
QUOTA_MB = 8
OTHERS = ("beta", "gamma")  # tenants without quotas or rates
TRICKLE_KB_S = 8  # a trickled upload's pace: twice the service's MIN_BODY_RATE_KB


class Service:
    def __init__(self, root: Path, database_url: str, **settings: str):
        self.data = root / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "DATA_DIR": str(self.data),
            "AUTH_MODE": "required",
            # the live key stays cached through a flood of made-up ones, however long the tests
            # before it took since it was first verified (its entry does not renew on use)
            "AUTH_CACHE_S": "3600",
            "PORT": str(self.port),
            "WORKERS": "1",
            "HEADER_TIMEOUT_S": "2",
            "BODY_TIMEOUT_S": "2",
            "MIN_BODY_RATE_KB": str(TRICKLE_KB_S / 2),
            "MAX_CONNECTIONS": "64",
            "MALLOC_ARENA_MAX": "2",
            "PROGRESS_INTERVAL_S": "0.1",
            "PYTHONUNBUFFERED": "1",
            **settings,
        }
        self.log = open(root / "serve.log", "ab")  # noqa: SIM115 - closed in stop()
        cli = [sys.executable, "-m", "app.cli"]
        subprocess.run([*cli, "migrate"], env=self.env, cwd=ROOT, check=True, capture_output=True)
        db = Database(database_url)
        _, admin = keys.create_key(db, "acme", "admin", ["admin"])
        _, limited = keys.create_key(db, "slow", "limited", ["admin"])
        others = [keys.create_key(db, tenant, "other", ["admin"])[1] for tenant in OTHERS]
        keys.set_quota(db, "acme", QUOTA_MB * memory.MB, None)
        keys.set_quota(db, "slow", None, None, rate_limit="3/minute")
        db.dispose()
        self.auth = {"Authorization": f"Bearer {admin}"}
        self.limited = {"Authorization": f"Bearer {limited}"}
        self.others = [{"Authorization": f"Bearer {key}"} for key in others]
        self.process = subprocess.Popen(
            [*cli, "serve"],
            env=self.env,
            cwd=ROOT,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=memory.limit_address_space(int(SERVER_AS_GB * 2**30)),
        )
        self.http = httpx.Client(base_url=self.url, timeout=60, headers=self.auth)

        def up():
            assert self.process.poll() is None, self.logs()
            try:
                return self.http.get("/healthz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 90, "margin serve")

    def logs(self) -> str:
        return (self.data.parent / "serve.log").read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self.http.close()
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
        self.log.close()

    def counts(self) -> tuple[int, int]:
        datasets = self.http.get("/v1/datasets", params={"limit": 500}).json()["items"]
        active = self.http.get("/v1/jobs", params={"status": ["queued", "running"]}).json()
        return len(datasets), len(active["items"])

    def assert_clean(self, datasets_before: int | None) -> None:
        """Nothing stored by the attack (None: not checked), nothing left in tmp/, nothing
        active."""
        tmp = self.data / "tmp"
        wait_for(lambda: not list(tmp.iterdir()), 10, "tmp/ to be empty")
        datasets, active = self.counts()
        assert active == 0 and datasets_before in (None, datasets)
        for model in self.http.get("/v1/models").json()["items"]:
            runs = self.http.get(f"/v1/models/{model['id']}/predictions").json()["items"]
            assert all(r["status"] in ("succeeded", "failed") for r in runs)


class HealthProbe:
    """Polls /healthz on its own connection while an attack runs; `worst` is its slowest answer
    (a failure counts as infinitely slow)."""

    def __init__(self, url: str):
        self.url = url
        self.worst = 0.0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=5) as client:
            while not self.stop.wait(0.2):
                start = time.perf_counter()
                try:
                    ok = client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    ok = False
                self.worst = max(self.worst, time.perf_counter() - start if ok else float("inf"))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@pytest.fixture(scope="module")
def service(tmp_path_factory, request):
    postgres_url_or_skip()
    scratch = request.getfixturevalue("postgres_scratch")
    srv = Service(tmp_path_factory.mktemp("attacks"), scratch)
    try:
        heart = srv.http.post("/v1/datasets", files={"file": HEART.open("rb")})
        assert heart.status_code == 201, heart.text
        srv.heart = heart.json()["id"]
        job = srv.http.post("/v1/jobs", json={"dataset_id": srv.heart, "params": {"tol": 0.1}})
        job_id = job.json()["id"]
        done = lambda: srv.http.get(f"/v1/jobs/{job_id}").json()["status"] == "succeeded"  # noqa: E731
        wait_for(done, 120, "the training job")
        srv.model = srv.http.get(f"/v1/jobs/{job_id}").json()["model_id"]
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def postgres_scratch():
    from tests.app.conftest import ScratchDatabase

    scratch = ScratchDatabase(postgres_url_or_skip())
    yield scratch.url
    scratch.drop()


def attack(service: Service, send) -> httpx.Response:
    """Run `send()` (it returns the response) and check the service's health, memory and
    state around it."""
    datasets_before, _ = service.counts()
    with HealthProbe(service.url) as probe, memory.measure(service.process.pid) as peak:
        response = send()
        time.sleep(0.5)  # one more probe after the answer
    assert probe.worst < 1.0, f"/healthz took {probe.worst:.2f} s"
    assert peak.increase < PEAK_LIMIT, (peak.increase / memory.MB, peak.by_process)
    service.assert_clean(datasets_before)
    return response


def gzip_of(piece: bytes, total: int) -> bytes:
    out = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip container
    parts = [out.compress(piece) for _ in range(total // len(piece))]
    return b"".join([*parts, out.flush()])


# ---------------------------------------------------------------------------------------------
# Predict (item 1, 11)


def predict(service, body: bytes, content_type: str):
    url = f"/v1/models/{service.model}/predict"
    return lambda: service.http.post(url, content=body, headers={"Content-Type": content_type})


@pytest.mark.parametrize(
    ("name", "body", "content_type", "status"),
    [
        ("48 MiB of newlines", b"\n" * (48 << 20), "text/plain", 422),
        ("2 million '1:1' lines", b"1:1\n" * 2_000_000, "text/plain", 413),
        (
            "a million JSON instances",
            b'{"instances": [' + b",".join([b'{"indices":[1],"values":[1]}'] * 1_000_000) + b"]}",
            "application/json",
            413,
        ),
        (
            "a 10-million-value dense row for a 13-feature model",
            b'{"instances": [[' + b",".join([b"0.5"] * 10_000_000) + b"]]}",
            "application/json",
            422,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_predict_bombs(service, name, body, content_type, status):
    response = attack(service, predict(service, body, content_type))
    assert response.status_code == status, response.text[:500]


CSV_HEADER = b",".join(b"f%d" % i for i in range(13))  # heart_scale's 13 features


@pytest.mark.parametrize(
    ("name", "body", "detail"),
    [
        ("a header of 20 million names", b"ab," * 20_000_000 + b"ab\n1\n", "more columns"),
        ("a row of 30 million values", CSV_HEADER + b"\n" + b"0," * 30_000_000 + b"0\n", "a row"),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_invocations_csv_bombs(service, name, body, detail):
    # before: the header split into 20 million names (+1.7 GB), or the row parsed whole (+1.4 GB)
    url = f"/v1/models/{service.model}/invocations"
    send = lambda: service.http.post(url, content=body, headers={"Content-Type": "text/csv"})  # noqa: E731
    response = attack(service, send)
    assert response.status_code == 400 and detail in response.json()["message"], response.text


# ---------------------------------------------------------------------------------------------
# Uploads (items 3, 4, 8)


def upload(service, content: bytes, headers=None):
    return lambda: service.http.post(
        "/v1/datasets",
        content=content,
        headers={"Content-Type": "application/octet-stream", **(headers or {})},
    )


def test_gzip_of_256_mib_of_nul_bytes(service):
    response = attack(service, upload(service, gzip_of(b"\0" * (1 << 20), 256 << 20)))
    assert response.status_code == 422 and "NUL byte" in response.json()["detail"]


def test_32_mib_of_nul_bytes(service):
    response = attack(service, upload(service, b"1 1:1\n" + b"\0" * (32 << 20)))
    assert response.status_code == 422 and "not a text file" in response.json()["detail"]


def test_gzip_of_lines_stops_at_the_storage_quota(service):
    bomb = gzip_of(b"1 1:1\n" * 100_000, 60 << 20)  # 60 MB of text, ~60 kB compressed
    response = attack(service, upload(service, bomb))
    assert response.status_code == 429 and "storage quota" in response.json()["detail"]


def test_a_22_byte_file_of_two_billion_features(service):
    response = attack(service, upload(service, b"1 2147483646:1\n"))
    assert response.status_code == 413, response.text


def test_an_accepted_compressed_upload_is_parsed_to_disk(service):
    text = b"".join(b"%d 1:0.5 7:1 12:0.25 13:-1\n" % (i % 2) for i in range(200_000)) * 8
    compressed = gzip.compress(text, 1)
    response = attack(service, upload(service, compressed, headers=service.limited))
    assert response.status_code == 201, response.text  # ~45 MB of text, in another tenant
    url = f"{service.url}/v1/datasets/{response.json()['id']}"
    assert response.json()["n_rows"] == 1_600_000
    assert service.http.delete(url).status_code == 404  # not acme's
    assert httpx.delete(url, headers=service.limited).status_code == 204


def test_an_npz_of_720_mb_expanded_is_read_a_chunk_at_a_time(service):
    import io

    import numpy as np

    n = 30_000_000  # data, indices, indptr and y of 240 MB each, about 1 MB compressed
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, data=np.ones(n), indices=np.zeros(n, dtype=np.int64),
        indptr=np.arange(n + 1, dtype=np.int64), shape=np.array([n, 1]),
        format=np.array(b"csr"), y=np.ones(n),
    )  # fmt: skip
    response = attack(service, upload(service, buffer.getvalue()))
    assert response.status_code == 429 and "storage quota" in response.json()["detail"]


def test_a_csv_line_of_256_mib(service):
    out = zlib.compressobj(6, zlib.DEFLATED, 31)  # gzip: a header, a row, then one long line
    parts = [out.compress(b"label,a\n1,2\n")]
    parts += [out.compress(b"0," * (1 << 19)) for _ in range(256)]
    bomb = b"".join([*parts, out.flush()])
    response = attack(service, upload(service, bomb, {"Content-Type": "text/csv"}))
    assert response.status_code == 413 and "MAX_LINE_MB" in response.json()["detail"]


def test_a_csv_header_of_a_million_columns(service):
    header = b"label," + b",".join(b"c%d" % j for j in range(1_000_000)) + b"\n"
    response = attack(service, upload(service, header + b"1" + b",0" * 1_000_000 + b"\n",
                                      {"Content-Type": "text/csv"}))  # fmt: skip
    assert response.status_code == 413 and "columns" in response.json()["detail"]


def test_a_parquet_row_group_that_decodes_to_a_gigabyte(service):
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 64_000_000  # two columns of 512 MB of zeros each, 8 MB compressed
    zeros = pa.array(np.zeros(n))
    buffer = io.BytesIO()
    pq.write_table(pa.table({"label": zeros, "x": zeros}), buffer, compression="zstd",
                   row_group_size=n, use_dictionary=False, write_statistics=False,
                   max_rows_per_page=n, write_batch_size=n)  # fmt: skip
    del zeros
    response = attack(service, upload(service, buffer.getvalue()))
    assert response.status_code == 413 and "row group 0" in response.json()["detail"]


# ---------------------------------------------------------------------------------------------
# The connection (items 6, 7), authentication (10), rates (13), evaluation (11)


def test_a_huge_header_is_431_after_the_limit(service):
    def send():
        with socket.create_connection(("127.0.0.1", service.port), timeout=10) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
            sent = 0
            try:
                while sent < (100 << 20):
                    sock.sendall(b"a" * (1 << 16))
                    sent += 1 << 16
            except OSError:
                pass  # the server closed the connection
            assert sent < (8 << 20), sent
            return httpx.Response(int(sock.recv(4096).split()[1]))

    assert attack(service, send).status_code == 431


def test_slow_and_idle_header_senders_are_closed(service):
    def send():
        socks = []
        for _ in range(300):  # over MAX_CONNECTIONS=64: the oldest waiting ones are closed
            sock = socket.create_connection(("127.0.0.1", service.port), timeout=10)
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            socks.append(sock)
        start = time.perf_counter()
        assert httpx.get(f"{service.url}/healthz", timeout=5).status_code == 200
        assert time.perf_counter() - start < 1.0
        time.sleep(3)  # HEADER_TIMEOUT_S=2: every one of them is closed by now
        still_open = 0
        for sock in socks:
            sock.settimeout(0.5)
            try:
                answer = sock.recv(4096)  # b"" once closed; a 408 when closed by the deadline
                still_open += bool(answer) and b" 408 " not in answer
            except TimeoutError:
                still_open += 1
            except OSError:
                pass  # reset: closed
            sock.close()
        assert still_open == 0
        return httpx.Response(408)

    assert attack(service, send).status_code == 408


SMALL_UPLOAD = b"1 1:0.5\n-1 2:0.25\n1 3:0.125\n"


def open_upload(service, headers: dict, first: bytes, length: int = 1 << 30) -> socket.socket:
    """An upload of `length` bytes whose headers and `first` bytes are sent; the rest is the
    caller's to send (or not)."""
    head = (
        "POST /v1/datasets HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
        f"Authorization: {headers['Authorization']}\r\nContent-Length: {length}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", service.port), timeout=30)
    sock.sendall(head.encode() + first)
    return sock


def receiving(service, count: int) -> None:
    """Wait until the service receives `count` uploads (each has its file in tmp/)."""
    tmp = service.data / "tmp"
    wait_for(lambda: len(list(tmp.glob("upload-*.part"))) >= count, 20, f"{count} uploads")


def status_of(sock: socket.socket) -> bytes:
    answer = sock.recv(4096)
    sock.close()
    return answer.split(b"\r\n", 1)[0]


def remove_dataset(service, response: httpx.Response, headers: dict) -> None:
    if response.status_code == 201:
        url = f"{service.url}/v1/datasets/{response.json()['id']}"
        assert httpx.delete(url, headers=headers).status_code == 204


def test_trickled_uploads_do_not_hold_the_parsers(service):
    """Two uploads that send a line and then stall held both parser processes (which follow an
    upload as it arrives): every other upload waited as long as their senders liked (over 60 s).
    With BODY_TIMEOUT_S=2 each stalled one is a 408 and the upload sent meanwhile is stored.
    (The pool has a parser for each upload in flight, MAX_UPLOADS_IN_FLIGHT=4: the upload sent
    meanwhile has its own.)"""
    beta, gamma = service.others

    def send():
        stalled = [open_upload(service, h, b"1 1:1\n") for h in (service.auth, service.auth, beta)]
        receiving(service, 3)  # every parser is following a file
        response = httpx.post(f"{service.url}/v1/datasets", content=SMALL_UPLOAD, headers=gamma,
                              timeout=20)  # fmt: skip
        answers = [status_of(sock) for sock in stalled]
        assert all(a.startswith(b"HTTP/1.1 408") for a in answers), answers
        remove_dataset(service, response, gamma)
        return response

    response = attack(service, send)
    assert response.status_code == 201, response.text


class Trickle:
    """`count` uploads of the service's main tenant whose bodies arrive at TRICKLE_KB_S (twice
    the slowest pace accepted) while the block lasts, then stop: each is a 408 once its
    allowance is spent. `answers` holds their status lines."""

    PIECE = b"1 1:1\n" * 683  # 4 KB, sent twice a second

    def __init__(self, service, count: int):
        self.socks = [open_upload(service, service.auth, self.PIECE) for _ in range(count)]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.answers: list[bytes] = []

    def _run(self) -> None:
        assert len(self.PIECE) * 2 >= TRICKLE_KB_S * 1024
        while not self.stop.wait(0.5):
            for sock in self.socks:
                sock.sendall(self.PIECE)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.answers = [status_of(sock) for sock in self.socks]


def test_a_tenants_trickled_uploads_leave_a_parser_to_others(service):
    """An upload trickled at the slowest pace accepted holds a parser for MAX_UPLOAD_MB /
    MIN_BODY_RATE_KB seconds (hours at the defaults): one tenant opening a few held every
    parser, and every other tenant's upload waited. With MAX_UPLOADS_PER_TENANT (2) the
    tenant's third upload is 429 before its body is read, another tenant's upload is stored
    meanwhile, and once the trickled ones have ended the tenant uploads again."""
    beta, _ = service.others

    def send():
        with Trickle(service, 2) as trickle:
            receiving(service, 2)
            third = service.http.post("/v1/datasets", content=SMALL_UPLOAD, timeout=20)
            other = httpx.post(f"{service.url}/v1/datasets", content=SMALL_UPLOAD, headers=beta,
                               timeout=20)  # fmt: skip
        assert all(a.startswith(b"HTTP/1.1 408") for a in trickle.answers), trickle.answers
        again = service.http.post("/v1/datasets", content=SMALL_UPLOAD, timeout=20)
        remove_dataset(service, other, beta)
        remove_dataset(service, again, service.auth)
        return third, other, again

    third, other, again = attack(service, send)
    assert third.status_code == 429, third.text
    assert int(third.headers["Retry-After"]) > 0
    assert "MAX_UPLOADS_PER_TENANT" in third.json()["detail"]
    assert other.status_code == 201, other.text
    assert again.status_code == 201, again.text


def test_a_malformed_body_without_a_key_is_401(service):
    def send():
        return httpx.post(
            f"{service.url}/v1/jobs",
            content=b'{"dataset_id": ',
            headers={"Content-Type": "application/json"},
        )

    assert attack(service, send).status_code == 401


def test_a_flood_of_made_up_keys_is_429_after_the_failure_rate(service):
    """Each made-up key cost a database lookup before its 401, without a bound. Beyond
    AUTH_FAILURE_RATE (30/minute) the address gets 429 before any lookup; a live key from it
    still works. (The flood comes from 127.0.0.2: the other tests' address keeps its room.)"""
    transport = httpx.HTTPTransport(local_address="127.0.0.2")
    live = httpx.Client(base_url=service.url, transport=transport, headers=service.auth)

    def send():
        with live:
            assert live.get("/v1/solvers").status_code == 200  # the live key, cached
            codes = [
                live.get("/v1/solvers", headers={"Authorization": f"Bearer mgn_made_up_{i}"})
                .status_code
                for i in range(40)
            ]
            assert codes[:30] == [401] * 30 and codes[30:] == [429] * 10, codes
            assert live.get("/v1/solvers").status_code == 200
            return live.get("/v1/solvers", headers={"Authorization": "Bearer mgn_x"})

    response = attack(service, send)
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0
    assert "AUTH_FAILURE_RATE" in response.json()["detail"]


def test_requests_over_the_tenants_rate_are_429(service):
    def send():
        codes = [
            httpx.get(f"{service.url}/v1/solvers", headers=service.limited).status_code
            for _ in range(5)
        ]
        assert codes[-1] == 429
        return httpx.get(f"{service.url}/v1/solvers", headers=service.limited)

    response = attack(service, send)
    assert response.status_code == 429 and int(response.headers["Retry-After"]) > 0


def test_evaluating_on_an_unrelated_dataset_is_422(service):
    unrelated = service.http.post(
        "/v1/datasets",
        files={"file": ("u.svm", b"".join(b"%d 1:1 2:%d\n" % (c, c) for c in range(5, 30)) * 2)},
    )
    assert unrelated.status_code == 201
    url = f"/v1/models/{service.model}/evaluate"
    response = attack(
        service, lambda: service.http.post(url, json={"dataset_id": unrelated.json()["id"]})
    )
    assert response.status_code == 422 and "is a class of the model" in response.json()["detail"]
    assert service.http.delete(f"/v1/datasets/{unrelated.json()['id']}").status_code == 204


def test_exports_of_a_model_of_eight_million_features(service):
    from app.services.export import MAX_DENSE_EXPORT_ENTRIES

    top = MAX_DENSE_EXPORT_ENTRIES + 1  # the dense exports' bound, one entry over
    rows = "".join(f"{i % 2} {top - i}:1\n" for i in range(8)).encode()  # 80 bytes
    dataset = service.http.post("/v1/datasets", files={"file": ("wide.svm", rows)})
    assert dataset.status_code == 201, dataset.text
    job_id = service.http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"]}).json()["id"]
    job = lambda: service.http.get(f"/v1/jobs/{job_id}").json()  # noqa: E731
    wait_for(lambda: job()["status"] not in ("queued", "running"), 120, "the wide model's job")
    assert job()["status"] == "succeeded", job()
    url = f"/v1/models/{job()['model_id']}/export"
    for format, status in (("onnx", 413), ("skops", 413), ("json", 200), ("liblinear", 200)):
        response = attack(service, lambda f=format: service.http.get(url, params={"format": f}))
        assert response.status_code == status, (format, response.text[:300])
    assert response.text.count("\n") > top  # the LIBLINEAR file has a line per feature
