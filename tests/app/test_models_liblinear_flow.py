"""A real dataset through the service: heart_scale uploaded over HTTP, a model trained by
LIBLINEAR (the independent reference) stored as a model row, then every model route checked
against LIBLINEAR's own predictions on the same file; and models of `solvers.LinearSVC` stored as
the trainer stores them, checked against the estimator's own predictions."""

from __future__ import annotations

import csv
import io

import numpy as np
import pytest
from liblinear import liblinearutil

from app.services.model_store import pack_weights
from app.tables import Model, new_id
from tests.app.conftest import HEART, finished_run


@pytest.fixture
def trained(app, client, heart):
    """(model id, LIBLINEAR model, labels and decision values LIBLINEAR predicts on the file)."""
    y, x = liblinearutil.svm_read_problem(str(HEART))
    lm = liblinearutil.train(y, x, "-s 1 -B 1 -c 0.5 -q")
    labels, _, values = liblinearutil.predict(y, x, lm, "-q")
    order = lm.get_labels()  # LIBLINEAR scores its first label; ours scores classes[1]
    n = lm.get_nr_feature()
    coef = np.array([[lm.get_decfun_coef(f) for f in range(1, n + 1)]])
    intercept = np.array([lm.get_decfun_bias()])
    model_id = new_id("model")
    with app.state.db.write() as session:
        session.add(
            Model(
                id=model_id,
                dataset_id=heart["id"],
                estimator="LinearSVC",
                params={"loss": "squared_hinge"},
                kind="classifier",
                classes=[order[1], order[0]],
                n_features=n,
                zero_based=False,
                weights=pack_weights(coef, intercept),
                status="converged",
                gap=0.0,
                n_iter=1,
                train_time_s=0.0,
            )
        )
    return model_id, lm, np.array(labels), np.array(values)[:, 0], y


def test_predict_the_file_lines_as_liblinear_does(client, trained):
    model_id, _, labels, values, _ = trained
    r = client.post(
        f"/v1/models/{model_id}/predict",
        content=HEART.read_bytes(),
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == labels.tolist()
    np.testing.assert_allclose(
        np.array(r.json()["decision_values"])[:, 0], values, rtol=1e-9, atol=1e-12
    )


def test_evaluate_and_predictions_on_the_uploaded_dataset(client, heart, trained):
    model_id, _, labels, _, y = trained
    report = client.post(f"/v1/models/{model_id}/evaluate", json={"dataset_id": heart["id"]}).json()
    assert report["n"] == len(y)
    assert report["accuracy"] == pytest.approx(np.mean(labels == np.array(y)))
    assert np.trace(report["confusion_matrix"]) == int(np.sum(labels == np.array(y)))

    location = client.post(
        f"/v1/models/{model_id}/predictions", json={"dataset_id": heart["id"]}
    ).headers["location"]
    finished_run(client, location)
    rows = list(csv.reader(io.StringIO(client.get(location).text)))[1:]
    assert [float(r[1]) for r in rows] == labels.tolist()


def test_exported_file_reloads_into_liblinear_with_the_same_predictions(client, trained, tmp_path):
    model_id, _, labels, values, _ = trained
    path = tmp_path / "heart.model"
    path.write_text(client.get(f"/v1/models/{model_id}/export").text)
    y, x = liblinearutil.svm_read_problem(str(HEART))
    again, _, again_values = liblinearutil.predict(y, x, liblinearutil.load_model(str(path)), "-q")
    assert again == labels.tolist()
    np.testing.assert_allclose(np.array(again_values)[:, 0], values, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer", "weston_watkins"])
@pytest.mark.parametrize("n_classes", [2, 3])
def test_stored_estimators_predict_as_the_estimator_does(app, client, multi_class, n_classes):
    """Weights stored as the trainer stores them (coef_, intercept_, classes_) give the
    estimator's own labels and decision values through the endpoint."""
    import solvers
    from solvers.io import load_libsvm

    data = load_libsvm(str(HEART))
    y = data.y if n_classes == 2 else np.where(data.X[:, 0].toarray().ravel() > 0.3, 3, data.y)
    estimator = solvers.LinearSVC(multi_class=multi_class).fit(data.X, y)
    model_id = new_id("model")
    with app.state.db.write() as session:
        session.add(
            Model(
                id=model_id,
                estimator="LinearSVC",
                params={"multi_class": multi_class},
                kind="classifier",
                classes=estimator.classes_.tolist(),
                n_features=data.n_features,
                zero_based=data.zero_based,
                weights=pack_weights(estimator.coef_, estimator.intercept_),
                status=str(estimator.status_),
                gap=0.0,
                n_iter=1,
                train_time_s=0.0,
            )
        )
    r = client.post(
        f"/v1/models/{model_id}/predict",
        content=HEART.read_bytes(),
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == estimator.predict(data.X).tolist()
    decision = estimator.decision_function(data.X)
    np.testing.assert_allclose(
        np.array(r.json()["decision_values"]).reshape(decision.shape),
        decision,
        rtol=1e-10,
        atol=1e-12,
    )
