"""Per-tenant quotas: stored bytes, active jobs and active prediction runs; 429 with Retry-After
beyond them, nothing stored by a refused request, other tenants unaffected."""

from __future__ import annotations

import json

import pytest

from app.services import keys
from tests.security.conftest import HEART, new_key, upload


def _stored(data_dir) -> list[str]:
    return sorted(p.name for p in (data_dir / "datasets").iterdir())


def heart(i: int) -> bytes:
    """heart_scale with i trailing blank lines: other bytes, the same arrays."""
    return HEART.read_bytes() + b"\n" * i


def test_storage_quota(make_service):
    client, app = make_service(auth_mode="required")
    acme, other = new_key(app, "acme", "admin"), new_key(app, "globex", "admin")
    first = upload(client, heart(0), headers=acme)
    stored_bytes = first.json()["stored_bytes"]  # the parsed arrays, not the upload
    assert stored_bytes > len(heart(0))
    keys.set_quota(app.state.db, "acme", storage_bytes=int(stored_bytes * 2.5), active_jobs=None)
    second = upload(client, heart(1), headers=acme)
    assert first.status_code == second.status_code == 201
    stored = _stored(app.state.settings.data_dir)
    refused = upload(client, heart(2), headers=acme)
    assert refused.status_code == 429, refused.text
    assert int(refused.headers["Retry-After"]) > 0
    assert "quota" in refused.json()["detail"]
    assert _stored(app.state.settings.data_dir) == stored  # nothing kept
    assert not list((app.state.settings.data_dir / "tmp").iterdir())
    assert len(client.get("/v1/datasets", headers=acme).json()["items"]) == 2
    # another tenant (no quota of its own, no default) is not affected
    assert upload(client, heart(2), headers=other).status_code == 201
    # deleting makes room again
    assert client.delete(f"/v1/datasets/{first.json()['id']}", headers=acme).status_code == 204
    assert upload(client, heart(2), headers=acme).status_code == 201


FEATURE_NAMES = [f"{j:05d}" + "n" * 195 for j in range(2000)]
CLASS_NAMES = [f"{j:04d}" + "n" * 251 for j in range(1000)]


@pytest.mark.parametrize(
    ("names", "table", "least"),
    [
        # 2,000 feature names of 200 characters over one row of zeros stored arrays of a few
        # hundred bytes and 400 kB of names the quota missed
        (FEATURE_NAMES, "label," + ",".join(FEATURE_NAMES) + "\n1," + ",".join("0" * 2000) + "\n",
         400_000),
        # 1,000 class names of 255 characters over 1,000 rows stored 16 kB of arrays and 260 kB
        # of names the quota missed
        (CLASS_NAMES, "label,a\n" + "".join(f"{name},1\n" for name in CLASS_NAMES), 250_000),
    ],
    ids=["feature-names", "class-names"],
)
def test_a_tables_names_count_against_the_quota(make_service, names, table, least):
    # the names are kept in the database, not in the arrays
    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    first = upload(client, table.encode(), filename="names.csv", headers=acme)
    assert first.status_code == 201, first.text
    names_bytes = len(json.dumps(names).encode())
    assert first.json()["stored_bytes"] > names_bytes > least
    keys.set_quota(app.state.db, "acme", storage_bytes=int(names_bytes * 1.5), active_jobs=None)
    refused = upload(client, table.encode() + b"\n", filename="names.csv", headers=acme)
    assert refused.status_code == 429, refused.text
    assert len(client.get("/v1/datasets", headers=acme).json()["items"]) == 1


def _bytes_of_a_model_of(client, app, dataset, headers) -> int:
    """What a job's model on ``dataset`` adds to the stored bytes of tenant acme (``headers``)."""
    from app.jobs.runner import RunContext, run_job
    from app.services.quotas import storage_used

    with app.state.db.session() as session:
        before = storage_used(session, "acme")
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}, headers=headers).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    with app.state.db.session() as session:
        return storage_used(session, "acme") - before


def test_a_models_copy_of_the_feature_names_counts_against_the_quota(make_service, fake_trainer):
    # each model keeps the dataset's feature names in its row: 400 kB of them per model, and the
    # quota counted only its weights (4 kB packed), so a tenant could store many times its quota
    fake_trainer()
    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    rows = "".join(f"{y}," + ",".join("0" * 2000) + "\n" for y in (1, -1))
    table = "label," + ",".join(FEATURE_NAMES) + "\n" + rows
    dataset = upload(client, table.encode(), filename="names.csv", headers=acme).json()
    model_bytes = _bytes_of_a_model_of(client, app, dataset, acme)
    assert model_bytes > len(json.dumps(FEATURE_NAMES).encode())  # the names and the weights


