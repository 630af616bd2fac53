"""Running jobs with run_job, on SQLite and PostgreSQL: progress records and their pages, percent
and ETA, the SSE stream, the stored model (from a stand-in trainer, and from the real solvers,
whose stored weights equal a direct call's), the validation set scored in the training
numbering, and finished jobs that outlive their dataset."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from app.jobs.runner import run_job
from app.services.model_store import unpack_weights
from app.tables import Model
from tests.app.conftest import upload
from tests.app.job_helpers import STRUCTURAL, context, count

pytestmark = pytest.mark.timeout(120)


def test_run_job_records_progress_and_stores_the_model(app, client, db, heart, fake_trainer):
    fake = fake_trainer(n_iter=6)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 2e-4}}).json()
    assert run_job(job["id"], context(app, worker_id="test:1")) == "succeeded"
    assert run_job(job["id"], context(app)) is None  # already done: not run twice
    assert fake.calls == 1
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded" and done["stop_reason"] == "converged"
    assert done["converged"] is True and done["percent"] == 100.0 and done["attempt"] == 1
    assert done["started_at"] <= done["finished_at"] and done["error"] is None
    records = client.get(f"/v1/jobs/{job['id']}/progress").json()["items"]
    assert [r["iteration"] for r in records] == [1, 2, 3, 4, 5]
    gaps = [r["gap"] for r in records]
    assert gaps == sorted(gaps, reverse=True) and records[0]["pg_max"] == gaps[0] / 2
    # the explicit names travel with every record, stored and served
    assert [r["pg_range"] for r in records] == gaps
    assert [r["duality_gap"] for r in records] == pytest.approx([g / 100 for g in gaps])
    assert records[0]["max_violation"] is None
    assert done["progress"] == records[-1]
    page = client.get(f"/v1/jobs/{job['id']}/progress?limit=2").json()
    assert len(page["items"]) == 2 and page["next"]
    with db.session() as session:
        model = session.get(Model, done["model_id"])
        coef, intercept = unpack_weights(model.weights)
    assert model.job_id == job["id"] and model.classes == [-1.0, 1.0] and model.kind == "classifier"
    assert (model.n_features, model.zero_based) == (13, False)
    assert coef.shape == (1, 13) and intercept.tolist() == [0.5]
    assert model.train_accuracy is not None and model.n_iter == 5


@pytest.mark.parametrize(
    "position", ["\u00b2", "\u0663", str(2**63), "9" * 30, "9" * 5000, "-1", " 1"]
)
def test_a_forged_progress_cursor_is_a_422(app, client, heart, fake_trainer, position):
    """Superscript and Arabic-Indic digits pass str.isdigit but not int; ids past the
    BIGINT column overflow the database's parameter (both were 500s)."""
    import base64

    fake_trainer(n_iter=4)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 2e-4}}).json()
    assert run_job(job["id"], context(app)) == "succeeded"
    cursor = base64.urlsafe_b64encode(position.encode()).decode().rstrip("=")
    answer = client.get(f"/v1/jobs/{job['id']}/progress", params={"cursor": cursor})
    assert answer.status_code == 422, answer.text
    assert answer.json()["title"] == "Invalid cursor"
    largest = base64.urlsafe_b64encode(str(2**63 - 1).encode()).decode().rstrip("=")  # BIGINT's
    page = client.get(f"/v1/jobs/{job['id']}/progress", params={"cursor": largest})
    assert page.status_code == 200 and page.json()["items"] == []


def test_percent_and_eta_while_running(app, client, heart, fake_trainer):
    fake_trainer(n_iter=8, delay=0.05)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-9}}).json()
    seen = []
    runner = threading.Thread(target=run_job, args=(job["id"], context(app)))
    runner.start()
    while runner.is_alive():
        seen.append(client.get(f"/v1/jobs/{job['id']}").json())
        time.sleep(0.02)
    running = [s for s in seen if s["status"] == "running" and s["progress"]]
    assert running, "never saw the job running with progress"
    percents = [s["percent"] for s in running]
    assert percents == sorted(percents) and 0 < percents[-1] < 100
    assert all(s["eta_s"] is None or s["eta_s"] >= 0 for s in running)
    done = client.get(f"/v1/jobs/{job['id']}").json()
    assert done["status"] == "succeeded" and done["stop_reason"] == "max_iter"


