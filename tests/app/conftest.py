"""Fixtures for the service tests: settings on a temporary data directory, a migrated database
(SQLite, and PostgreSQL when MARGIN_TEST_POSTGRES_URL is set), an HTTP client, model and dataset
rows written directly for the model route tests (`model_rows`), a model trained on the heart data
uploaded as a CSV with named columns (`served`, for the serving tests), and a stand-in trainer for
tests that exercise the job machinery rather than the solvers."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app import migrate
from app.config import Settings
from app.main import create_app
from app.schemas import params as params_module
from app.services import trainers
from app.services.parser_pool import ParserPool
from app.tables import Base
from solvers.io import read_libsvm
from tests.app import model_rows
from tests.app.serving_helpers import train
from tests.deploy.cluster import drop_database

PG_ENV = "MARGIN_TEST_POSTGRES_URL"
HEART = Path(__file__).resolve().parents[2] / "app" / "demo" / "heart_scale"
NAMES = ["age", "sex", "cp", "bps", "chol", "fbs", "ecg", "hr", "angina", "op", "slope", "ca",
         "thal"]  # fmt: skip


def postgres_url_or_skip() -> str:
    url = os.environ.get(PG_ENV)
    if not url:
        pytest.skip(f"no PostgreSQL server configured: set {PG_ENV} (.ci/run starts one)")
    return url


class ScratchDatabase:
    """A PostgreSQL database created for this test session and dropped afterwards."""

    def __init__(self, server_url: str):
        self.server = make_url(server_url)
        self.name = f"margin_core_test_{uuid.uuid4().hex[:10]}"
        self.url = self.server.set(database=self.name).render_as_string(hide_password=False)
        admin = create_engine(self.server, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{self.name}"'))
        admin.dispose()

    def drop(self) -> None:
        admin = create_engine(self.server, isolation_level="AUTOCOMMIT")
        drop_database(admin, self.name)
        admin.dispose()


@pytest.fixture(scope="session")
def postgres_database():
    scratch = ScratchDatabase(postgres_url_or_skip())
    migrate.upgrade(scratch.url)
    yield scratch.url
    scratch.drop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A migrated SQLite file, copied for each test (faster than migrating every time)."""
    path = tmp_path_factory.mktemp("template") / "margin.db"
    migrate.upgrade(f"sqlite:///{path}")
    return path


def pytest_collection_modifyitems(config, items):
    """A module marked `one_database` checks what the edge does before the database matters
    (input refused or parsed, bodies and queries read): its PostgreSQL variants would repeat the
    SQLite ones test for test, so they are left out of the run (reported as deselected). The
    behaviour that does depend on the database runs on both."""
    kept, repeats = [], []
    for item in items:
        (repeats if _repeats_sqlite(item) else kept).append(item)
    if repeats:
        config.hook.pytest_deselected(items=repeats)
        items[:] = kept


def _repeats_sqlite(item) -> bool:
    params = getattr(getattr(item, "callspec", None), "params", {})
    return params.get("db_url") == "postgres" and item.get_closest_marker("one_database")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request, tmp_path, sqlite_template) -> str:
    if request.param == "sqlite":
        target = tmp_path / "data" / "margin.db"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(sqlite_template, target)
        return f"sqlite:///{target}"
    url = request.getfixturevalue("postgres_database")
    engine = create_engine(url)
    with engine.begin() as conn:
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        conn.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture
def settings(tmp_path, db_url) -> Settings:
    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        progress_interval_s=0.01,
        max_upload_mb=1,
    )


class SharedParser(ParserPool):
    """One parser process for the whole session (each app would otherwise spawn its own)."""

    def shutdown(self) -> None:
        pass

    def close(self) -> None:
        super().shutdown()


@pytest.fixture(scope="session")
def shared_parser():
    parser = SharedParser()
    yield parser
    parser.close()


@pytest.fixture
def app(settings, shared_parser):
    application = create_app(settings)
    application.state.parser = shared_parser
    return application


@pytest.fixture
def client(app):
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as test_client:
        yield test_client


@pytest.fixture
def db(app):
    return app.state.db


@pytest.fixture
def s3_settings(tmp_path, db_url, s3_env):
    """Settings with STORAGE_URL on a new bucket of the test S3 server (tests/conftest.py)."""
    server, bucket = s3_env
    return Settings(
        data_dir=tmp_path / "data",
        database_url=db_url,
        storage_url=f"s3://{bucket}/margin",
        storage_timeout_s=2,
        progress_interval_s=0.01,
    )


