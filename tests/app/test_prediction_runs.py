"""Background prediction runs (`/v1/models/{id}/predictions`): the CSV they write against `predict`,
their errors, and reading a stored dataset in chunks. Over HTTP, with model and dataset rows written
directly (`model_rows`)."""

from __future__ import annotations

import csv
import io

import numpy as np
import scipy.sparse as sp

from app.services import prediction_csv
from app.services.dataset_source import DatasetSource
from app.tables import Dataset, PredictionRun
from tests.app.conftest import finished_run
from tests.app.model_rows import (
    N_FEATURES,
    reference,
    rng_problem,
    sparse_instances,
)


def test_prediction_run_writes_a_csv_equal_to_predict(service, binary):
    model_id, coef, intercept = binary
    X = rng_problem(n=50, seed=7)
    dataset_id = service.add_dataset(X, np.ones(50))
    r = service.client.post(f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id})
    assert r.status_code == 202, r.text
    location = r.headers["location"]
    assert location.startswith(f"/v1/models/{model_id}/predictions/pred_")
    status = finished_run(service.client, location)
    assert status["status"] == "succeeded" and status["n_rows"] == 50
    assert status["result"] == location
    r = service.client.get(location)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(r.text)))
    assert rows[0] == ["row", "label", "decision_value"]
    D = reference(X, coef, intercept)
    assert [int(row[0]) for row in rows[1:]] == list(range(50))
    assert [int(row[1]) for row in rows[1:]] == np.where(D[:, 0] > 0, 1, -1).tolist()
    online = service.client.post(
        f"/v1/models/{model_id}/predict", json={"instances": sparse_instances(X)}
    ).json()
    assert [float(row[2]) for row in rows[1:]] == [d[0] for d in online["decision_values"]]
    listed = service.client.get(f"/v1/models/{model_id}/predictions").json()
    assert [item["id"] for item in listed["items"]] == [status["id"]]
    # Deleting the model removes its runs and their files.
    csv_file = service.settings.data_dir / "predictions" / f"{status['id']}.csv"
    assert csv_file.exists()
    assert service.client.delete(f"/v1/models/{model_id}").status_code == 204
    assert not csv_file.exists() and service.count(PredictionRun) == 0


def test_multiclass_csv_has_a_column_per_class(service):
    rng = np.random.default_rng(8)
    coef = rng.standard_normal((3, N_FEATURES))
    model_id = service.add_model(coef, np.zeros(3), classes=[4, 5, 6])
    X = rng_problem(n=10, seed=9)
    dataset_id = service.add_dataset(X, np.full(10, 4))
    location = service.client.post(
        f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    finished_run(service.client, location)
    rows = list(csv.reader(io.StringIO(service.client.get(location).text)))
    assert rows[0] == ["row", "label", "decision_value_4", "decision_value_5", "decision_value_6"]
    D = reference(X, coef, np.zeros(3))
    np.testing.assert_allclose(np.array(rows[1:], dtype=float)[:, 2:], D, rtol=1e-12)


def test_a_csv_removed_after_the_answer_began_is_still_sent_whole(service, binary):
    """The CSV was opened only when the response started: a run deleted between the route's
    check and that moment was a 500. Now the route opens it, and an open file reads to its end."""
    import asyncio

    from app.api.prediction_runs import _csv_response
    from app.storage import get_storage, prediction_key

    dataset_id = service.add_dataset(rng_problem(n=10, seed=3), np.ones(10))
    location = service.client.post(
        f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    assert finished_run(service.client, location)["status"] == "succeeded"
    expected = service.client.get(location).content
    with service.db.session() as session:
        run = session.get(PredictionRun, location.rsplit("/", 1)[1])
    response = _csv_response(service.settings, run)
    get_storage(service.settings).local_path(prediction_key(run.id)).unlink()

    async def body() -> bytes:
        return b"".join([chunk async for chunk in response.body_iterator])

    assert asyncio.run(body()) == expected
    assert int(response.headers["content-length"]) == len(expected)
    assert service.client.get(location).status_code == 410  # and now it is gone


def test_prediction_run_bad_inputs_store_nothing(service, binary):
    url = f"/v1/models/{binary[0]}/predictions"
    r = service.client.post(url, json={"dataset_id": "ds_missing"})
    assert r.status_code == 404 and "ds_missing" in r.json()["detail"]
    r = service.client.post(url, json={"dataset_id": "x", "extra": 1})
    assert r.status_code == 422 and "extra" in r.json()["detail"]
    r = service.client.post(url, json={})
    assert r.status_code == 422 and "dataset_id" in r.json()["detail"]
    # A zero-based file using index 0 cannot be read by a model trained on a one-based file.
    X = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, N_FEATURES))
    zero = service.add_dataset(X, [1.0], zero_based=True)
    r = service.client.post(url, json={"dataset_id": zero})
    assert r.status_code == 422 and "feature index 0" in r.json()["detail"]
    assert service.count(PredictionRun) == 0
    assert list((service.settings.data_dir / "predictions").iterdir()) == []


