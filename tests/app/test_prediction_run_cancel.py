"""Cancelling a background prediction run: queued, running (between chunks), after its last read,
ended, another tenant's; and through the Python client. Over HTTP, with model and dataset rows
written directly (`model_rows`)."""

from __future__ import annotations

import numpy as np
import pytest

from app.services import dataset_source, prediction_csv
from tests.app.conftest import finished_run
from tests.app.model_rows import (
    rng_problem,
    tenant_key,
    tenant_model,
)


def test_cancel_a_queued_run(service, binary):
    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    run = service.client.post(url, json={"dataset_id": dataset_id}).json()
    assert run["status"] == "queued"
    r = service.client.post(f"{url}/{run['id']}/cancel")
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "cancelled" and r.json()["finished_at"] is not None
    assert claim_next(service.db, "w:1:0") is None  # the runner never takes it
    assert [i["status"] for i in service.client.get(url).json()["items"]] == ["cancelled"]
    assert 'margin_prediction_runs{status="cancelled"} 1.0' in service.client.get("/metrics").text
    r = service.client.get(f"{url}/{run['id']}")
    assert r.status_code == 409 and r.json()["title"] == "Prediction run cancelled"
    again = service.client.post(f"{url}/{run['id']}/cancel")
    assert again.status_code == 409 and "already ended cancelled" in again.json()["detail"]


def test_cancel_a_running_run_stops_it_between_chunks(service, binary, monkeypatch):
    """The runner reads the run's status between chunks: held at its first read, the run is
    cancelled over HTTP; released, the runner stops there and removes its partial CSV."""
    import queue
    import threading

    from app.services import prediction_runs as runs
    from app.storage import get_storage, prediction_key

    monkeypatch.setattr(dataset_source, "CHUNK_ROWS", 4)  # 20 rows: five chunks
    monkeypatch.setattr(runs, "CANCEL_CHECK_S", 0.0)  # a status read after every chunk
    at_check, release, outcomes = threading.Event(), threading.Event(), queue.Queue()
    checked, executed = runs.still_running, runs.execute_run

    def held_check(db, claim):
        at_check.set()
        assert release.wait(30)
        return checked(db, claim)

    def recorded(*args):
        outcome = executed(*args)
        outcomes.put(outcome)
        return outcome

    monkeypatch.setattr(runs, "still_running", held_check)
    monkeypatch.setattr(runs, "execute_run", recorded)
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=20), np.ones(20))
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}).json()["id"]
    try:
        assert at_check.wait(30), "the runner did not write the first chunk"
        staging = prediction_csv.staging_path(service.settings.data_dir, run_id)
        part = staging.with_suffix(".csv.part")
        assert part.exists()  # the first chunk is written, the rest not
        assert service.client.get(f"{url}/{run_id}?format=json").json()["status"] == "running"
        r = service.client.post(f"{url}/{run_id}/cancel")
        assert r.status_code == 200 and r.json()["status"] == "cancelled", r.text
    finally:
        release.set()
    assert outcomes.get(timeout=30) == "stopped"
    assert not part.exists() and not staging.exists()
    assert not get_storage(service.settings).exists(prediction_key(run_id))
    run = service.client.get(f"{url}/{run_id}?format=json").json()
    assert run["status"] == "cancelled" and run["n_rows"] is None


