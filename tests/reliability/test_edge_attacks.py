"""Attacks on what the edge buffers before a request is judged, against a real `margin serve` on
PostgreSQL under the memory limit of `attack_service` (SERVER_AS_GB): a predict body announced
but never sent, the JSON around an inference tensor's data, form fields of an upload, and model
references that name nothing. Each must get its 4xx while the process tree's resident memory
rises by less than its bound. RELIABILITY.md lists them with their limits."""

from __future__ import annotations

import json
import socket
import time

import pytest

from benchmarks import _process_memory as memory
from tests.app.conftest import postgres_url_or_skip
from tests.reliability.attack_service import Service, attack
from tests.reliability.test_more_attacks import race

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


def held_request(srv: Service, path: str, length: int) -> socket.socket:
    """A POST to `path` that declares `length` bytes of body and sends none of them."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Authorization: {srv.auth['Authorization']}\r\nContent-Length: {length}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    sock.sendall(head.encode())
    return sock


@pytest.mark.parametrize("route", ["predict", "invocations", "infer"])
def test_a_predict_body_announced_but_not_sent_costs_nothing(service, route):  # noqa: F811
    """Sixteen requests declaring 60 MB each (under MAX_PREDICT_BODY_MB) and sending nothing.
    Before: the buffer of the declared length was allocated (and zeroed) before the first byte
    came, so they held 960 MB for the BODY_TIMEOUT_S every body may lag (30 s by default)."""
    postgres_url_or_skip()
    path = {
        "predict": f"/v1/models/{service.model}/predict",
        "invocations": f"/v1/models/{service.model}/invocations",
        "infer": f"/v2/models/{service.model}/infer",
    }[route]
    with memory.measure(service.process.pid) as peak:
        socks = [held_request(service, path, 60 << 20) for _ in range(16)]
        time.sleep(1.0)  # each has reached its route (BODY_TIMEOUT_S is 2 s)
        answers = []
        for sock in socks:
            answers.append(sock.recv(4096).split(b"\r\n", 1)[0])
            sock.close()
    assert answers == [b"HTTP/1.1 408 Request Timeout"] * 16, answers
    assert peak.increase < 100 * memory.MB, (peak.increase / memory.MB, peak.by_process)


def infer(srv: Service, body: bytes, headers: dict | None = None):
    url = f"/v2/models/{srv.model}/infer"
    return lambda: srv.http.post(
        url, content=body, headers={"Content-Type": "application/json", **(headers or {})}
    )


TENSOR = {"name": "x", "shape": [1, 13], "datatype": "FP64", "data": [0.5] * 13}


def test_infer_json_around_the_data_is_bounded(service):  # noqa: F811
    """Before: a body over 64 KB had its data array cut out, and the rest was parsed whole: 30 MB
    of empty objects in `outputs` took about 1 GB."""
    outputs = b"[" + b",".join([b"{}"] * 10_000_000) + b"]"
    tensor = json.dumps(TENSOR).encode()
    body = b'{"inputs": [' + tensor + b'], "outputs": ' + outputs + b"}"
    response = attack(service, infer(service, body))
    assert response.status_code == 413, response.text[:300]
    assert "apart from its data" in response.json()["error"]


def test_infer_binary_header_is_bounded(service):  # noqa: F811
    """Before: with binary tensor data the JSON part before it was parsed whole, whatever its
    size: 30 MB of empty lists in `parameters` took about 1 GB."""
    tensor = {**TENSOR, "parameters": {"binary_data_size": 13 * 8}}
    del tensor["data"]
    head = json.dumps({"inputs": [tensor]}).encode()[:-1]
    head += b', "parameters": {"x": [' + b",".join([b"[]"] * 10_000_000) + b"]}}"
    body = head + b"\0" * (13 * 8)
    headers = {"Inference-Header-Content-Length": str(len(head))}
    response = attack(service, infer(service, body, headers))
    assert response.status_code == 413, response.text[:300]
    assert "Inference-Header-Content-Length" in response.json()["error"]


def test_upload_form_fields_are_counted(service):  # noqa: F811
    """Before: every multipart field was kept (a dict entry and a buffer per name, then a copy
    of all of them as text when the file began), so memory grew with the body: 44 MB of
    distinct fields took 100 MB and 42 s of the API (a 2 GB upload is allowed)."""
    part = b'--b\r\nContent-Disposition: form-data; name="f%d"\r\n\r\n\r\n'
    body = b"".join(part % i for i in range(800_000)) + b"--b--\r\n"
    headers = {"Content-Type": "multipart/form-data; boundary=b"}
    with memory.measure(service.process.pid) as peak:
        response = service.http.post("/v1/datasets", content=body, headers=headers)
    assert response.status_code == 422 and "form fields" in response.json()["detail"]
    assert peak.increase < 50 * memory.MB, (peak.increase / memory.MB, peak.by_process)
    service.assert_clean(None)


def test_references_that_name_nothing_are_not_kept(service):  # noqa: F811
    """Before: each reference asked about (`name@alias`, or a bare name to the inference
    protocol) was kept in the alias cache, found or not, up to 4,096 of them: 4,000 references
    of 60 KB held 214 MB after their requests ended (so the 1,000 sent here would hold about
    53 MB). A reference that cannot name a model (its name or alias is not a usable one) is now
    a 404 without a lookup."""
    pid = service.process.pid
    before = sum(memory._status(p).get("VmRSS", 0) for p in memory.tree(pid))
    for i in range(1000):
        name = f"{i:05d}" + "a" * 60_000
        answer = service.http.post(f"/v1/models/{name}@prod/predict", json={"instances": []})
        assert answer.status_code == 404, answer.text[:300]
    after = sum(memory._status(p).get("VmRSS", 0) for p in memory.tree(pid))
    print(f"held after the requests: {(after - before) / memory.MB:.1f} MB")
    assert after - before < 35 * memory.MB, (after - before) / memory.MB


def test_the_same_name_registered_at_once_is_201_and_409(service):  # noqa: F811
    """Each round: one name registered by two requests at once. Before: both passed the check
    for the name, and the second insert met the unique index (PostgreSQL: 500)."""
    for round_ in range(30):
        body = {"json": {"name": f"twice-{round_}"}}
        answers = race(service, {"a": ("POST", "/v1/registered-models", body),
                                 "b": ("POST", "/v1/registered-models", body)})  # fmt: skip
        statuses = sorted(r.status_code for r in answers.values())
        assert statuses == [201, 409], [(r.status_code, r.text) for r in answers.values()]
        conflict = next(r for r in answers.values() if r.status_code == 409)
        assert conflict.json()["detail"] == f"a registered model named 'twice-{round_}' exists"