def test_a_models_copy_of_text_class_names_counts_against_the_quota(make_service, fake_trainer):
    # a model keeps its classes' names in its row: 1000 names of 255 characters (255 kB) over
    # a one-column table, and the quota counted only its weights and feature names (16 kB)
    from app.tables import Model

    fake_trainer()
    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    names = [f"{i:04d}" + "n" * 251 for i in range(1000)]
    table = "label,a\n" + "".join(f"{name},{i % 7}\n" for i, name in enumerate(names))
    dataset = upload(client, table.encode(), filename="classes.csv", headers=acme).json()
    model_bytes = _bytes_of_a_model_of(client, app, dataset, acme)
    with app.state.db.session() as session:
        weights = len(session.query(Model).one().weights)
    assert model_bytes >= weights + len(json.dumps(names).encode())


def test_default_storage_quota_from_settings(make_service):
    client, app = make_service(auth_mode="required", quota_storage_mb=0.01)  # ~10 kB
    acme = new_key(app, "acme", "admin")
    response = upload(client, HEART.read_bytes(), headers=acme)  # heart_scale is ~28 kB
    assert response.status_code == 429
    assert client.get("/v1/datasets", headers=acme).json()["items"] == []


def test_active_jobs_quota(make_service, fake_trainer):
    fake_trainer()
    client, app = make_service(auth_mode="required", quota_active_jobs=2)
    acme, other = new_key(app, "acme", "admin"), new_key(app, "globex", "admin")
    dataset = upload(client, HEART.read_bytes(), headers=acme).json()["id"]
    body = {"dataset_id": dataset}
    jobs = [client.post("/v1/jobs", json=body, headers=acme) for _ in range(2)]
    assert [j.status_code for j in jobs] == [202, 202]
    refused = client.post("/v1/jobs", json=body, headers=acme)
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) > 0
    assert len(client.get("/v1/jobs", headers=acme).json()["items"]) == 2  # no third row
    # the quota is per tenant
    own = upload(client, HEART.read_bytes(), headers=other).json()["id"]
    assert client.post("/v1/jobs", json={"dataset_id": own}, headers=other).status_code == 202
    # a job that ends frees its slot
    cancel = client.post(f"/v1/jobs/{jobs[0].json()['id']}/cancel", headers=acme)
    assert cancel.status_code == 200
    assert client.post("/v1/jobs", json=body, headers=acme).status_code == 202


def test_tenant_quota_overrides_the_default(make_service, fake_trainer):
    fake_trainer()
    client, app = make_service(auth_mode="required", quota_active_jobs=1)
    keys.set_quota(app.state.db, "acme", storage_bytes=None, active_jobs=3)
    acme = new_key(app, "acme", "admin")
    dataset = upload(client, HEART.read_bytes(), headers=acme).json()["id"]
    codes = [
        client.post("/v1/jobs", json={"dataset_id": dataset}, headers=acme).status_code
        for _ in range(4)
    ]
    assert codes == [202, 202, 202, 429]


def trained_model(client, app, headers) -> tuple[str, str]:
    """(dataset id, model id) of a job trained at once on an uploaded dataset."""
    from app.jobs.runner import RunContext, run_job

    dataset = upload(client, heart(0), headers=headers).json()["id"]
    job = client.post("/v1/jobs", json={"dataset_id": dataset}, headers=headers).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    return dataset, client.get(f"/v1/jobs/{job['id']}", headers=headers).json()["model_id"]


def test_default_prediction_run_quota_from_settings(make_service, fake_trainer):
    fake_trainer()
    client, app = make_service(auth_mode="required", quota_active_prediction_runs=1)
    app.state.prediction_runner.stop()  # the runs stay queued
    acme = new_key(app, "acme", "admin")
    dataset, model = trained_model(client, app, acme)

    def run():
        return client.post(f"/v1/models/{model}/predictions", json={"dataset_id": dataset},
                           headers=acme)  # fmt: skip

    assert [run().status_code, run().status_code] == [202, 429]
    # the tenant's own bound wins over the default; it is apart from the jobs' quota
    keys.set_quota(app.state.db, "acme", None, active_jobs=0, active_prediction_runs=3)
    assert [run().status_code for _ in range(3)] == [202, 202, 429]