@pytest.fixture
def s3_client(s3_settings, shared_parser):
    application = create_app(s3_settings)
    application.state.parser = shared_parser
    with TestClient(
        application, base_url="http://localhost", raise_server_exceptions=False
    ) as client:
        yield client


def finished_run(client, location: str, headers=None, timeout: float = 60) -> dict:
    """Poll a background prediction run until it ends; its status document."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        run = client.get(location, params={"format": "json"}, headers=headers or {}).json()
        if run["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return run
        time.sleep(0.02)


def upload(client, content: bytes, filename="data.txt", name=None, headers=None):
    data = {"name": name} if name else None
    return client.post(
        "/v1/datasets", files={"file": (filename, content)}, data=data, headers=headers or {}
    )


@pytest.fixture
def heart(client) -> dict:
    response = upload(client, HEART.read_bytes(), "heart_scale")
    assert response.status_code == 201, response.text
    return response.json()


def heart_csv() -> tuple[bytes, np.ndarray, np.ndarray]:
    """The heart data as a CSV with named columns (`NAMES`), and its rows and labels."""
    X, y = read_libsvm(str(HEART))
    X = X.toarray()
    lines = ["label," + ",".join(NAMES)]
    lines += [f"{t:g}," + ",".join(f"{v:.17g}" for v in row) for row, t in zip(X, y, strict=True)]
    return ("\n".join(lines) + "\n").encode(), X, y


@pytest.fixture
def served(app, client):
    """A model trained on `heart_csv`: its rows, labels, model id and dataset record."""
    text, X, y = heart_csv()
    dataset = client.post("/v1/datasets", files={"file": ("heart.csv", text)}).json()
    model_id = train(app, client, dataset["id"])
    return {"X": X, "y": y, "model": model_id, "dataset": dataset}


@pytest.fixture
def service(app, client) -> model_rows.Service:
    """The app and client, with helpers that write model and dataset rows directly."""
    return model_rows.Service(app, client)


@pytest.fixture
def binary(service):
    """A binary model with random weights: (model id, coef, intercept)."""
    rng = np.random.default_rng(1)
    coef, intercept = rng.standard_normal((1, model_rows.N_FEATURES)), np.array([0.3])
    return service.add_model(coef, intercept, classes=[-1, 1]), coef, intercept


class FakeEstimator:
    """Stands in for a solver: reports `n_iter` progress records with a geometrically falling gap,
    honours the callback's stop request, and returns fixed weights."""

    def __init__(self, n_iter=5, delay=0.0, fail=None):
        self.n_iter = n_iter
        self.delay = delay
        self.fail = fail
        self.calls = 0

    def __call__(self, params, X, y, qid, callback, n_jobs):
        import time

        from solvers._core.progress import Progress

        self.calls += 1
        if self.fail is not None:
            raise self.fail
        status = "max_iter"
        start = time.perf_counter()
        for it in range(1, self.n_iter + 1):
            time.sleep(self.delay)
            gap = 10.0 * 0.1**it
            progress = Progress(
                it,
                time.perf_counter() - start,
                gap,
                pg_max=gap / 2,
                pg_min=-gap / 2,
                pg_range=gap,
                active=10,
                duality_gap=gap / 100,
            )
            if callback(progress) is False:
                status = "stopped"
                break
            if gap <= params["tol"]:
                status = "converged"
                break
        classes = np.unique(y)
        coef = np.arange(X.shape[1], dtype=np.float64)[None, :] / 10
        return trainers.Trained(
            kind="classifier",
            classes=[float(c) for c in classes],
            coef=coef,
            intercept=np.array([0.5]),
            status=status,
            gap=gap,
            n_iter=it,
            predict=lambda Z: np.where(np.asarray(Z @ coef[0]) + 0.5 > 0, classes[-1], classes[0]),
        )


@pytest.fixture
def fake_trainer(monkeypatch):
    """Install a FakeEstimator as the LinearSVC trainer (and mark LinearSVC available)."""

    def install(**kwargs) -> FakeEstimator:
        fake = FakeEstimator(**kwargs)
        monkeypatch.setitem(trainers.TRAINERS, "LinearSVC", fake)
        monkeypatch.setattr(params_module.EstimatorSpec, "available", property(lambda self: True))
        return fake

    return install
