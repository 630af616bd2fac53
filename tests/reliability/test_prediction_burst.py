"""60 background prediction runs requested at once on a large dataset (a real `margin api` on
PostgreSQL, keys required): every request is accepted or refused with a retryable status — never a
500 — while another tenant's reads and `/healthz` stay fast, and every run ends (none stuck
queued or running), so the model can be deleted afterwards. Also: a request that finds no pooled
connection within DB_POOL_TIMEOUT_S gets 503 with Retry-After, and `/healthz` needs none."""

from __future__ import annotations

import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import httpx
import numpy as np
import pytest
import scipy.sparse as sp
from fastapi.testclient import TestClient

from app.config import Settings
from app.db import Database
from app.main import create_app
from app.services import keys
from app.services.model_store import pack_weights
from app.tables import Dataset, Model, new_id
from tests.deploy.cluster import FreshDatabase
from tests.reliability.helpers import Margin, free_port, wait_for

N_RUNS = 60
POOL_WAIT_S = 2.0  # db_pool_timeout_s of the pool test
HEALTHZ_POOL_WAIT_S = 60.0  # and of its /healthz half
N_ROWS, N_FEATURES = 10_000, 50


def _store(db: Database, data_dir, tenant: str) -> tuple[str, str]:
    """A classifier and a dataset of N_ROWS rows, written the way the service stores them."""
    rng = np.random.default_rng(0)
    X = sp.random(N_ROWS, N_FEATURES, density=0.2, format="csr", random_state=1)
    dataset_id, model_id = new_id("ds"), new_id("mdl")
    directory = data_dir / "datasets" / dataset_id
    directory.mkdir(parents=True)
    y = np.where(rng.standard_normal(N_ROWS) > 0, 1.0, -1.0)
    for name, array in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr), ("y", y)):
        np.save(directory / f"{name}.npy", array)
    with db.write() as session:
        session.add(
            Dataset(
                id=dataset_id,
                tenant=tenant,
                name="big",
                filename="big.svm",
                n_rows=N_ROWS,
                n_features=N_FEATURES,
                nnz=X.nnz,
                zero_based=False,
                has_qid=False,
                label_kind="classes",
                classes=[{"label": -1.0}, {"label": 1.0}],
                target={},
                sha256="0" * 64,
                size_bytes=1,
            )
        )
        session.add(
            Model(
                id=model_id,
                tenant=tenant,
                job_id=None,
                dataset_id=dataset_id,
                estimator="LinearSVC",
                params={"C": 1.0},
                kind="classifier",
                classes=[-1, 1],
                n_features=N_FEATURES,
                zero_based=False,
                weights=pack_weights(rng.standard_normal((1, N_FEATURES)), np.zeros(1)),
                status="converged",
                gap=1e-3,
                n_iter=1,
                train_time_s=0.1,
                train_accuracy=None,
                validation_accuracy=None,
            )
        )
    return model_id, dataset_id


def _probe(base_url: str, path: str, headers: dict, ready, done, out) -> None:
    http = httpx.Client(base_url=base_url, timeout=60, headers=headers)
    http.get(path)
    ready.set()
    slowest, statuses = 0.0, set()
    while not done.wait(0.1):
        start = time.monotonic()
        statuses.add(http.get(path).status_code)
        slowest = max(slowest, time.monotonic() - start)
    out.put((slowest, statuses))


class Probe:
    """GETs `path` every 0.1 s until stopped, from a process of its own (so that the test's own
    request threads do not slow it down); keeps the slowest time and every status."""

    def __init__(self, base_url: str, path: str, headers: dict | None = None):
        ctx = multiprocessing.get_context("spawn")
        self.ready, self.done, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        args = (base_url, path, headers or {}, self.ready, self.done, self.out)
        self.process = ctx.Process(target=_probe, args=args, daemon=True)
        self.slowest, self.statuses = 0.0, set()

    def start(self) -> None:
        self.process.start()
        assert self.ready.wait(60), "the probe did not start"

    def stop(self) -> None:
        self.done.set()
        self.slowest, self.statuses = self.out.get(timeout=60)
        self.process.join(10)


