"""A streamed download whose client reads nothing is given up after SEND_TIMEOUT_S, against a real
`margin api` (uvicorn, SQLite): a LIBLINEAR export of a model of 8 million features (24 MB of
text), the JSON export of a dense model of a million weights (20 MB) and a prediction run's 24 MB
CSV. The connection is dropped at once, the CSV's file is
closed, the server serves other requests meanwhile, and nothing is logged as an error. (The
event streams' own test is test_stalled_event_stream.py, whose approach this follows.)"""

from __future__ import annotations

import socket

import numpy as np
import psutil
import pytest

from app.db import Database
from app.services.model_store import pack_weights
from app.storage import prediction_key
from app.tables import Model, PredictionRun, new_id
from tests.reliability.helpers import Margin, free_port, wait_for
from tests.reliability.test_stalled_event_stream import holds

pytestmark = [pytest.mark.timeout(180)]
FEATURES = 8_000_000  # a zero weight is the line "0 \n": 24 MB of export


def sparse_model(db: Database) -> str:
    """A stored model of FEATURES features, all but two weights zero (a small row)."""
    coef = np.zeros((1, FEATURES))
    coef[0, [0, FEATURES // 2]] = (0.5, -0.25)
    return stored_model(db, coef)


def stored_model(db: Database, coef: np.ndarray) -> str:
    model_id = new_id("model")
    with db.write() as session:
        session.add(Model(
            id=model_id, estimator="LinearSVC", params={"C": 1.0}, kind="classifier",
            classes=[-1, 1], n_features=coef.shape[1], zero_based=False,
            weights=pack_weights(coef, [0.1]), status="converged", gap=1e-3, n_iter=7,
            train_time_s=0.25, train_accuracy=0.9, validation_accuracy=None,
        ))  # fmt: skip
    return model_id


def succeeded_run(db: Database, data_dir, model_id: str) -> tuple[str, str]:
    """A succeeded prediction run of `model_id` with a 24 MB CSV; its id and the CSV's path."""
    run_id = new_id("pred")
    path = data_dir / prediction_key(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    row = b"%d,1,0.12345678901234567\n"
    path.write_bytes(b"row,label,decision_value\n" + b"".join(row % i for i in range(800_000)))
    with db.write() as session:
        session.add(PredictionRun(
            id=run_id, model_id=model_id, status="succeeded", n_rows=800_000,
            size_bytes=path.stat().st_size,
        ))  # fmt: skip
    return run_id, str(path)


def stalled_get(port: int, target: str) -> socket.socket:
    """A GET of `target` on a connection that reads nothing (a tiny receive window)."""
    conn = socket.socket()
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn.connect(("127.0.0.1", port))
    conn.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    return conn


def test_downloads_whose_clients_read_nothing_are_dropped(tmp_path):
    """Before: each such download waited in its send for as long as the client kept the
    connection open (the CSV's file open, the export's generator alive), never logged."""
    data = tmp_path / "data"
    port = free_port()
    margin = Margin(tmp_path, data_dir=data, auth_mode="off", send_timeout_s=1)
    try:
        assert margin.start("migrate", name="migrate").wait(120) == 0, margin.logs()
        db = Database(f"sqlite:///{data / 'margin.db'}")
        model_id = sparse_model(db)
        run_id, csv_path = succeeded_run(db, data, model_id)
        # a dense model of a million weights: its JSON export is about 20 MB
        dense_id = stored_model(db, np.random.default_rng(0).standard_normal((1, 1_000_000)))
        db.dispose()
        api, http = margin.api(port)
        log = tmp_path / f"api-{port}.log"
        export = stalled_get(port, f"/v1/models/{model_id}/export")
        csv = stalled_get(port, f"/v1/models/{model_id}/predictions/{run_id}")
        document = stalled_get(port, f"/v1/models/{dense_id}/export?format=json")
        server = psutil.Process(api.pid)
        wait_for(lambda: any(f.path == csv_path for f in server.open_files()), 30, "the CSV read")
        assert http.get("/healthz").status_code == 200  # served while both downloads wait
        wait_for(lambda: log.read_text().count("read nothing for 1 s") == 3, 60, "all closed")
        wait_for(lambda: not any(holds(api.pid, c) for c in (export, csv, document)), 10, "drops")
        assert all(f.path != csv_path for f in server.open_files())
        for conn in (export, csv, document):
            conn.close()
        whole = http.get(f"/v1/models/{model_id}/export")  # a client that reads gets it all
        assert whole.status_code == 200 and whole.text.count("0 \n") == FEATURES - 2
    finally:
        margin.close()
    text = log.read_text()
    assert "without completing response" not in text, text[-3000:]
    assert "Exception in ASGI application" not in text, text[-3000:]
