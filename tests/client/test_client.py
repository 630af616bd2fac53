"""The Python client against a real `margin serve` over HTTP."""

from __future__ import annotations

import csv
import gzip
import io
import json
import time

import numpy as np
import pytest
import scipy.sparse as sp
from rich.console import Console

import solvers
from margin_client import Client, JobFailed, MarginError, RemoteLinearSVC
from margin_client.progress import follow
from solvers.io import read_libsvm
from tests.client.conftest import HEART, MAX_PREDICT_BATCH, SLOW_PARAMS


def test_file_upload_streams_compressed_files_and_round_trips(client, tmp_path):
    packed = tmp_path / "heart.gz"
    packed.write_bytes(gzip.compress(HEART.read_bytes()))
    seen = []
    dataset = client.datasets.upload(packed, name="heart-gz", on_bytes=seen.append)
    assert sum(seen) == packed.stat().st_size
    assert (dataset["n_rows"], dataset["n_features"], dataset["name"]) == (270, 13, "heart-gz")
    assert client.datasets.get(dataset["id"]) == dataset
    assert dataset["id"] in [d["id"] for d in client.datasets.list()]
    stats = client.datasets.stats(dataset)
    assert sum(stats["row_nnz"]["counts"]) == 270 and stats["density"] == pytest.approx(
        3378 / (270 * 13)
    )
    client.datasets.delete(dataset)
    with pytest.raises(MarginError) as info:
        client.datasets.get(dataset["id"])
    assert info.value.status == 404 and info.value.title == "Dataset not found"
    assert dataset["id"] in info.value.detail


def test_errors_carry_the_problem_document(client, heart_dataset):
    with pytest.raises(MarginError) as info:
        client.jobs.create(heart_dataset, C=-1)
    error = info.value
    assert error.status == 422
    assert error.problem["status"] == 422
    assert [e["field"] for e in error.errors] == ["params.C"]
    assert "params.C" in str(error)


