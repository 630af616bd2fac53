"""Fixtures shared with the service tests (a migrated SQLite template, one parser process), and the
attack tests' service (tests/reliability/attack_service.py) with its scratch database."""

import pytest

from tests.app.conftest import HEART, postgres_url_or_skip, shared_parser, sqlite_template  # noqa: F401
from tests.reliability.attack_service import Service
from tests.reliability.helpers import wait_for


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