@pytest.mark.postgres
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sixty_concurrent_prediction_runs(tmp_path):
    database = FreshDatabase()
    data = tmp_path / "data"
    margin = Margin(tmp_path, data_dir=data, database_url=database.url, auth_mode="required")
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        db = Database(database.url)
        acme = {"Authorization": f"Bearer {keys.create_key(db, 'acme', 't', ['admin'])[1]}"}
        other = {"Authorization": f"Bearer {keys.create_key(db, 'globex', 't', ['read'])[1]}"}
        model_id, dataset_id = _store(db, data, "acme")
        db.dispose()
        _, http = margin.api(free_port())
        base = str(http.base_url)
        probes = [Probe(base, "/healthz"), Probe(base, "/v1/datasets", other)]
        for probe in probes:
            probe.start()

        def request(_):
            return httpx.post(
                f"{base}/v1/models/{model_id}/predictions",
                json={"dataset_id": dataset_id},
                headers=acme,
                timeout=120,
            )

        with ThreadPoolExecutor(N_RUNS) as pool:
            responses = list(pool.map(request, range(N_RUNS)))
        codes = [r.status_code for r in responses]
        assert set(codes) <= {202, 503}, [r.text for r in responses if r.status_code >= 500]
        accepted = [r.json()["id"] for r in responses if r.status_code == 202]
        assert len(accepted) >= N_RUNS // 2, codes

        def statuses():
            runs = http.get(
                f"/v1/models/{model_id}/predictions", params={"limit": 200}, headers=acme
            )
            return {r["id"]: r["status"] for r in runs.json()["items"]}

        ended = wait_for(
            lambda: (
                (s := statuses()) and all(v in ("succeeded", "failed") for v in s.values()) and s
            ),
            180,
            "every prediction run to end",
            every=0.5,
        )
        for probe in probes:
            probe.stop()
        assert sorted(ended) == sorted(accepted)
        assert set(ended.values()) == {"succeeded"}, ended
        csv = http.get(f"/v1/models/{model_id}/predictions/{accepted[-1]}", headers=acme)
        assert csv.status_code == 200 and csv.text.count("\n") == N_ROWS + 1
        healthz, reads = probes
        print(
            f"{codes.count(202)} accepted, {sum(c >= 500 for c in codes)} 5xx; slowest /healthz "
            f"{healthz.slowest:.3f} s, slowest read of another tenant {reads.slowest:.3f} s"
        )
        # on 2 cores in the full suite, while the burst's runs start, one answer waited 1.03 s and
        # 1.6 s for a core (0.3 s alone); a blocked event loop would hold it for the whole burst
        assert healthz.statuses == {200} and healthz.slowest < 3.0, healthz.slowest
        assert reads.statuses == {200} and reads.slowest < 3.0, reads.slowest
        assert http.delete(f"/v1/models/{model_id}", headers=acme).status_code == 204
    except BaseException:
        print(margin.logs())
        raise
    finally:
        margin.close()
        database.drop()


@contextmanager
def _pool_held(data, pool_wait_s):
    """The TestClient of an app on ``data`` whose pool (waiting ``pool_wait_s``) has every
    connection held; on exit they are released and the app serves a read again."""
    app = create_app(Settings(data_dir=data, db_pool_timeout_s=pool_wait_s))
    with TestClient(app, base_url="http://localhost", raise_server_exceptions=False) as client:
        engine = app.state.db.engine
        held = [engine.connect() for _ in range(engine.pool.size() + engine.pool._max_overflow)]
        try:
            yield client
        finally:
            for conn in held:
                conn.close()
        assert client.get("/v1/datasets").status_code == 200


def test_pool_timeout_is_503_with_retry_after_and_healthz_needs_no_connection(
    tmp_path,
    sqlite_template,  # noqa: F811
):
    import shutil

    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(sqlite_template, data / "margin.db")
    with _pool_held(data, POOL_WAIT_S) as client:
        start = time.monotonic()
        response = client.get("/v1/datasets")
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] and "database" in response.json()["detail"]
        # the upper bound only says the answer came: a full-suite run once froze the whole
        # process for 5 s (the in-process Dask loops of earlier tests said so too)
        assert POOL_WAIT_S <= time.monotonic() - start < POOL_WAIT_S + 30
    # /healthz takes no connection: it does not wait for the pool. Were it to, it would wait
    # HEALTHZ_POOL_WAIT_S (and then fail), far beyond the bound, which a stall of the process
    # (5 s seen once) does not reach.
    with _pool_held(data, HEALTHZ_POOL_WAIT_S) as client:
        start = time.monotonic()
        assert client.get("/healthz").status_code == 200
        assert time.monotonic() - start < HEALTHZ_POOL_WAIT_S / 2