def test_a_quota_of_0_allows_none_and_an_empty_default_has_no_bound(make_service, fake_trainer):
    """A tenant's own 0 allows none of anything, as it always did for storage and jobs; the
    service-wide QUOTA_ACTIVE_PREDICTION_RUNS spelt "no bound" as 0 (the opposite), and now as
    empty, like the other service-wide quotas."""
    fake_trainer()
    client, app = make_service(auth_mode="required", quota_active_prediction_runs="")
    app.state.prediction_runner.stop()  # the runs stay queued
    acme = new_key(app, "acme", "admin")
    dataset, model = trained_model(client, app, acme)
    runs = f"/v1/models/{model}/predictions"
    keys.set_quota(app.state.db, "acme", 0, 0, active_prediction_runs=0)
    refused = {
        "upload": upload(client, heart(1), headers=acme),
        "job": client.post("/v1/jobs", json={"dataset_id": dataset}, headers=acme),
        "run": client.post(runs, json={"dataset_id": dataset}, headers=acme),
    }
    assert {name: r.status_code for name, r in refused.items()} == dict.fromkeys(refused, 429)
    keys.set_quota(app.state.db, "acme", None, None, active_prediction_runs=None)  # default
    accepted = [client.post(runs, json={"dataset_id": dataset}, headers=acme) for _ in range(3)]
    assert [r.status_code for r in accepted] == [202] * 3, accepted[-1].text


def test_prediction_runs_are_refused_where_their_csvs_may_not_fit(make_service, fake_trainer):
    from app.jobs.runner import RunContext, run_job
    from app.services.prediction_csv import csv_estimate
    from app.services.quotas import storage_used

    fake_trainer()
    client, app = make_service(auth_mode="required")
    app.state.prediction_runner.stop()  # the runs stay queued: their CSVs are not yet written
    acme = new_key(app, "acme", "admin")
    dataset = upload(client, heart(0), headers=acme).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}, headers=acme).json()
    assert run_job(job["id"], RunContext(app.state.settings, app.state.db)) == "succeeded"
    model = client.get(f"/v1/jobs/{job['id']}", headers=acme).json()["model_id"]
    with app.state.db.session() as session:
        used = storage_used(session, "acme")
    header = len(b"row,label,decision_value\r\n")  # the model has one output (two classes)
    one_run = csv_estimate(dataset["n_rows"], 1, header=header)

    def run():
        return client.post(f"/v1/models/{model}/predictions", json={"dataset_id": dataset["id"]},
                           headers=acme)  # fmt: skip

    keys.set_quota(app.state.db, "acme", storage_bytes=used + one_run - 1, active_jobs=None)
    assert run().status_code == 429  # one byte short
    keys.set_quota(app.state.db, "acme", storage_bytes=used + one_run, active_jobs=None)
    assert run().status_code == 202  # exactly room for its CSV
    # before: every run was accepted and its CSV counted only once written (five runs stored
    # 3.3 MB under a 1 MB quota); now the queued run's CSV is counted ahead
    refused = run()
    assert refused.status_code == 429 and refused.headers["Retry-After"], refused.text


def test_an_upload_with_almost_no_room_left_is_429(make_service):
    import pickle

    from app.services.dataset_store import QuotaExceeded
    from app.services.quotas import storage_used

    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    assert upload(client, heart(0), headers=acme).status_code == 201
    with app.state.db.session() as session:
        used = storage_used(session, "acme")
    # fewer bytes left than the first ones a dataset writes (its row pointer's leading 0)
    keys.set_quota(app.state.db, "acme", storage_bytes=used + 4, active_jobs=None)
    refused = upload(client, heart(1), headers=acme)  # before: 500
    assert refused.status_code == 429, refused.text
    assert str(pickle.loads(pickle.dumps(QuotaExceeded(4)))) == str(QuotaExceeded(4))