def test_a_failed_run_reports_its_error(service, binary):
    X = rng_problem(n=5)
    dataset_id = service.add_dataset(X, np.ones(5))
    (service.settings.data_dir / "datasets" / dataset_id / "data.npy").unlink()
    location = service.client.post(
        f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    finished_run(service.client, location)
    r = service.client.get(location)
    assert r.status_code == 409 and r.json()["run"]["status"] == "failed"
    assert "/work" not in r.text and str(service.settings.data_dir) not in r.text
    assert list((service.settings.data_dir / "predictions").iterdir()) == []


def test_unknown_run_is_404(service, binary):
    r = service.client.get(f"/v1/models/{binary[0]}/predictions/pred_nope")
    assert r.status_code == 404


def test_a_pending_run_answers_202(service, binary):
    with service.db.write() as session:
        session.add(
            PredictionRun(id="pred_x", model_id=binary[0], dataset_id=None, status="running")
        )
    r = service.client.get(f"/v1/models/{binary[0]}/predictions/pred_x")
    assert r.status_code == 202 and r.json()["status"] == "running"
    # A model with an active run cannot be deleted.
    assert service.client.delete(f"/v1/models/{binary[0]}").status_code == 409


def test_starting_a_run_writes_nothing_in_the_requests_read_transaction(
    service, binary, monkeypatch
):
    """The storage check of a new run locks the tenant's row, and first inserts one for a tenant
    without (the local tenant of a database from before rows were made for it). In the request's
    read transaction, on SQLite, that insert failed at once (503) when another connection had
    written since the request's first read; the check belongs to the run's write transaction."""
    from app.api import prediction_runs as api
    from app.tables import Tenant

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        session.query(Tenant).delete()
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    loaded = api.unpacked

    def written_meanwhile(*args):
        with service.db.write() as session:  # another request or a worker commits a write
            session.get(Dataset, dataset_id).name = "renamed"
        return loaded(*args)

    monkeypatch.setattr(api, "unpacked", written_meanwhile)
    r = service.client.post(f"/v1/models/{binary[0]}/predictions", json={"dataset_id": dataset_id})
    assert r.status_code == 202, r.text
    with service.db.session() as session:
        assert session.get(Tenant, "local") is not None  # the run's transaction made the row


def test_datasets_are_read_in_chunks_with_the_same_result(service, binary, tmp_path):
    from app.services.model_cache import ModelCache, fetch_model

    model_id, coef, intercept = binary
    X = rng_problem(n=50, seed=14)
    y = np.where(np.arange(50) % 3 == 0, 1.0, -1.0)
    dataset_id = service.add_dataset(X, y)
    with service.db.session() as session:
        source = DatasetSource.of(service.settings, session.get(Dataset, dataset_id))
    model = fetch_model(service.db, ModelCache(1), model_id)
    chunks = list(source.chunks(model, rows=7))
    assert [start for start, _, _ in chunks] == list(range(0, 50, 7))
    stacked = sp.vstack([c for _, c, _ in chunks]).toarray()
    np.testing.assert_array_equal(stacked, X.toarray())
    np.testing.assert_array_equal(np.concatenate([t for _, _, t in chunks]), y)
    n = prediction_csv.write_csv(tmp_path / "out.csv", model, source.chunks(model, rows=7))
    rows = list(csv.reader(io.StringIO((tmp_path / "out.csv").read_text())))
    assert n == 50 and len(rows) == 51
    np.testing.assert_allclose(
        [float(r[2]) for r in rows[1:]], reference(X, coef, intercept)[:, 0], rtol=1e-12
    )


def test_a_stored_row_whose_decision_value_overflows_fails_evaluate_and_the_run(service):
    # Each value finite, but 1e308 + 1.7e308 is inf: evaluate counted a label picked from nan
    # (R² null for a regressor), and the run's CSV held the label with "nan". Row 8,200 lies
    # in the second chunk read (CHUNK_ROWS 8,192), so the row named counts the chunks before it.
    dense = np.tile([1.0, 0.5, 0.0], (8300, 1))
    dense[8200] = [1e308, -1.7e308, 0.0]
    X, y = sp.csr_matrix(dense), np.where(np.arange(8300) % 2, 1.0, -1.0)
    dataset_id = service.add_dataset(X, y)
    model_id = service.add_model([[1.0, -1.0, 0.5]], [0.0], classes=[-1, 1])
    evaluated = service.client.post(
        f"/v1/models/{model_id}/evaluate", json={"dataset_id": dataset_id}
    )
    assert evaluated.status_code == 422, evaluated.text
    assert "row 8200 of the dataset (counting from 0)" in evaluated.json()["detail"]
    assert "overflows" in evaluated.json()["detail"]
    location = service.client.post(
        f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id}
    ).headers["location"]
    run = finished_run(service.client, location)
    assert run["status"] == "failed" and "row 8200 of the dataset" in run["error"], run
    assert list((service.settings.data_dir / "predictions").iterdir()) == []
    assert list((service.settings.data_dir / "tmp").iterdir()) == []