def test_remote_estimator_equals_the_local_solver(client):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 12))
    y = np.where(X @ rng.normal(size=12) + 0.3 * rng.normal(size=300) > 0, 1, -1)
    params = {"C": 0.5, "tol": 1e-6, "loss": "squared_hinge"}
    remote = RemoteLinearSVC(client, **params).fit(X, y)
    local = solvers.LinearSVC(**params).fit(X, y)
    assert remote.status_ == "converged"
    np.testing.assert_allclose(remote.coef_, local.coef_, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(remote.decision_function(X), local.decision_function(X),
                               rtol=1e-9, atol=1e-12)
    assert np.array_equal(remote.predict(X), local.predict(X))
    assert remote.score(X, y) == pytest.approx(local.score(X, y))
    assert list(remote.classes_) == [-1, 1]
    from sklearn.base import clone

    twin = clone(remote)
    assert twin.client is client and twin.get_params()["C"] == 0.5


def test_remote_estimator_with_text_labels_equals_the_local_solver(client):
    """Text labels are sent as a unicode y: the classes, predictions and score are the names."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(150, 5))
    y = np.array(["setosa", "versicolor", "virginica"], dtype=object)[
        (X @ rng.normal(size=(5, 3))).argmax(axis=1)]
    params = {"C": 0.5, "tol": 1e-6}
    remote = RemoteLinearSVC(client, **params).fit(X, y)
    local = solvers.LinearSVC(**params).fit(X, y.astype(str))
    assert list(remote.classes_) == list(local.classes_) == ["setosa", "versicolor", "virginica"]
    np.testing.assert_allclose(remote.decision_function(X), local.decision_function(X),
                               rtol=1e-9, atol=1e-12)
    assert remote.predict(X).tolist() == local.predict(X).tolist()
    assert remote.score(X, y) == pytest.approx(local.score(X, y.astype(str)))


def test_predict_takes_every_input_form_and_batches_under_the_limit(client, heart_model):
    X, _ = read_libsvm(str(HEART))
    lines = [line for line in HEART.read_text().splitlines() if line.strip()]
    weights = client.models.export(heart_model, format="json")
    coef, intercept = np.asarray(weights["coef"]), np.asarray(weights["intercept"])
    expected = (X @ coef.T + intercept)[:, 0]  # an independent decision: X . w + b
    dicts = [{int(k): float(v) for k, v in (t.split(":") for t in line.split()[1:])}
             for line in lines]
    assert X.shape[0] > MAX_PREDICT_BATCH  # one request would be refused (413)
    for form in (X, X.toarray(), dicts, lines, "\n".join(lines)):
        result = client.models.predict(heart_model, form)
        np.testing.assert_allclose(result.decision_values[:, 0], expected, rtol=1e-12)
        assert np.array_equal(result.labels, np.where(expected > 0, 1.0, -1.0))


class _CountedRow(dict):
    """A {feature index: value} row that counts how often its keys are walked."""

    def __init__(self, *args):
        super().__init__(*args)
        self.walked = 0

    def __iter__(self):
        self.walked += 1
        return super().__iter__()


def test_predict_looks_at_index_dicts_once_not_once_per_batch(client, heart_model):
    # before: every batch asked whether any row of the whole list was keyed by name, so that
    # n rows in batches of b were walked n / b times each (100,000 rows of 20 features in
    # batches of 1,000: 40 s of the client's time before the first answer counted)
    lines = [line for line in HEART.read_text().splitlines() if line.strip()]
    rows = [_CountedRow({int(k): float(v) for k, v in (t.split(":") for t in line.split()[1:])})
            for line in lines]  # fmt: skip
    expected = client.models.predict(heart_model, lines).decision_values
    result = client.models.predict(heart_model, rows, batch_size=10)
    np.testing.assert_allclose(result.decision_values, expected, rtol=1e-12)
    assert max(row.walked for row in rows) == 1


def test_events_follow_the_job_and_the_bar_draws_the_gap(client, heart_dataset):
    job = client.jobs.create(heart_dataset, C=1.0, tol=1e-3)
    records = list(job.events())
    assert job.status == "succeeded" and job.model_id
    iterations = [r["iteration"] for r in records]
    assert iterations == sorted(iterations) and len(records) >= 5
    assert records[-1]["gap"] < records[0]["gap"]
    model = client.models.get(job.model_id)
    assert model["status"] == "converged" and model["gap"] <= 1e-3
    # the bar, drawn into a terminal-like console, from a fresh handle on the finished job
    out = io.StringIO()
    follow(client.jobs.get(job.id), Console(file=out, force_terminal=True, width=140))
    text = out.getvalue()
    assert "━" in text and "100%" in text and "gap" in text and "succeeded" in text
    assert f"iter {iterations[-1]}" in text


def test_a_search_jobs_event_stream_carries_its_path_over_http(service, heart_dataset):
    """The raw Server-Sent Events of a search job, read off the socket while it runs: every
    `progress` event says where on the path it is, beside the solve's gap and the path's
    percent (before: the gap and the solver's fields alone)."""
    import json

    import httpx

    Cs, folds = [0.01, 0.1, 1.0], 3
    with httpx.Client(base_url=service.url, timeout=60) as http:
        job = http.post("/v1/jobs", json={"dataset_id": heart_dataset, "params": {
            "tol": 1e-4, "search": {"Cs": Cs, "cv": folds}}}).json()  # fmt: skip
        events, kind, data = [], None, []
        with http.stream("GET", f"/v1/jobs/{job['id']}/events") as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            for line in stream.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("data:"):
                    data.append(line[5:].strip())
                elif not line and kind:  # a blank line ends the event
                    events.append((kind, json.loads("\n".join(data))))
                    kind, data = None, []
    progress = [body for kind, body in events if kind == "progress"]
    assert events[-1][0] == "end" and events[-1][1]["status"] == "succeeded"
    assert events[-1][1]["percent"] == 100.0
    total = len(Cs) * folds + 1
    for r in progress:
        assert r["gap"] is not None and r["solves_total"] == total
        assert r["percent"] == pytest.approx(100 * r["solves_done"] / total)
        if r["stage"] == "path":
            assert (r["folds_total"], r["cs_total"]) == (folds, len(Cs))
            assert 0 <= r["fold"] < folds and r["C"] == Cs[r["c_index"]]
        else:
            assert r["stage"] == "refit" and r["fold"] is None and r["C"] in Cs
    assert {(r["fold"], r["c_index"]) for r in progress if r["stage"] == "path"} == {
        (f, c) for f in range(folds) for c in range(len(Cs))}
    assert progress[-1]["stage"] == "refit"


def test_cancel_a_running_job(client, slow_dataset):
    job = client.jobs.create(slow_dataset, params=SLOW_PARAMS)
    seen = 0
    for _record in job.events():
        seen += 1
        if seen == 3:
            job.cancel()
    assert seen >= 3
    assert job.refresh().status == "cancelled"
    with pytest.raises(JobFailed):
        job.wait(check=True)


def test_jobs_and_models_listing_export_and_evaluate(client, heart_dataset, heart_model):
    listed = client.jobs.list(dataset=heart_dataset, status="succeeded")
    assert listed and all(j["status"] == "succeeded" for j in listed)
    assert heart_model in [m["id"] for m in client.models.list(dataset=heart_dataset)]
    model = client.models.get(heart_model)
    text = client.models.export(heart_model)
    assert text.startswith("solver_type ") and f"nr_feature {model['n_features']}" in text
    report = client.models.evaluate(heart_model, heart_dataset)
    assert report["n"] == 270 and report["accuracy"] == pytest.approx(model["train_accuracy"])
    top = client.models.top_features(heart_model, k=3)
    weights = np.abs(np.asarray(client.models.export(heart_model, format="json")["coef"][0]))
    assert [abs(w["weight"]) for w in top["items"]] == pytest.approx(sorted(weights)[::-1][:3])


def test_binary_exports_come_back_as_bytes_that_load(client, heart_model):
    # before: an ONNX graph came back as text decoded from its bytes, which no runtime reads
    import onnxruntime

    X, _ = read_libsvm(str(HEART), n_features=13, zero_based=False)
    expected = client.models.predict(heart_model, X).labels
    graph = client.models.export(heart_model, format="onnx")
    assert isinstance(graph, bytes)
    session = onnxruntime.InferenceSession(graph, providers=["CPUExecutionProvider"])
    labels = session.run(["label"], {"input": X.toarray()})[0]
    np.testing.assert_array_equal(labels.ravel(), expected)


def test_predict_with_probabilities_follows_the_exported_calibration(
    client, heart_dataset, heart_model, tmp_path
):
    # before: the client had no way to ask for probabilities
    job = client.jobs.create(heart_dataset, C=0.5, tol=1e-3, probability=True).wait(check=True)
    lines = HEART.read_text().splitlines()
    result = client.models.predict(job.model_id, lines, batch_size=100, probabilities=True)
    sigmoid = client.models.export(job.model_id, format="json")["calibration"]
    d = result.decision_values[:, 0]
    positive = 1.0 / (1.0 + np.exp(sigmoid["A"][0] * d + sigmoid["B"][0]))
    np.testing.assert_allclose(result.probabilities, np.column_stack([1 - positive, positive]))
    assert client.models.predict(job.model_id, lines).probabilities is None
    with pytest.raises(MarginError) as info:
        client.models.predict(heart_model, lines[:1], probabilities=True)
    assert info.value.status == 422 and "calibration" in info.value.problem["detail"]
    # a background run writes the same probabilities, a column per class (it ignored the ask)
    run = client.runs.start(job.model_id, heart_dataset, probabilities=True)
    while client.runs.get(job.model_id, run["id"])["status"] in ("queued", "running"):
        time.sleep(0.1)
    rows = list(csv.reader(io.StringIO(
        client.runs.download(job.model_id, run["id"], tmp_path / "p.csv").read_text()
    )))  # fmt: skip
    assert rows[0] == ["row", "label", "decision_value", "probability_-1", "probability_1"]
    written = np.array([[float(v) for v in row[3:]] for row in rows[1:]])
    np.testing.assert_allclose(written, result.probabilities, rtol=1e-12)
    with pytest.raises(MarginError) as info:
        client.runs.start(heart_model, heart_dataset, probabilities=True)
    assert info.value.status == 422 and "calibration" in info.value.problem["detail"]


def test_api_keys_from_arguments_and_environment(keyed_service, monkeypatch):
    with Client(keyed_service.url) as anonymous, pytest.raises(MarginError) as info:
        anonymous.datasets.list()
    assert info.value.status == 401
    with Client(keyed_service.url, api_key="mgn_wrong") as wrong, pytest.raises(MarginError):
        wrong.datasets.list()
    monkeypatch.setenv("MARGIN_URL", keyed_service.url)
    monkeypatch.setenv("MARGIN_API_KEY", keyed_service.key)
    with Client() as keyed:
        dataset = keyed.datasets.upload((sp.eye(4, format="csr"), [1, -1, 1, -1]))
        assert keyed.datasets.get(dataset["id"])["n_features"] == 4


def test_wait_returns_after_the_end(client, heart_dataset):
    start = time.monotonic()
    job = client.jobs.create(heart_dataset, C=2.0).wait()
    assert job.done and job.status == "succeeded" and time.monotonic() - start < 60


def test_ids_are_one_path_segment_and_redirects_are_errors(client, heart_dataset):
    with pytest.raises(ValueError, match="dataset id must be a non-empty string"):
        client.datasets.delete("")
    with pytest.raises(MarginError) as info:  # encoded: not ../datasets/<id> resolved to it
        client.datasets.get(f"x/../{heart_dataset}")
    assert info.value.status == 404
    with pytest.raises(MarginError) as info:  # the API never redirects: a 3xx is an error
        client.request("GET", "/")
    assert info.value.status == 307


@pytest.mark.parametrize("ident", [".", ".."])
def test_a_dot_segment_id_names_no_other_resource(client, heart_dataset, ident):
    """httpx resolves the dot segments of a path: ``/v1/datasets/.`` was the list of datasets,
    answered as if it were one."""
    with pytest.raises(MarginError) as info:
        client.datasets.get(ident)
    assert info.value.status == 404


def test_downloads_are_streamed_into_their_file(client, heart_model, heart_dataset, tmp_path):
    # an export or a run's CSV is written to its file as it arrives (the whole body was held
    # in memory first), whole or not at all
    exported = client.models.export(heart_model, format="json", path=tmp_path / "m.json")
    assert json.loads(exported.read_text()) == client.models.export(heart_model, format="json")
    run = client.runs.start(heart_model, heart_dataset)
    while client.runs.get(heart_model, run["id"])["status"] in ("queued", "running"):
        time.sleep(0.1)
    csv = client.runs.download(heart_model, run["id"], tmp_path / "p.csv")
    rows = csv.read_text().splitlines()
    assert len(rows) == 271 and rows[0].startswith("row,label")
    with pytest.raises(MarginError) as refused:
        client.models.export(heart_model, format="pickle", path=tmp_path / "x")
    assert refused.value.status == 422 and not list(tmp_path.glob("x*"))


def test_following_a_queued_job_says_why_it_waits():
    """A job queued while no worker was warm yet drew an empty bar with no hint why."""

    class QueuedJob:
        id, status = "job_1", "queued"
        info = {"id": "job_1", "status": "queued", "params": {"tol": 0.1},
                "waiting": "no worker is ready yet: workers compile the kernels"}

        def events(self):
            return iter(())

    out = io.StringIO()
    follow(QueuedJob(), Console(file=out, width=140))
    assert "job_1 is queued: no worker is ready yet" in out.getvalue()
