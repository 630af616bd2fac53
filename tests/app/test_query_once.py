"""A single-valued query parameter sent twice is a 422 naming it, on every route: the last value
was taken silently (`?name=a&name=b` stored a dataset named 'b', `?format=json&format=onnx` sent
ONNX), as upload options sent twice already were refused. A list parameter may repeat."""

from __future__ import annotations

import pytest

from app.tables import Dataset

pytestmark = pytest.mark.one_database

INSTANCES = {"instances": [{"indices": [1], "values": [1.0]}]}


def _refused(response, name: str) -> None:
    assert response.status_code == 422, response.text[:300]
    assert response.json()["detail"] == f"{name}: send it once in the query string"


def test_a_raw_uploads_name_sent_twice_is_refused_and_nothing_kept(client, db):
    text = b"1 1:0.5 2:1\n-1 1:1 3:2\n"
    _refused(client.post("/v1/datasets?name=a&name=b", content=text), "name")
    _refused(client.post("/v1/datasets?filename=a.txt&filename=b.csv", content=text), "filename")
    with db.session() as session:
        assert session.query(Dataset).count() == 0
    once = client.post("/v1/datasets?name=b", content=text)
    assert once.status_code == 201 and once.json()["name"] == "b"


@pytest.mark.parametrize(
    ("method", "url", "name", "body"),
    [
        ("GET", "/v1/datasets?limit=1&limit=2", "limit", None),
        ("GET", "/v1/models?dataset_id=x&dataset_id=y", "dataset_id", None),
        ("GET", "/v1/jobs?cursor=a&limit=5&cursor=b", "cursor", None),
        ("GET", "/v1/registered-models?limit=1&limit=1", "limit", None),  # the same value too
        ("GET", "/v1/models/{model}/export?format=json&format=onnx", "format", None),
        ("GET", "/v1/models/{model}/export?format=onnx&dtype=float32&dtype=float64", "dtype",
         None),
        ("POST", "/v1/models/{model}/predict?probabilities=false&probabilities=true",
         "probabilities", INSTANCES),
        ("POST", "/v1/models/{model}/predictions?probabilities=true&probabilities=false",
         "probabilities", {"dataset_id": "ds_none"}),
    ],
)  # fmt: skip
def test_a_query_parameter_sent_twice_is_refused(client, binary, method, url, name, body):
    _refused(client.request(method, url.format(model=binary[0]), json=body), name)


def test_a_list_parameter_may_repeat_and_a_parameter_once_is_taken(client, binary):
    listed = client.get("/v1/jobs?status=queued&status=running&limit=5")
    assert listed.status_code == 200, listed.text
    exported = client.get(f"/v1/models/{binary[0]}/export?format=json")
    assert exported.status_code == 200 and exported.json()["id"] == binary[0]
    predicted = client.post(f"/v1/models/{binary[0]}/predict?probabilities=false", json=INSTANCES)
    assert predicted.status_code == 200 and "probabilities" not in predicted.json()
    with_unknown = client.get("/v1/models?other=1&other=2")  # not a parameter: ignored
    assert with_unknown.status_code == 200
    assert len(with_unknown.json()["items"]) == 1


def test_a_header_of_one_value_sent_twice_is_refused_and_nothing_made(client, db):
    # Idempotency-Key twice: FastAPI took the first and a retry carrying the two in the other
    # order made a second dataset or job
    text = b"1 1:0.5 2:1\n-1 1:1 3:2\n"
    keys = [("Idempotency-Key", "a"), ("Idempotency-Key", "b")]
    refused = client.post("/v1/datasets?name=k", content=text, headers=keys)
    assert refused.status_code == 422, refused.text[:300]
    assert refused.json()["detail"] == "Idempotency-Key: send it once"
    with db.session() as session:
        assert session.query(Dataset).count() == 0
    dataset = client.post("/v1/datasets?name=k", content=text, headers=keys[:1]).json()
    job = client.post("/v1/jobs", json={"dataset_id": dataset["id"]}, headers=keys)
    assert job.status_code == 422 and job.json()["detail"] == "Idempotency-Key: send it once"
    assert client.get("/v1/jobs").json()["items"] == []
    events = client.get("/v1/jobs/job_none/events",
                        headers=[("Last-Event-ID", "1"), ("Last-Event-ID", "2")])  # fmt: skip
    assert events.status_code == 422 and events.json()["detail"] == "Last-Event-Id: send it once"
    # headers the route does not read may repeat, as any header may
    fine = client.get("/v1/datasets", headers=[("X-Trace", "1"), ("X-Trace", "2")])
    assert fine.status_code == 200
