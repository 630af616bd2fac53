"""`POST /v1/models/{id}/evaluate` against scikit-learn's metrics, its errors, and a dataset deleted
while evaluate or a prediction run reads it. Over HTTP, with model and dataset rows written directly
(`model_rows`)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from app.services.dataset_source import DatasetSource
from app.tables import Dataset, PredictionRun
from tests.app.model_rows import (
    N_FEATURES,
    reference,
    rng_problem,
)


def test_evaluate_classifier_and_regressor(service):
    from sklearn.metrics import confusion_matrix, mean_squared_error, r2_score

    rng = np.random.default_rng(10)
    X = rng_problem(n=200, seed=11)
    coef = rng.standard_normal((3, N_FEATURES))
    model_id = service.add_model(coef, np.zeros(3), classes=[0, 1, 2])
    y = rng.integers(0, 3, size=200).astype(float)
    dataset_id = service.add_dataset(X, y)
    r = service.client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": dataset_id})
    assert r.status_code == 200, r.text
    report = r.json()
    predicted = reference(X, coef, np.zeros(3)).argmax(axis=1)
    assert report["accuracy"] == pytest.approx(np.mean(predicted == y))
    assert report["confusion_matrix"] == confusion_matrix(y, predicted).tolist()
    assert report["labels"] == [0, 1, 2] and report["n"] == 200

    reg = service.add_model(coef[:1], [0.5], classes=[], kind="regressor")
    target = reference(X, coef[:1], [0.5])[:, 0] + rng.standard_normal(200) * 0.1
    real = service.add_dataset(X, target, label_kind="real")
    report = service.client.post(f"/v1/models/{reg}/evaluate", json={"dataset_id": real}).json()
    pred = reference(X, coef[:1], [0.5])[:, 0]
    assert report["mse"] == pytest.approx(mean_squared_error(target, pred), rel=1e-10)
    assert report["r2"] == pytest.approx(r2_score(target, pred), rel=1e-10)

    r = service.client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": real})
    assert r.status_code == 422 and "real-valued targets" in r.json()["detail"]


def test_evaluate_maps_a_zero_based_dataset_onto_a_one_based_model(service):
    coef = np.arange(1.0, 4.0)[None, :]
    model_id = service.add_model(coef, [0.0], classes=[-1, 1], zero_based=False)
    # Raw indices 1 and 3 of a file read as zero-based are columns 1 and 3 there.
    X = sp.csr_matrix(([1.0, -1.0], ([0, 1], [1, 3])), shape=(2, 4))
    dataset_id = service.add_dataset(X, [1.0, -1.0], zero_based=True)
    report = service.client.post(
        f"/v1/models/{model_id}/evaluate", json={"dataset_id": dataset_id}
    ).json()
    assert report["accuracy"] == 1.0  # 1*1 > 0 -> 1; -1*3 < 0 -> -1


def test_evaluate_bad_inputs(service, binary):
    url = f"/v1/models/{binary[0]}/evaluate"
    r = service.client.post(url, json={"dataset_id": "ds_missing"})
    assert r.status_code == 404 and "ds_missing" in r.json()["detail"]
    r = service.client.post(url, json={"dataset_id": "x", "limit": 3})
    assert r.status_code == 422 and "limit" in r.json()["detail"]
    r = service.client.post(url, content=b"{", headers={"content-type": "application/json"})
    assert r.status_code == 422
    X = sp.csr_matrix(([1.0], ([0], [0])), shape=(1, N_FEATURES))
    zero = service.add_dataset(X, [1.0], zero_based=True)
    r = service.client.post(url, json={"dataset_id": zero})
    assert r.status_code == 422 and "feature index 0" in r.json()["detail"]
    assert service.count(PredictionRun) == 0


def test_evaluate_refuses_an_unrelated_dataset_and_reports_ignored_features(service):
    coef = np.arange(1.0, 5.0)[None, :]
    model_id = service.add_model(coef, [0.0], classes=[-1, 1])
    url = f"/v1/models/{model_id}/evaluate"
    # a 26-class set whose labels the binary model never saw: before, accuracy 0.0 and no word
    X = sp.random(52, 6, density=0.5, format="csr", random_state=5)
    unrelated = service.add_dataset(X, np.repeat(np.arange(2.0, 28.0), 2))
    r = service.client.post(url, json={"dataset_id": unrelated})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "none of dataset" in detail and "is a class of the model" in detail
    # fewer features than the model: valid; more: the extra ones ignored, and counted
    fewer = service.add_dataset(sp.random(4, 3, density=1.0, format="csr"), [1, -1, 1, -1])
    r = service.client.post(url, json={"dataset_id": fewer})
    assert r.status_code == 200 and r.json()["ignored_features"] == 0
    more = service.add_dataset(sp.random(4, 9, density=1.0, format="csr"), [1, -1, 1, 1])
    r = service.client.post(url, json={"dataset_id": more})
    assert r.status_code == 200 and r.json()["ignored_features"] == 5


def test_a_dataset_deleted_while_it_is_read_is_404(service, binary, monkeypatch):
    """Evaluate and background predictions read a dataset after their request gave its
    connection back; a delete in between answered 500 (a missing file, a foreign key)."""
    import shutil

    from app.services import prediction_runs as runs

    model_id = binary[0]
    X = rng_problem(n=30, seed=4)
    gone_files = service.add_dataset(X, np.where(np.arange(30) % 2, 1.0, -1.0))
    gone_row = service.add_dataset(X, np.where(np.arange(30) % 2, 1.0, -1.0))
    of, create_run = DatasetSource.of, runs.create_run

    def files_deleted_meanwhile(settings, dataset, **tries):
        if dataset.id == gone_files:
            shutil.rmtree(settings.data_dir / "datasets" / dataset.id)
        return of(settings, dataset, **tries)

    def row_deleted_meanwhile(db, model, dataset_id, *size, **options):
        with db.write() as session:
            session.delete(session.get(Dataset, dataset_id))
        return create_run(db, model, dataset_id, *size, **options)

    monkeypatch.setattr(DatasetSource, "of", staticmethod(files_deleted_meanwhile))
    monkeypatch.setattr(runs, "create_run", row_deleted_meanwhile)
    for path, dataset_id in (("evaluate", gone_files), ("predictions", gone_row)):
        response = service.client.post(f"/v1/models/{model_id}/{path}",
                                       json={"dataset_id": dataset_id})  # fmt: skip
        assert response.status_code == 404, (path, response.text)
        assert "deleted while it was being read" in response.json()["detail"]


def _stored(directory, X, y) -> DatasetSource:
    """A DatasetSource over CSR arrays saved under `directory` (as an upload stores them)."""
    directory.mkdir()
    for name, array in (("data", X.data), ("indices", X.indices), ("indptr", X.indptr), ("y", y)):
        np.save(directory / f"{name}.npy", array)
    return DatasetSource(lambda: directory, X.shape[1], zero_based=False)


def _evaluated_peak(model, source) -> tuple[dict, int]:
    import tracemalloc

    from app.services.dataset_scores import evaluate

    model.calibrator  # noqa: B018 - its module imported before the count, not counted
    tracemalloc.start()
    try:
        report = evaluate(model, source)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return report, peak


def test_evaluate_scores_a_bounded_slice_of_many_classes_at_a_time(tmp_path):
    """evaluate scored CHUNK_ROWS (8,192) rows at once whatever the classes: at 600 calibrated
    classes 39 MB of decision values, as much of probabilities and of each copy (a 150 MB peak).
    A chunk now holds SCORE_ENTRIES decision values and probabilities, as a job's accuracy."""
    from app.services.dataset_source import SCORE_ENTRIES
    from app.services.prediction import LinearModel

    classes, n_rows = 600, 9000
    rng = np.random.default_rng(5)
    coef, intercept = rng.standard_normal((classes, 4)), rng.standard_normal(classes)
    X = sp.csr_matrix(rng.standard_normal((n_rows, 4)))
    y = rng.integers(classes, size=n_rows).astype(np.float64)
    model = LinearModel("m", "classifier", list(range(classes)), 4, False, coef, intercept,
                        calibration={"method": "softmax", "temperature": 2.0})  # fmt: skip
    report, peak = _evaluated_peak(model, _stored(tmp_path / "ds", X, y))
    D = X @ coef.T + intercept  # every row at once: the reference
    P = np.exp(D / 2.0 - (D / 2.0).max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    truth = y.astype(np.int64)
    assert report["accuracy"] == pytest.approx(np.mean(D.argmax(axis=1) == truth), abs=1e-12)
    expected_loss = -np.mean(np.log(np.clip(P[np.arange(n_rows), truth], 1e-15, 1.0)))
    assert report["log_loss"] == pytest.approx(expected_loss, rel=1e-9)
    assert peak < 4 * SCORE_ENTRIES * 8, peak / 2**20  # 32 MB


def test_evaluate_reads_wide_rows_a_bounded_slice_of_entries_at_a_time(tmp_path):
    """A chunk was CHUNK_ROWS rows however many stored entries they held: 8,192 rows of 500
    copied 4 million entries (49 MB) at once. A chunk now holds about SCORE_ENTRIES entries."""
    from app.services.dataset_source import SCORE_ENTRIES
    from app.services.prediction import LinearModel

    n_rows, width = 9000, 500
    rng = np.random.default_rng(6)
    indptr = np.arange(0, n_rows * width + 1, width, dtype=np.int64)
    indices = np.tile(np.arange(width, dtype=np.int32), n_rows)
    X = sp.csr_matrix((rng.standard_normal(n_rows * width), indices, indptr), (n_rows, width))
    coef = rng.standard_normal((1, width))
    y = np.where(rng.random(n_rows) < 0.5, 1.0, -1.0)
    model = LinearModel("m", "classifier", [-1, 1], width, False, coef, np.zeros(1))
    report, peak = _evaluated_peak(model, _stored(tmp_path / "ds", X, y))
    predicted = np.where((X @ coef.T).ravel() > 0, 1.0, -1.0)
    assert report["accuracy"] == pytest.approx(np.mean(predicted == y), abs=1e-12)
    assert peak < 2 * SCORE_ENTRIES * 12, peak / 2**20  # 24 MB: a chunk's entries, a copy


def test_a_dataset_over_max_evaluate_rows_is_422(service, binary):
    """Evaluate runs in the API process while its client waits: a 10-million-row dataset (a
    126 KB gzip upload) took 69 s of it, one of 104,857,600 rows more than 15 minutes."""
    service.settings.max_evaluate_rows = 30
    url = f"/v1/models/{binary[0]}/evaluate"
    labels = np.where(np.arange(31) % 2, 1.0, -1.0)
    over = service.add_dataset(rng_problem(n=31, seed=2), labels)
    r = service.client.post(url, json={"dataset_id": over})
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert "has 31 rows, more than the 30" in detail and "MAX_EVALUATE_ROWS" in detail
    assert "/predictions" in detail
    within = service.add_dataset(rng_problem(n=30, seed=2), labels[:30])
    r = service.client.post(url, json={"dataset_id": within})
    assert r.status_code == 200 and r.json()["n"] == 30, r.text


def test_a_tenant_runs_at_most_its_evaluations_at_once(service, binary, monkeypatch):
    """Evaluate holds a thread of the API's pool (40) while it scores: forty at once from one
    tenant would hold them all, and every other synchronous request would wait. Two run at once (the
    default MAX_EVALUATIONS_PER_TENANT), the third is 429 before any row is read, and the slots
    come back when they end, whatever their answer."""
    import threading

    from app.api import models as model_routes
    from app.services import dataset_scores

    assert service.settings.max_evaluations_per_tenant == 2
    url = f"/v1/models/{binary[0]}/evaluate"
    labels = np.where(np.arange(30) % 2, 1.0, -1.0)
    dataset_id = service.add_dataset(rng_problem(n=30, seed=2), labels)
    inside, release = threading.Semaphore(0), threading.Event()
    scored = []

    def held(model, source):
        scored.append(1)
        inside.release()
        assert release.wait(30)
        return dataset_scores.evaluate(model, source)

    monkeypatch.setattr(model_routes, "evaluate", held)
    answers = []

    def post():
        answers.append(service.client.post(url, json={"dataset_id": dataset_id}))

    threads = [threading.Thread(target=post) for _ in range(2)]
    for thread in threads:
        thread.start()
    for _ in threads:
        assert inside.acquire(timeout=30)
    over = service.client.post(url, json={"dataset_id": dataset_id})
    release.set()
    for thread in threads:
        thread.join(30)
    assert over.status_code == 429, over.text
    assert over.headers["Retry-After"] == "2"
    assert "MAX_EVALUATIONS_PER_TENANT" in over.json()["detail"]
    assert len(scored) == 2  # the refused one read nothing
    assert [a.status_code for a in answers] == [200, 200]
    monkeypatch.setattr(model_routes, "evaluate", dataset_scores.evaluate)
    missing = service.client.post(url, json={"dataset_id": service.add_dataset(
        rng_problem(n=30, seed=2), np.full(30, 7.0))})  # fmt: skip
    assert missing.status_code == 422, missing.text  # a label the model lacks
    for _ in range(3):  # every slot came back, a refused answer's too
        assert service.client.post(url, json={"dataset_id": dataset_id}).status_code == 200


def _model(classes, coef, kind="classifier", calibration=None):
    from app.services.prediction import LinearModel

    return LinearModel("m", kind, classes, coef.shape[1], False, coef, np.zeros(coef.shape[0]),
                       calibration=calibration)  # fmt: skip


def _same_report(chunked: dict, whole: dict) -> None:
    assert chunked.keys() == whole.keys()
    for key, value in whole.items():
        if isinstance(value, float):
            assert chunked[key] == pytest.approx(value, rel=1e-12, abs=1e-15), key
        else:
            assert chunked[key] == value, key


def test_evaluate_sums_its_scores_chunk_by_chunk(tmp_path):
    """evaluate kept every row's label and prediction until the end (a 104,857,600-row dataset:
    1.5-2.2 GB); its scores are now sums over chunks, the same in chunks of 7 rows as in one."""
    from app.services.dataset_scores import evaluate

    rng = np.random.default_rng(8)
    X = sp.csr_matrix(rng.standard_normal((300, 4)))
    coef = rng.standard_normal((3, 4))
    labels = rng.choice([0.0, 1.0, 2.0, 7.0, -5.0], size=300)  # 7 and -5: not the model's
    softmax = {"method": "softmax", "temperature": 2.0}
    target = X @ coef[0] + rng.standard_normal(300)
    names = ["b", "a", "z"]  # text labels, stored as codes; "z" is not a class of the model
    cases = [
        (_model([0, 1, 2], coef, calibration=softmax), labels, None),
        (_model([0, 1, 2], coef), labels, None),
        (_model([], coef[:1], kind="regressor"), target, None),
        (_model(["a", "b", "c"], coef, calibration=softmax), rng.integers(3, size=300), names),
    ]
    for i, (model, y, label_names) in enumerate(cases):
        source = _stored(tmp_path / f"ds{i}", X, np.asarray(y, dtype=np.float64))
        source.label_names = label_names
        whole = evaluate(model, source)
        _same_report(evaluate(model, source, rows=7), whole)
    assert whole["labels"] == ["a", "b", "c", "z"] and whole["n"] == 300


def test_evaluate_holds_a_chunk_not_every_row(tmp_path):
    """200,000 rows in chunks of 1,024: before, 6.4 MB of labels and predictions kept to the
    end (and concatenated); the peak is now a chunk's."""
    n_rows = 200_000
    rng = np.random.default_rng(9)
    X = sp.random(n_rows, 4, density=0.5, format="csr", random_state=9)
    y = np.where(rng.random(n_rows) < 0.5, 1.0, -1.0)
    model = _model([-1, 1], rng.standard_normal((1, 4)))
    source = _stored(tmp_path / "ds", X, y)
    import tracemalloc

    from app.services.dataset_scores import evaluate

    tracemalloc.start()
    try:
        report = evaluate(model, source, rows=1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    predicted = np.where((X @ model.coef.T).ravel() > 0, 1.0, -1.0)
    assert report["accuracy"] == pytest.approx(np.mean(predicted == y), abs=1e-12)
    assert peak < 1 << 20, peak / 2**20


def test_a_table_is_read_by_its_column_names_when_they_are_the_models(service):
    """A CSV holding the model's columns in another order was read by position: evaluate scored
    every row on the wrong features (accuracy 0.0 here, 1.0 by name), as did a prediction run."""
    from tests.app.conftest import finished_run, upload

    model_id = service.add_model([[1.0, 0.0, -1.0]], [0.0], classes=[-1, 1], zero_based=True,
                                 feature_names=["a", "b", "c"])  # fmt: skip
    rows = "label,c,a\n1,0,2\n-1,3,1\n1,-1,0\n"  # by name: a - c = 2, -2, 1
    reordered = upload(service.client, rows.encode(), "r.csv").json()["id"]
    url = f"/v1/models/{model_id}"
    report = service.client.post(f"{url}/evaluate", json={"dataset_id": reordered}).json()
    assert report["accuracy"] == 1.0 and report["ignored_features"] == 0, report
    r = service.client.post(f"{url}/predictions", json={"dataset_id": reordered})
    done = finished_run(service.client, r.headers["location"])
    table = service.client.get(done["result"]).text.splitlines()
    values = [(line.split(",")[1], float(line.split(",")[2])) for line in table[1:]]
    assert values == [("1", 2.0), ("-1", -2.0), ("1", 1.0)], table
    # names that are none of the model's are read in its order, as before
    other = upload(service.client, b"label,x,y,z\n1,2,0,0\n-1,0,0,2\n", "o.csv").json()["id"]
    report = service.client.post(f"{url}/evaluate", json={"dataset_id": other}).json()
    assert report["accuracy"] == 1.0, report
    # some of the model's names and one that is not: refused, naming it, and no run made
    mixed = upload(service.client, b"label,a,zz\n1,2,0\n", "m.csv").json()["id"]
    for route in ("evaluate", "predictions"):
        r = service.client.post(f"{url}/{route}", json={"dataset_id": mixed})
        assert r.status_code == 422 and "'zz'" in r.json()["detail"], r.text