def test_a_run_cancelled_after_its_last_read_ends_cancelled_without_a_csv(
    service, binary, monkeypatch
):
    import queue

    from app.services import prediction_runs as runs
    from app.storage import get_storage, prediction_key

    monkeypatch.setattr(runs, "CANCEL_CHECK_S", 1e9)  # no status read during the run
    write, executed, outcomes = runs.write_csv, runs.execute_run, queue.Queue()
    model_id = binary[0]

    def write_then_cancel(path, model, chunks, *options):
        n_rows = write(path, model, chunks, *options)
        run_id = path.stem.rsplit("-", 1)[1]  # path: tmp/prediction-<host>-<pid>-<run id>.csv
        runs.cancel_run(service.db, model_id, run_id)
        return n_rows

    monkeypatch.setattr(runs, "write_csv", write_then_cancel)
    monkeypatch.setattr(runs, "execute_run", lambda *args: outcomes.put(executed(*args)))
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}).json()["id"]
    assert outcomes.get(timeout=30) == "lost"  # its end found the run cancelled
    assert not get_storage(service.settings).exists(prediction_key(run_id))
    run = service.client.get(f"{url}/{run_id}?format=json").json()
    assert run["status"] == "cancelled" and run["n_rows"] is None


def test_cancel_a_finished_run_is_409(service, binary):
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{model_id}/predictions"
    location = service.client.post(url, json={"dataset_id": dataset_id}).headers["location"]
    assert finished_run(service.client, location)["status"] == "succeeded"
    r = service.client.post(f"{location}/cancel")
    assert r.status_code == 409 and "already ended succeeded" in r.json()["detail"]
    assert service.client.get(location).status_code == 200  # its CSV is untouched


def test_cancel_another_tenants_run_is_404(service):
    service.app.state.prediction_runner.stop()
    acme, globex = tenant_key(service, "acme"), tenant_key(service, "globex")
    model_id, dataset_id = tenant_model(service, "acme")
    url = f"/v1/models/{model_id}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}, headers=acme).json()["id"]
    r = service.client.post(f"{url}/{run_id}/cancel", headers=globex)
    assert r.status_code == 404, r.text
    # nor through a model of its own
    own, _ = tenant_model(service, "globex")
    r = service.client.post(f"/v1/models/{own}/predictions/{run_id}/cancel", headers=globex)
    assert r.status_code == 404 and "Prediction run not found" == r.json()["title"]
    run = service.client.get(f"{url}/{run_id}?format=json", headers=acme).json()
    assert run["status"] == "queued"


def test_the_python_client_starts_lists_and_cancels_runs(service, binary, tmp_path):
    from margin_client import Client, MarginError

    service.app.state.prediction_runner.stop()
    model_id = binary[0]
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    with Client("http://localhost", transport=service.client._transport) as client:
        run = client.runs.start(model_id, dataset_id)
        assert client.runs.get(model_id, run["id"])["status"] == "queued"
        assert client.runs.cancel(model_id, run["id"])["status"] == "cancelled"
        assert [r["status"] for r in client.runs.list(model_id)] == ["cancelled"]
        with pytest.raises(MarginError) as ended:
            client.runs.cancel(model_id, run["id"])
        assert ended.value.status == 409
        with pytest.raises(MarginError) as cancelled:
            client.runs.download(model_id, run["id"], tmp_path / "out.csv")
        assert cancelled.value.status == 409 and not (tmp_path / "out.csv").exists()


def test_a_run_whose_dataset_is_deleted_before_it_reads_fails_saying_so(
    service, binary, monkeypatch
):
    from app.services import prediction_runs as runs
    from app.services.datasets import delete_dataset

    service.app.state.prediction_runner.stop()
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    url = f"/v1/models/{binary[0]}/predictions"
    run_id = service.client.post(url, json={"dataset_id": dataset_id}).json()["id"]
    inputs = runs._inputs

    def deleted_after_the_row_was_read(db, settings, run_id):
        found = inputs(db, settings, run_id)
        delete_dataset(db, settings, dataset_id)  # before its arrays are opened
        return found

    monkeypatch.setattr(runs, "_inputs", deleted_after_the_row_was_read)
    claim = runs.claim_next(service.db, "w:1:0")
    assert runs.execute_run(service.db, service.settings, claim) == "failed"
    run = service.client.get(f"{url}/{run_id}?format=json").json()
    # before: "prediction failed: FileNotFoundError"
    assert run["error"] == "the dataset was deleted while the run read it", run