def _calibrate(service, model_id: str, calibration: dict) -> None:
    from app.tables import Model

    with service.db.write() as session:
        session.get(Model, model_id).calibration = calibration


def test_a_run_asked_for_probabilities_writes_them_as_predict_gives_them(service, binary):
    """`?probabilities=true` (or the body's flag) was ignored: the CSV had decision values only.
    Now each class has a `probability_<class>` column, in the model's class order, with the
    values the synchronous predict returns."""
    model_id, _, _ = binary
    _calibrate(service, model_id, {"method": "sigmoid", "A": [-2.0], "B": [0.1]})
    X = rng_problem(n=30, seed=11)
    dataset_id = service.add_dataset(X, np.ones(30))
    url = f"/v1/models/{model_id}/predictions"
    online = service.client.post(
        f"/v1/models/{model_id}/predict?probabilities=true",
        json={"instances": sparse_instances(X)},
    ).json()
    for params, body in (({"probabilities": "true"}, {}), ({}, {"probabilities": True})):
        r = service.client.post(url, params=params, json={"dataset_id": dataset_id, **body})
        assert r.status_code == 202, r.text
        assert r.json()["probabilities"] is True
        finished_run(service.client, r.headers["location"])
        rows = list(csv.reader(io.StringIO(service.client.get(r.headers["location"]).text)))
        header = ["row", "label", "decision_value", "probability_-1", "probability_1"]
        assert rows[0] == header
        P = np.array([[float(v) for v in row[3:]] for row in rows[1:]])
        assert P.tolist() == online["probabilities"]
        np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    r = service.client.post(url, json={"dataset_id": dataset_id})
    assert r.json()["probabilities"] is False
    rows = list(csv.reader(io.StringIO(
        service.client.get(finished_run(service.client, r.headers["location"])["result"]).text
    )))  # fmt: skip
    assert rows[0] == ["row", "label", "decision_value"]


