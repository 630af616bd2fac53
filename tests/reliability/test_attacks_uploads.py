"""Attacks by upload (compression bombs, NUL bytes, huge lines and headers, wide files, the
storage quota, text labels at their bounds, a job scoring a large dataset) and by slow uploads
that would hold the parser processes, CI-sized, against the attack service of attack_service.py
(a real `margin serve` on PostgreSQL under an address-space limit): each gets its 4xx with
`/healthz` answering throughout, nothing left behind and the process tree's memory within its
bound."""

from __future__ import annotations

import gzip
import socket
import threading
import zlib

import httpx
import pytest

from tests.reliability.attack_service import TRICKLE_KB_S, attack, gzip_of
from tests.reliability.helpers import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


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


def test_a_68_kb_parquet_of_eight_million_cells_is_made_dense_a_slice_at_a_time(service):
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    ones = pa.array(np.ones(65_536))  # one row group of 63 MB decoded, within its bound
    buffer = io.BytesIO()
    pq.write_table(pa.table({"label": ones, **{f"c{j}": ones for j in range(120)}}), buffer,
                   compression="zstd")  # fmt: skip
    assert len(buffer.getvalue()) < 100_000
    # 65,536 rows of 120 columns made dense at once, with their non-zeros' coordinates, took
    # the parser 420 MB
    response = attack(service, upload(service, buffer.getvalue()))
    assert response.status_code == 429 and "storage quota" in response.json()["detail"]


def test_a_2_kb_parquet_of_four_million_sparse_entries_is_read_a_slice_at_a_time(service):
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows, per_row = 1000, 3900  # one row group of 62 MB decoded, within its bound
    n = rows * per_row
    offsets = pa.array(np.arange(0, n + 1, per_row, dtype=np.int32))
    indices = pa.ListArray.from_arrays(offsets, pa.array(np.zeros(n, dtype=np.int64)))
    values = pa.ListArray.from_arrays(offsets, pa.array(np.ones(n)))
    column = pa.StructArray.from_arrays([indices, values], names=["indices", "values"])
    buffer = io.BytesIO()
    pq.write_table(pa.table({"label": np.ones(rows), "f": column}), buffer, compression="zstd")
    assert len(buffer.getvalue()) < 10_000
    beta = service.others[0]  # a tenant without a storage quota: the file is read whole
    response = attack(service, upload(service, buffer.getvalue(), headers=beta))
    assert response.status_code == 201, response.text
    assert response.json()["nnz"] == rows  # each row's entries summed into one
    remove_dataset(service, response, beta)


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


# ---------------------------------------------------------------------------------------------
# Text labels and the accuracy of a large job (after the formats and scoring that came later)


def text_label_parquet(n_rows: int, one_more: bool = False) -> bytes:
    """`n_rows` rows whose dictionary-encoded label column names 1000 classes of 255 characters
    (the bounds: MAX_CLASSES names of MAX_LABEL_CHARS), or a 1001st in its last row
    (`one_more`), one feature, row groups of two million rows (32 MB decoded each, under the
    64 MB bound)."""
    import io

    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = pa.array([f"{c:04d}".ljust(255, "x") for c in range(1001)])
    codes = (np.arange(n_rows) * 7919 % 1000).astype(np.int32)
    codes[-1] = 1000 if one_more else codes[-1]
    labels = pa.DictionaryArray.from_arrays(pa.array(codes), names)
    table = pa.table({"label": labels, "x": np.arange(n_rows, dtype=np.float64) % 5 + 1})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=2_000_000, compression="zstd")
    return buffer.getvalue()


def test_a_parquet_of_a_thousand_long_text_classes_over_six_million_rows(service):
    beta = service.others[0]  # no storage quota: the 150 MB of arrays are stored
    body = text_label_parquet(6_000_000)
    response = attack(service, upload(service, body, headers=beta))
    assert response.status_code == 201, response.text
    classes = response.json()["labels"]["classes"]
    assert len(classes) == 1000 and {c["count"] for c in classes} == {6000}
    remove_dataset(service, response, beta)


def test_a_parquet_whose_last_row_group_holds_a_1001st_long_class_is_422(service):
    body = text_label_parquet(4_001_000, one_more=True)  # in the last row group
    response = attack(service, upload(service, body, headers=service.others[0]))
    assert response.status_code == 422, response.text
    assert "more than 1000 distinct labels" in response.json()["detail"]


def test_the_accuracy_of_a_job_on_dense_rows_is_scored_a_slice_at_a_time(service):
    """A binary job's training accuracy copied SCORE_ENTRIES // 2 rows at a time whatever they
    held: here every row (180 MB of arrays) copied once more at the end of the job."""
    import io

    import numpy as np

    beta = service.others[0]
    n_rows, width = 300_000, 50
    values = (np.arange(n_rows * width) % 3 + 1).astype(np.float64)  # compresses
    y = np.where(np.arange(n_rows) % 2 == 0, 1.0, -1.0)
    values[::width] *= y  # feature 0 tells the class
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer, data=values, indices=np.tile(np.arange(width, dtype=np.int32), n_rows),
        indptr=np.arange(0, n_rows * width + 1, width, dtype=np.int64),
        shape=np.array([n_rows, width]), format=np.array(b"csr"), y=y,
    )  # fmt: skip
    dataset = upload(service, buffer.getvalue(), headers=beta)()
    assert dataset.status_code == 201, dataset.text

    def train():
        job = httpx.post(
            f"{service.url}/v1/jobs", headers=beta,
            json={"dataset_id": dataset.json()["id"], "params": {"tol": 0.5, "max_iter": 3}},
        )  # fmt: skip
        assert job.status_code == 202, job.text
        url = f"{service.url}/v1/jobs/{job.json()['id']}"
        ended = lambda: httpx.get(url, headers=beta).json()["status"] not in ("queued", "running")  # noqa: E731
        wait_for(ended, 240, "the job")
        return httpx.get(url, headers=beta)

    done = attack(service, train)
    assert done.json()["status"] == "succeeded", done.json()
    model = httpx.get(f"{service.url}/v1/models/{done.json()['model_id']}", headers=beta).json()
    assert model["train_accuracy"] == 1.0
    remove_dataset(service, dataset, beta)