def test_events_stream_progress_then_end(app, client, heart, fake_trainer):
    fake_trainer(n_iter=4)
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"], "params": {"tol": 1e-9}}).json()
    run_job(job["id"], context(app))
    with client.stream("GET", f"/v1/jobs/{job['id']}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    events = [block for block in text.replace("\r\n", "\n").split("\n\n") if block.strip()]
    kinds = [
        line.split(": ", 1)[1]
        for b in events
        for line in b.split("\n")
        if line.startswith("event:")
    ]
    assert kinds == ["progress"] * 4 + ["end"]
    first = json.loads(events[0].split("data: ", 1)[1])
    assert first["pg_range"] == first["gap"] and first["pg_max"] == first["gap"] / 2
    assert first["duality_gap"] == pytest.approx(first["gap"] / 100)
    last = json.loads(events[-1].split("data: ", 1)[1])
    assert last["status"] == "succeeded"


def test_validation_dataset_is_scored_in_the_training_numbering(app, client, db, fake_trainer):
    fake_trainer()
    train = upload(client, b"1 1:1 2:1\n-1 3:1\n1 1:2\n-1 3:2\n").json()
    # zero-based ids of the same features would be a 422; a wider one-based file is cut to size
    zero = upload(client, b"1 0:1\n-1 2:1\n").json()
    response = client.post(
        "/v1/jobs", json={"dataset_id": train["id"], "validation_dataset_id": zero["id"]}
    )
    assert response.status_code == 422 and "index 0" in response.json()["detail"]
    wide = upload(client, b"1 1:1 9:5\n-1 3:1\n").json()
    job = client.post(
        "/v1/jobs", json={"dataset_id": train["id"], "validation_dataset_id": wide["id"]}
    ).json()
    assert run_job(job["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job['id']}").json()
    with db.session() as session:
        model = session.get(Model, done["model_id"])
    # fake weights w = (0, 0.1, 0.2) and intercept 0.5: both validation rows score > 0 -> label 1
    assert model.validation_accuracy == 0.5 and model.train_accuracy == 0.5


def test_deleting_a_dataset_keeps_finished_jobs_and_models(app, client, db, heart, fake_trainer):
    fake_trainer()
    job = client.post("/v1/jobs", json={"dataset_id": heart["id"]}).json()
    run_job(job["id"], context(app))
    assert client.delete(f"/v1/datasets/{heart['id']}").status_code == 204
    kept = client.get(f"/v1/jobs/{job['id']}").json()
    assert kept["dataset_id"] is None and kept["model_id"] is not None
    assert count(db, Model) == 1


def test_align_columns_renumbers_between_index_bases():
    import numpy as np
    import scipy.sparse as sp

    from app.services.dataset_files import align_columns

    # raw indices 1 and 3 in a one-based file are columns 0 and 2
    X = sp.csr_matrix((np.array([1.0, 2.0]), np.array([0, 2]), np.array([0, 2])), shape=(1, 3))
    as_zero = align_columns(X, zero_based=False, to_zero_based=True, to_n_features=4)
    assert as_zero.toarray().tolist() == [[0.0, 1.0, 0.0, 2.0]]
    cut = align_columns(X, zero_based=False, to_zero_based=False, to_n_features=2)
    assert cut.toarray().tolist() == [[1.0, 0.0]]
    Z = sp.csr_matrix(np.array([[5.0, 0.0, 1.0]]))
    with pytest.raises(ValueError, match="index 0"):
        align_columns(Z, zero_based=True, to_zero_based=False, to_n_features=3)


@pytest.mark.parametrize(
    ("estimator", "params", "content"),
    [
        ("LinearSVC", {"C": 0.5, "loss": "hinge"}, None),
        (
            "LinearSVC",
            {"multi_class": "crammer_singer"},
            b"1 1:1\n2 2:1\n3 3:1\n1 1:0.9\n2 2:1.1\n3 3:0.8\n",
        ),
        ("LinearSVR", {"epsilon": 0.1}, None),
        ("structural", {"C": 2.0}, STRUCTURAL),
    ],
    ids=["svc-binary", "svc-crammer-singer", "svr", "structural"],
)
def test_real_trainers_store_what_the_solver_returns(
    app, client, db, heart, estimator, params, content
):
    """run_job with the real solvers: the stored weights equal a direct call's."""
    import numpy as np

    import solvers
    from app.services.datasets import load_dataset
    from app.tables import Dataset

    dataset = heart if content is None else upload(client, content).json()
    job = client.post(
        "/v1/jobs", json={"dataset_id": dataset["id"], "estimator": estimator, "params": params}
    )
    assert job.status_code == 202, job.text
    assert run_job(job.json()["id"], context(app)) == "succeeded"
    done = client.get(f"/v1/jobs/{job.json()['id']}").json()
    with db.session() as session:
        model = session.get(Model, done["model_id"])
        X, y, qid = load_dataset(app.state.settings, session.get(Dataset, dataset["id"]))
    coef, intercept = unpack_weights(model.weights)
    if estimator == "structural":
        expected = solvers.fit_structural(X, y, qid, **params).w
        kind = "regressor"
    else:
        direct = getattr(solvers, estimator)(**params).fit(X, y)
        expected = direct.coef_
        kind = "classifier" if estimator == "LinearSVC" else "regressor"
        np.testing.assert_allclose(intercept, np.ravel(direct.intercept_), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(coef, np.atleast_2d(expected), rtol=1e-10, atol=1e-12)
    assert model.kind == kind and model.estimator == estimator
    assert done["progress"] is not None and model.n_iter >= 1


def test_accuracies_are_computed_a_slice_of_rows_at_a_time():
    """A 1.5 MB upload of 120,000 rows of 1,000 classes trained, then its job failed computing
    the training accuracy ("Unable to allocate 916. MiB": every row's decision values at once,
    and copies). The validation accuracy was computed the same way, for a set of any size.
    They are computed SCORE_ENTRIES decision values at a time."""
    from types import SimpleNamespace

    import numpy as np
    import scipy.sparse as sp

    from app.services import dataset_source
    from solvers import LinearSVC

    classes, n_rows = 500, 40_000  # all rows at once: 40,000 x 500 x 8 bytes = 160 MB
    rng = np.random.default_rng(0)
    few = sp.random(2 * classes, 5, density=1.0, random_state=rng, format="csr")
    model = LinearSVC(max_iter=2).fit(few, np.arange(2 * classes) % classes)
    X = sp.random(n_rows, 5, density=1.0, random_state=rng, format="csr")
    y = rng.integers(classes, size=n_rows).astype(np.float64)
    trained = SimpleNamespace(classes=list(range(classes)), predict=model.predict)
    expected = float(np.mean(model.predict(X) == y))
    accuracy, peak = _accuracy_and_peak(trained, X, y)
    assert accuracy == expected and 0 < accuracy < 0.05
    assert peak < 4 * dataset_source.SCORE_ENTRIES * 8  # 32 MB


def test_accuracies_slice_wide_rows_by_their_stored_entries():
    """The slice was SCORE_ENTRIES // classes rows whatever the rows held: two classes made it
    524,288 rows, and slicing copies them (12 bytes a stored entry), so dense rows of 500
    features copied 3 GB at once. Each slice now holds about SCORE_ENTRIES entries."""
    from types import SimpleNamespace

    import numpy as np
    import scipy.sparse as sp

    from app.services import dataset_source
    from solvers import LinearSVC

    n_rows, width = 12_000, 500  # 6 million entries: 72 MB as CSR, copied whole before
    rng = np.random.default_rng(1)
    indptr = np.arange(0, n_rows * width + 1, width, dtype=np.int64)
    indices = np.tile(np.arange(width, dtype=np.int32), n_rows)
    X = sp.csr_matrix((rng.standard_normal(n_rows * width), indices, indptr), (n_rows, width))
    y = np.where(X[:, 0].toarray().ravel() > 0, 1.0, -1.0)
    model = LinearSVC(max_iter=50).fit(X[:400], y[:400])
    trained = SimpleNamespace(classes=[-1, 1], predict=model.predict)
    expected = float(np.mean(model.predict(X) == y))
    accuracy, peak = _accuracy_and_peak(trained, X, y)
    assert accuracy == expected and accuracy > 0.6
    assert peak < 4 * dataset_source.SCORE_ENTRIES * 8, peak / 2**20  # 32 MB


def test_a_search_whose_fold_gap_overflows_stores_its_model_with_null_gaps(app, client):
    """C 1e300 on values of 1e99 (each accepted) overflows the folds' objectives: the C after
    the first, warm-started, reports a NaN duality gap. The selection table held it, and
    PostgreSQL's json refused the NaN: the job failed as it stored its model ("Token NaN is
    invalid"). A gap that is not finite is stored, and shown, as null."""
    rng = np.random.default_rng(0)
    rows = "".join(f"{1 if i % 2 else -1} 1:{rng.standard_normal() * 1e99!r} "
                   f"2:{rng.standard_normal() * 1e99!r}\n" for i in range(60))  # fmt: skip
    dataset = upload(client, rows.encode()).json()
    params = {"max_iter": 20, "search": {"Cs": [1e250, 1e300], "cv": 3}}
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"], "params": params}).json()
    assert run_job(job["id"], context(app)) == "succeeded"
    model_id = client.get(f"/v1/jobs/{job['id']}").json()["model_id"]
    model = client.get(f"/v1/models/{model_id}").json()
    gaps = [g for row in model["selection"]["table"] for g in row["duality_gap"]]
    assert None in gaps  # the overflowed folds
    assert all(g is None or np.isfinite(g) for g in [*gaps, model["duality_gap"], model["gap"]])


def _accuracy_and_peak(trained, X, y) -> tuple[float, int]:
    """The job runner's accuracy of ``trained`` on (X, y), and the peak bytes it allocated."""
    import tracemalloc

    from app.jobs import runner

    tracemalloc.start()
    try:
        accuracy = runner._accuracy(trained, X, y)
        return accuracy, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
