"""The API process is killed (SIGKILL, mid-upload) and restarted: every dataset, job and model is
intact (keys and tenants too), the half-received upload is swept, and jobs that were queued run."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from app.db import Database
from app.services import keys
from tests.app.conftest import HEART
from tests.reliability.helpers import TERMINAL, Margin, free_port, job_status, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _slow_body(stop: threading.Event):
    yield HEART.read_bytes()
    while not stop.wait(0.05):
        yield b"1 1:0.5 3:1\n" * 100


def _snapshot(http, headers) -> dict:
    return {
        path: http.get(path, headers=headers).json()["items"]
        for path in ("/v1/datasets", "/v1/jobs", "/v1/models")
    }


def test_api_killed_and_restarted(tmp_path):
    data = tmp_path / "data"
    margin = Margin(tmp_path, data_dir=data, auth_mode="required", progress_interval_s=0.1)
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        db = Database(f"sqlite:///{data / 'margin.db'}")
        _, key = keys.create_key(db, "acme", "test", ["admin"])
        db.dispose()
        auth = {"Authorization": f"Bearer {key}"}
        api, http = margin.api(free_port())
        dataset = http.post("/v1/datasets", files={"file": HEART.open("rb")}, headers=auth)
        dataset = dataset.json()["id"]
        job = {"dataset_id": dataset, "params": {"tol": 0.01}}
        first = http.post("/v1/jobs", json=job, headers=auth).json()["id"]
        worker = margin.start("worker", "--workers", "1", name="worker-1")
        wait_for(lambda: job_status(http, first, auth) == "succeeded", 120, "the first job")
        Margin.kill(worker, 15)
        queued = [http.post("/v1/jobs", json=job, headers=auth).json()["id"] for _ in range(3)]
        model = http.get(f"/v1/jobs/{first}", headers=auth).json()["model_id"]
        instance = {"instances": [{"indices": [1, 3, 5], "values": [0.5, -1.0, 1.0]}]}
        predicted = http.post(f"/v1/models/{model}/predict", json=instance, headers=auth).json()
        before = _snapshot(http, auth)

        # an upload is streaming when the API dies
        stop = threading.Event()
        errors = []

        def send():
            try:
                http.post(
                    "/v1/datasets?name=partial",
                    content=_slow_body(stop),
                    headers={**auth, "Content-Type": "application/octet-stream"},
                )
            except httpx.TransportError as exc:
                errors.append(exc)

        sender = threading.Thread(target=send)
        sender.start()
        wait_for(lambda: list((data / "tmp").glob("upload-*.part")), 30, "the upload to start")
        time.sleep(0.3)
        Margin.kill(api)
        stop.set()
        sender.join(30)
        assert errors, "the upload should have been cut off"
        assert list((data / "tmp").glob("upload-*"))  # left behind by the killed process

        _, http = margin.api(free_port())
        after = _snapshot(http, auth)
        for path in before:
            if path == "/v1/jobs":  # timings move on; identity and outcome must not
                strip = ("id", "status", "model_id", "dataset_id", "attempt")
                before[path] = [{k: j[k] for k in strip} for j in before[path]]
                after[path] = [{k: j[k] for k in strip} for j in after[path]]
            assert after[path] == before[path], path
        assert not list((data / "tmp").glob("upload-*"))  # swept at start
        again = http.post(f"/v1/models/{model}/predict", json=instance, headers=auth).json()
        assert again == predicted
        assert http.get("/v1/datasets").status_code == 401  # keys still required and known

        margin.start("worker", "--workers", "1", name="worker-2")
        wait_for(
            lambda: all(job_status(http, j, auth) in TERMINAL for j in queued),
            120,
            "the queued jobs to run after the restart",
            every=0.3,
        )
        assert [job_status(http, j, auth) for j in queued] == ["succeeded"] * 3
    except BaseException:
        print(margin.logs())
        raise
    finally:
        margin.close()