def _probability_run_rows(service, model_id: str, dataset_id: str) -> list[list[str]]:
    """The CSV rows (header first) of a finished run of ``model_id`` with probabilities."""
    r = service.client.post(
        f"/v1/models/{model_id}/predictions?probabilities=true", json={"dataset_id": dataset_id}
    )
    assert r.status_code == 202, r.text
    csv_text = service.client.get(finished_run(service.client, r.headers["location"])["result"])
    return list(csv.reader(io.StringIO(csv_text.text)))


def test_a_multiclass_run_has_a_probability_column_per_class(service):
    rng = np.random.default_rng(12)
    model_id = service.add_model(rng.standard_normal((3, N_FEATURES)), np.zeros(3), [6, 4, 5])
    _calibrate(service, model_id, {"method": "softmax", "temperature": 0.5})
    X = rng_problem(n=12, seed=13)
    dataset_id = service.add_dataset(X, np.ones(12))
    rows = _probability_run_rows(service, model_id, dataset_id)
    assert rows[0][-3:] == ["probability_6", "probability_4", "probability_5"]
    online = service.client.post(
        f"/v1/models/{model_id}/predict",
        json={"instances": sparse_instances(X), "probabilities": True},
    ).json()
    assert [[float(v) for v in row[-3:]] for row in rows[1:]] == online["probabilities"]


def test_probabilities_of_a_model_without_calibration_is_a_422_and_no_run(service, binary):
    model_id, _, _ = binary
    dataset_id = service.add_dataset(rng_problem(n=5, seed=14), np.ones(5))
    url = f"/v1/models/{model_id}/predictions"
    for params, body in (({"probabilities": "true"}, {}), ({}, {"probabilities": True})):
        r = service.client.post(url, params=params, json={"dataset_id": dataset_id, **body})
        assert r.status_code == 422, r.text
        assert "no probability calibration" in r.json()["detail"]
    r = service.client.post(url, params={"probabilities": "maybe"}, json={"dataset_id": dataset_id})
    assert r.status_code == 422, r.text
    assert service.count(PredictionRun) == 0


def test_a_run_asked_for_probabilities_differently_by_query_and_body_is_a_422(service, binary):
    """`?probabilities=false` with `"probabilities": true` wrote them (the flags were OR-ed):
    two different values are a 422 naming the flag, and no run; the same value twice is one."""
    model_id, _, _ = binary
    _calibrate(service, model_id, {"method": "sigmoid", "A": [-2.0], "B": [0.1]})
    dataset_id = service.add_dataset(rng_problem(n=5, seed=15), np.ones(5))
    url = f"/v1/models/{model_id}/predictions"
    for query, flag in (("false", True), ("true", False)):
        r = service.client.post(url, params={"probabilities": query},
                                json={"dataset_id": dataset_id, "probabilities": flag})  # fmt: skip
        assert r.status_code == 422, r.text
        assert r.json()["detail"].startswith(
            "probabilities: sent in the query string and in the body with different values"
        )
    assert service.count(PredictionRun) == 0
    same = service.client.post(url, params={"probabilities": "false"},
                               json={"dataset_id": dataset_id, "probabilities": False})  # fmt: skip
    assert same.status_code == 202 and same.json()["probabilities"] is False