def test_a_runs_csv_header_counts_against_the_quota(make_service):
    """A CSV's header has a decision value and a probability column per class, each naming it:
    1,000 classes of 200-byte names (commas, quotes, a newline: quoted, the quotes doubled) make
    a header of 435 KB, more than four times two rows of their values (97 KB). The estimate
    counted only the rows, so such a run was accepted and stored 4.5 times its estimate; now the
    header is counted too, to the byte."""
    import csv
    import io

    import numpy as np

    from app.services.prediction_csv import csv_estimate, label_width
    from app.services.quotas import storage_used
    from app.tables import Model
    from tests.app.conftest import finished_run
    from tests.app.model_rows import Service, rng_problem

    client, app = make_service(auth_mode="required")
    acme = new_key(app, "acme", "admin")
    service = Service(app, client)
    classes = [f'c{i:03d},"a"\n' + "x" * 190 for i in range(1000)]
    coef = np.random.default_rng(0).standard_normal((1000, 20))
    model = service.add_model(coef, np.zeros(1000), classes, tenant="acme")
    with app.state.db.write() as session:
        session.get(Model, model).calibration = {"method": "softmax", "temperature": 1.0}
    dataset = service.add_dataset(rng_problem(n=2, d=20, seed=1), np.ones(2), tenant="acme")
    with app.state.db.session() as session:
        used = storage_used(session, "acme")
    rows = csv_estimate(2, 2000, label_width(classes))
    names = [f"decision_value_{c}" for c in classes] + [f"probability_{c}" for c in classes]
    line = io.StringIO()
    csv.writer(line).writerow(["row", "label", *names])
    header = len(line.getvalue().encode())
    assert header > 4 * rows

    def run():
        return client.post(f"/v1/models/{model}/predictions?probabilities=true",
                           json={"dataset_id": dataset}, headers=acme)  # fmt: skip

    keys.set_quota(app.state.db, "acme", storage_bytes=used + rows + header - 1, active_jobs=None)
    refused = run()
    assert refused.status_code == 429 and refused.headers["Retry-After"], refused.text
    assert refused.json()["title"] == "Storage quota exceeded", refused.text
    keys.set_quota(app.state.db, "acme", storage_bytes=used + rows + header, active_jobs=None)
    accepted = run()
    assert accepted.status_code == 202, accepted.text
    done = finished_run(client, accepted.headers["location"], headers=acme)
    assert done["status"] == "succeeded", done
    stored = client.get(done["result"], headers=acme)
    written = list(csv.reader(io.StringIO(stored.text)))
    assert written[0] == ["row", "label", *names] and len(written) == 3
    assert all(row[1] in classes and len(row) == 2002 for row in written[1:])
    assert len(stored.content) > header  # what the run stores: more than its rows' estimate
    with app.state.db.session() as session:
        assert storage_used(session, "acme") <= used + rows + header


def test_queued_runs_hold_their_own_csv_estimates_against_the_quota(make_service):
    """Active runs were counted at one output a row, so a queued run of a model of 1,000
    calibrated classes (2,000 values a row) held 1/40 of its CSV: a second run fitting beside
    that was accepted, and the two CSVs passed the quota. A run now holds its own estimate
    until it ends: the second run is refused, and accepted once the first is cancelled."""
    import numpy as np

    from app.services.prediction_csv import csv_estimate
    from app.services.quotas import storage_used
    from app.tables import Model
    from tests.app.model_rows import Service, rng_problem

    client, app = make_service(auth_mode="required")
    app.state.prediction_runner.stop()  # the runs stay queued: their CSVs are not yet written
    acme = new_key(app, "acme", "admin")
    service = Service(app, client)
    coef = np.random.default_rng(0).standard_normal((1000, 20))
    wide = service.add_model(coef, np.zeros(1000), list(range(1000)), tenant="acme")
    with app.state.db.write() as session:
        session.get(Model, wide).calibration = {"method": "softmax", "temperature": 1.0}
    narrow = service.add_model(coef[:1], [0.0], [-1, 1], tenant="acme")
    dataset = service.add_dataset(rng_problem(n=50, d=20, seed=1), np.ones(50), tenant="acme")
    with app.state.db.session() as session:
        used = storage_used(session, "acme")
    names = [f"decision_value_{c}" for c in range(1000)] + [f"probability_{c}" for c in range(1000)]
    wide_run = csv_estimate(50, 2000, header=len(",".join(["row", "label", *names])) + 2)
    narrow_run = csv_estimate(50, 1, header=len(b"row,label,decision_value\r\n"))
    keys.set_quota(app.state.db, "acme", storage_bytes=used + wide_run + narrow_run - 1,
                   active_jobs=None)  # fmt: skip

    def run(model, **params):
        return client.post(f"/v1/models/{model}/predictions", params=params,
                           json={"dataset_id": dataset}, headers=acme)  # fmt: skip

    first = run(wide, probabilities="true")
    assert first.status_code == 202, first.text
    refused = run(narrow)  # one byte short beside the first run's estimate
    assert refused.status_code == 429 and refused.headers["Retry-After"], refused.text
    cancel = client.post(f"{first.headers['location']}/cancel", headers=acme)
    assert cancel.json()["status"] == "cancelled", cancel.text
    assert run(narrow).status_code == 202  # the cancelled run holds nothing
    with app.state.db.session() as session:
        assert storage_used(session, "acme") == used + narrow_run
