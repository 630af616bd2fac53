"""Attacks on the model routes (predict, MLflow invocations, evaluation, exports), CI-sized,
against the attack service of attack_service.py (a real `margin serve` on PostgreSQL under an
address-space limit): each gets its 4xx with `/healthz` answering throughout, nothing left behind
and the process tree's memory within its bound."""

from __future__ import annotations

import pytest

from tests.reliability.attack_service import attack
from tests.reliability.helpers import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(300)]


# ---------------------------------------------------------------------------------------------
# Predict (item 1, 11)


def predict(service, body: bytes, content_type: str):
    url = f"/v1/models/{service.model}/predict"
    return lambda: service.http.post(url, content=body, headers={"Content-Type": content_type})


@pytest.mark.parametrize(
    ("name", "body", "content_type", "status"),
    [
        ("48 MiB of newlines", b"\n" * (48 << 20), "text/plain", 422),
        ("2 million '1:1' lines", b"1:1\n" * 2_000_000, "text/plain", 413),
        (
            "a million JSON instances",
            b'{"instances": [' + b",".join([b'{"indices":[1],"values":[1]}'] * 1_000_000) + b"]}",
            "application/json",
            413,
        ),
        (
            "a 10-million-value dense row for a 13-feature model",
            b'{"instances": [[' + b",".join([b"0.5"] * 10_000_000) + b"]]}",
            "application/json",
            422,
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_predict_bombs(service, name, body, content_type, status):
    response = attack(service, predict(service, body, content_type))
    assert response.status_code == status, response.text[:500]


CSV_HEADER = b",".join(b"f%d" % i for i in range(13))  # heart_scale's 13 features


@pytest.mark.parametrize(
    ("name", "body", "detail"),
    [
        ("a header of 20 million names", b"ab," * 20_000_000 + b"ab\n1\n", "more columns"),
        ("a row of 30 million values", CSV_HEADER + b"\n" + b"0," * 30_000_000 + b"0\n", "a row"),
        (
            "60 million empty lines after a row of 14 values",  # empty lines are not rows
            CSV_HEADER + b"\n" + b"0," * 13 + b"0" + b"\n" * 60_000_000,
            "a row",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) and " " in v else "",
)
def test_invocations_csv_bombs(service, name, body, detail):
    # before: the header split into 20 million names (+1.7 GB), or the row parsed whole (+1.4 GB)
    url = f"/v1/models/{service.model}/invocations"
    send = lambda: service.http.post(url, content=body, headers={"Content-Type": "text/csv"})  # noqa: E731
    response = attack(service, send)
    assert response.status_code == 400 and detail in response.json()["message"], response.text


def test_evaluating_on_an_unrelated_dataset_is_422(service):
    unrelated = service.http.post(
        "/v1/datasets",
        files={"file": ("u.svm", b"".join(b"%d 1:1 2:%d\n" % (c, c) for c in range(5, 30)) * 2)},
    )
    assert unrelated.status_code == 201
    url = f"/v1/models/{service.model}/evaluate"
    response = attack(
        service, lambda: service.http.post(url, json={"dataset_id": unrelated.json()["id"]})
    )
    assert response.status_code == 422 and "is a class of the model" in response.json()["detail"]
    assert service.http.delete(f"/v1/datasets/{unrelated.json()['id']}").status_code == 204


def test_exports_of_a_model_of_eight_million_features(service):
    from app.services.export import MAX_DENSE_EXPORT_ENTRIES

    top = MAX_DENSE_EXPORT_ENTRIES + 1  # the dense exports' bound, one entry over
    rows = "".join(f"{i % 2} {top - i}:1\n" for i in range(8)).encode()  # 80 bytes
    dataset = service.http.post("/v1/datasets", files={"file": ("wide.svm", rows)})
    assert dataset.status_code == 201, dataset.text
    job_id = service.http.post("/v1/jobs", json={"dataset_id": dataset.json()["id"]}).json()["id"]
    job = lambda: service.http.get(f"/v1/jobs/{job_id}").json()  # noqa: E731
    wait_for(lambda: job()["status"] not in ("queued", "running"), 120, "the wide model's job")
    assert job()["status"] == "succeeded", job()
    url = f"/v1/models/{job()['model_id']}/export"
    for format, status in (("onnx", 413), ("skops", 413), ("json", 200), ("liblinear", 200)):
        response = attack(service, lambda f=format: service.http.get(url, params={"format": f}))
        assert response.status_code == status, (format, response.text[:300])
    assert response.text.count("\n") > top  # the LIBLINEAR file has a line per feature
