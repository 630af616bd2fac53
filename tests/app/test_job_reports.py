"""What jobs and models report: labels of the dataset's own type, and a percent that never moves
back while the gap goes up and down."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest

from app.jobs import attempt as attempt_module
from app.jobs.runner import RunContext, run_job
from app.services import trainers
from app.tables import Job
from tests.app.conftest import finished_run


def _train(app, client, dataset_id, **params):
    job = client.post("/v1/jobs", json={"dataset_id": dataset_id, "params": params}).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    return client.get(f"/v1/jobs/{job['id']}").json()


def test_predicted_labels_keep_the_datasets_integer_type(app, client, heart):
    job = _train(app, client, heart["id"], C=1.0)
    model = client.get(f"/v1/models/{job['model_id']}").json()
    assert model["classes"] == [-1, 1] and all(type(c) is int for c in model["classes"])
    predicted = client.post(
        f"/v1/models/{job['model_id']}/predict",
        json={"instances": [{"indices": [1, 3], "values": [0.5, -1]}]},
    )
    assert predicted.status_code == 200
    assert predicted.text.startswith('{"labels":[1]') or predicted.text.startswith(
        '{"labels":[-1]'
    ), predicted.text  # "-1", not "-1.0"
    run = client.post(
        f"/v1/models/{job['model_id']}/predictions", json={"dataset_id": heart["id"]}
    )
    assert finished_run(client, run.headers["Location"])["status"] == "succeeded"
    rows = list(csv.reader(io.StringIO(client.get(run.headers["Location"]).text)))
    assert {r[1] for r in rows[1:]} <= {"-1", "1"}


def test_a_model_stored_with_float_classes_predicts_integer_labels():
    from app.services.model_cache import model_from_row
    from app.services.model_store import pack_weights
    from app.services.prediction import predict_payload
    from app.tables import Model

    row = Model(  # a row as stored, not added to a session
        id="m", kind="classifier", classes=[-1.0, 1.0], n_features=2, zero_based=False,
        weights=pack_weights(np.array([[1.0, 0.0]]), np.array([0.0])),
        estimator="LinearSVC", params={}, tenant="local", feature_names=None, calibration=None,
    )  # fmt: skip
    labels = predict_payload(model_from_row(row), np.array([[2.0, 0.0], [-2.0, 0.0]]))["labels"]
    assert labels == [1, -1] and all(type(v) is int for v in labels)


class BumpyGap:
    """Reports a gap that rises in the middle (as one-vs-rest moving to its next class does)."""

    GAPS = [10.0, 1.0, 0.1, 5.0, 2.0, 0.05, 0.02, 0.001]

    def __call__(self, params, X, y, qid, callback, n_jobs):
        from solvers import Progress

        for it, gap in enumerate(self.GAPS, start=1):
            callback(
                Progress(it, 0.01 * it, gap, pg_max=gap, pg_min=-gap, pg_range=2 * gap, active=1)
            )
        coef = np.zeros((1, X.shape[1]))
        return trainers.Trained(
            kind="classifier", classes=[-1, 1], coef=coef, intercept=np.zeros(1),
            status="converged", gap=0.001, n_iter=len(self.GAPS),
            predict=lambda Z: np.ones(Z.shape[0]),
        )  # fmt: skip


def test_percent_never_moves_back(app, client, heart, fake_trainer, monkeypatch):
    fake_trainer()
    monkeypatch.setitem(trainers.TRAINERS, "LinearSVC", BumpyGap())
    monkeypatch.setattr(attempt_module.Recorder, "objective_every", 1)
    app.state.settings.progress_interval_s = 0  # a write for every report
    written = []
    original = attempt_module.lifecycle.update_running

    def spy(session, attempt, **fields):
        if "percent" in fields:
            written.append(fields["percent"])
        return original(session, attempt, **fields)

    monkeypatch.setattr(attempt_module.lifecycle, "update_running", spy)
    job = _train(app, client, heart["id"], tol=0.001)
    assert len(written) >= 5, written
    assert written == sorted(written), written  # before: 67 % fell back to 10 % at gap 5
    assert written[2] == pytest.approx(100.0 * np.log(10 / 0.1) / np.log(10 / 0.001))
    assert job["percent"] == 100.0
    with app.state.db.session() as session:
        assert session.get(Job, job["id"]).percent == 100.0
