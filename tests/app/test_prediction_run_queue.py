"""The queue of background prediction runs: the per-tenant bound on active runs, fair and exclusive
claims, and recovering runs an interrupted process left. Over HTTP, with model and dataset rows
written directly (`model_rows`)."""

from __future__ import annotations

import numpy as np
import pytest
from sqlalchemy import select

from app.tables import PredictionRun
from tests.app.conftest import finished_run
from tests.app.model_rows import (
    rng_problem,
    tenant_key,
    tenant_model,
)


def test_active_prediction_runs_are_bounded_per_tenant(service):
    from app.services import keys

    service.app.state.prediction_runner.stop()  # the runs stay queued
    acme, globex = tenant_key(service, "acme"), tenant_key(service, "globex")
    keys.set_quota(service.db, "acme", None, None, active_prediction_runs=2)
    model_id, dataset_id = tenant_model(service, "acme")
    url = f"/v1/models/{model_id}/predictions"

    def start(headers=acme, model=model_id, dataset=dataset_id):
        body = {"dataset_id": dataset}
        return service.client.post(f"/v1/models/{model}/predictions", json=body, headers=headers)

    accepted = [start(), start()]
    assert [r.status_code for r in accepted] == [202, 202]  # at the bound
    refused = start()  # one over
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    problem = refused.json()
    assert problem["quota_active_prediction_runs"] == 2
    assert "2 queued or running prediction runs" in problem["detail"]
    assert len(service.client.get(url, headers=acme).json()["items"]) == 2  # no third row
    # the bound is per tenant: globex has the default (QUOTA_ACTIVE_PREDICTION_RUNS, 100)
    assert start(globex, *tenant_model(service, "globex")).status_code == 202
    # a cancelled run frees its slot
    run_id = accepted[0].json()["id"]
    assert service.client.post(f"{url}/{run_id}/cancel", headers=acme).status_code == 200
    assert start().status_code == 202


def test_runs_are_claimed_fairly_across_tenants(service, binary):
    """Tenant a queues five runs, then tenant b one: b's run is claimed second, not sixth."""
    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        for i, tenant in enumerate("aaaaab", start=1):  # ids are in queue order
            session.add(PredictionRun(id=f"pred_{i}", model_id=binary[0], tenant=tenant))
    claimed = [claim_next(service.db, "w:1:0").run_id for _ in range(4)]
    # a (0 running) before b (0) by age; then b (0) before a (1); then a (1) ties b (1): age
    assert claimed == ["pred_1", "pred_6", "pred_2", "pred_3"]
    with service.db.session() as session:
        statuses = {r.id: r.status for r in session.scalars(select(PredictionRun))}
    assert [statuses[f"pred_{i}"] for i in range(1, 7)] == ["running"] * 3 + ["queued"] * 2 + [
        "running"
    ]


def test_concurrent_claims_never_take_a_run_twice(service, binary):
    from concurrent.futures import ThreadPoolExecutor

    from app.services.prediction_runs import claim_next

    service.app.state.prediction_runner.stop()
    with service.db.write() as session:
        for i in range(12):
            session.add(PredictionRun(id=f"pred_{i:02d}", model_id=binary[0], tenant="abc"[i % 3]))

    def claims(worker: int) -> list[str]:
        taken = [claim_next(service.db, f"w:{worker}:0") for _ in range(4)]
        return [c.run_id for c in taken if c is not None]

    with ThreadPoolExecutor(4) as pool:
        claimed = [run for runs in pool.map(claims, range(4)) for run in runs]
    assert sorted(claimed) == [f"pred_{i:02d}" for i in range(12)]  # each once, none left