def test_an_isotonic_multiclass_run_writes_the_probabilities_predict_gives(service):
    """Isotonic calibration (a piecewise-linear map per class, clipped, then normalized): the
    run's probability columns are predict's, each row summing to 1."""
    rng = np.random.default_rng(15)
    model_id = service.add_model(rng.standard_normal((3, N_FEATURES)), np.zeros(3), [0, 1, 2])
    y_steps = [[0.0, 0.2, 1.0], [0.1, 0.5, 0.9], [0.0, 0.0, 0.6]]
    breakpoints = {"x": [[-1.0, 0.0, 1.0]] * 3, "y": y_steps}
    _calibrate(service, model_id, {"method": "isotonic", **breakpoints})
    X = rng_problem(n=20, seed=16)
    dataset_id = service.add_dataset(X, np.zeros(20))
    rows = _probability_run_rows(service, model_id, dataset_id)
    P = np.array([[float(v) for v in row[-3:]] for row in rows[1:]])
    online = service.client.post(
        f"/v1/models/{model_id}/predict",
        json={"instances": sparse_instances(X), "probabilities": True},
    ).json()
    assert P.tolist() == online["probabilities"]
    np.testing.assert_allclose(P.sum(axis=1), 1.0, rtol=1e-12)
    D = np.array([[float(v) for v in row[2:5]] for row in rows[1:]])
    expected = np.column_stack([np.interp(D[:, j], breakpoints["x"][j], breakpoints["y"][j])
                                for j in range(3)])  # fmt: skip
    np.testing.assert_allclose(P, expected / expected.sum(axis=1, keepdims=True), rtol=1e-12)


def test_a_run_whose_end_commit_answer_is_lost_keeps_its_csv(service, binary, monkeypatch):
    """The connection drops after the database has committed a run's `succeeded` but before
    the answer arrives: the runner tried again, found the run no longer `running`, took it
    for cancelled or taken over and removed the CSV, leaving a succeeded run whose download
    is a 410 for ever."""
    import queue

    from sqlalchemy import event
    from sqlalchemy.exc import OperationalError

    from app.services import prediction_runs as runs

    move, lost = runs._move, []

    def move_then_lose_the_answer(session, run_id, attempt, from_, to, /, **values):
        moved = move(session, run_id, attempt, from_, to, **values)
        if to == "succeeded" and not lost:
            lost.append(run_id)

            def drop(_session):
                raise OperationalError(
                    "COMMIT", {}, ConnectionError("server closed the connection unexpectedly")
                )

            event.listen(session, "after_commit", drop, once=True)
        return moved

    executed, outcomes = runs.execute_run, queue.Queue()
    monkeypatch.setattr(runs, "_move", move_then_lose_the_answer)
    monkeypatch.setattr(runs, "execute_run", lambda *args: outcomes.put(executed(*args)))
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=20), np.ones(20))
    r = service.client.post(f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id})
    assert outcomes.get(timeout=30) == "succeeded"  # before: "lost", its CSV removed
    status = finished_run(service.client, r.headers["location"])
    assert lost and status["status"] == "succeeded" and status["n_rows"] == 20
    r = service.client.get(r.headers["location"])
    assert r.status_code == 200, r.text  # before: 410 "Prediction result gone"
    assert len(r.text.splitlines()) == 21


def test_a_stale_runner_ending_late_keeps_the_csv_of_the_attempt_that_succeeded(service, binary):
    """A runner silent through a database outage is recovered, and a later attempt writes the
    run's CSV and ends it `succeeded`; the first runner then finishes, finds its claim gone and
    removed the CSV of the run's one key: a succeeded run whose download was a 410."""
    from app.services import prediction_runs as runs

    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=20), np.ones(20))
    r = service.client.post(f"/v1/models/{model_id}/predictions", json={"dataset_id": dataset_id})
    status = finished_run(service.client, r.headers["location"])
    assert status["status"] == "succeeded"
    with service.db.session() as session:
        attempt = session.get(PredictionRun, status["id"]).attempt
    stale = runs.RunClaim(status["id"], attempt - 1, "gone")  # the claim before the recovery
    db, settings = service.db, service.app.state.settings
    assert runs.execute_run(db, settings, stale) == "lost"
    r = service.client.get(r.headers["location"])
    assert r.status_code == 200, r.text  # before: 410 "Prediction result gone"
    assert len(r.text.splitlines()) == 21