@pytest.mark.parametrize("retries", [0, 1])
def test_interrupted_runs_are_recovered_like_jobs(service, binary, retries):
    import socket
    from datetime import timedelta

    from app.services.prediction_runs import recover_runs
    from app.tables import utcnow

    # the app's own runner would claim the queued and re-queued rows while the test reads them
    service.app.state.prediction_runner.stop()
    dead = f"{socket.gethostname()}:999999999:0"  # a process of this host that is gone
    old = utcnow() - timedelta(minutes=10)
    with service.db.write() as session:
        for run_id, status, worker, beat in [
            ("pred_a", "running", dead, utcnow()),
            ("pred_b", "queued", None, None),
            ("pred_c", "running", "elsewhere:1:0", utcnow()),  # alive on another host
            ("pred_d", "running", "elsewhere:2:0", old),  # silent on another host
            ("pred_e", "succeeded", dead, old),
        ]:
            session.add(
                PredictionRun(
                    id=run_id,
                    model_id=binary[0],
                    status=status,
                    worker=worker,
                    attempt=1,
                    heartbeat_at=beat,
                )
            )
    ended = "queued" if retries else "failed"
    assert recover_runs(service.db, retries) == {"pred_a": ended}
    assert recover_runs(service.db, retries, stale_before=utcnow() - timedelta(minutes=1)) == {
        "pred_d": ended
    }
    with service.db.session() as session:
        a = session.get(PredictionRun, "pred_a")
    assert "interrupted" in a.error and a.attempt == 1
    assert (a.worker is None) if retries else (a.finished_at is not None)


def test_a_requeued_runs_error_is_not_its_outcome(service, binary):
    """A run put back in the queue notes why ("interrupted ...; re-queued"). Cancelled next, its
    409 said it was interrupted, not cancelled; run again, it succeeded with that error."""
    import socket

    from app.services.prediction_runs import claim_next, execute_run, recover_runs

    service.app.state.prediction_runner.stop()
    dataset_id = service.add_dataset(rng_problem(n=10), np.ones(10))
    dead = f"{socket.gethostname()}:999999999:0"  # a process of this host that is gone
    with service.db.write() as session:
        for run_id in ("pred_a", "pred_b"):
            session.add(
                PredictionRun(id=run_id, model_id=binary[0], dataset_id=dataset_id,
                              status="running", worker=dead, attempt=1)
            )  # fmt: skip
    assert recover_runs(service.db, 1) == {"pred_a": "queued", "pred_b": "queued"}
    url = f"/v1/models/{binary[0]}/predictions"
    assert service.client.post(f"{url}/pred_a/cancel").status_code == 200
    cancelled = service.client.get(f"{url}/pred_a")
    assert cancelled.status_code == 409
    assert "interrupted" not in cancelled.json()["detail"], cancelled.text
    claim = claim_next(service.db, "w:1:0")
    assert execute_run(service.db, service.settings, claim) == "succeeded"
    assert service.client.get(f"{url}/pred_b?format=json").json()["error"] is None


def test_starting_the_api_recovers_runs_a_previous_process_left_active(service, binary, settings):
    import socket

    from fastapi.testclient import TestClient

    from app.main import create_app

    dataset_id = service.add_dataset(rng_problem(n=20, seed=3), np.ones(20))
    with service.db.write() as session:
        session.add(
            PredictionRun(
                id="pred_left",
                model_id=binary[0],
                dataset_id=dataset_id,
                status="running",
                worker=f"{socket.gethostname()}:999999999:0",
                attempt=1,
            )
        )
        queued = PredictionRun(id="pred_wait", model_id=binary[0], dataset_id=dataset_id)
        session.add(queued)
    with TestClient(create_app(settings), base_url="http://localhost") as restarted:
        base = f"/v1/models/{binary[0]}/predictions"
        left = finished_run(restarted, f"{base}/pred_left")
        waiting = finished_run(restarted, f"{base}/pred_wait")
    assert left["status"] == "failed" and "interrupted" in left["error"]  # JOB_RETRIES=0
    assert waiting["status"] == "succeeded" and waiting["n_rows"] == 20
