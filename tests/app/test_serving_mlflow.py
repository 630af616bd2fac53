"""MLflow's scoring protocol on /invocations: its request shapes (JSON and CSV), its errors, and
CSV bodies read as RFC 4180 writes them, bounded by rows."""

from __future__ import annotations

from tests.app.conftest import NAMES
from tests.app.serving_helpers import predict, train


def test_invocations_in_mlflow_shapes(client, served):
    X, model = served["X"][:4], served["model"]
    client.post("/v1/registered-models", json={"name": "heart"})
    client.post("/v1/registered-models/heart/versions", json={"model_id": model})
    client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    labels = predict(client, model, {"instances": X.tolist()})["labels"]
    records = [dict(zip(NAMES, row, strict=True)) for row in X.tolist()]
    bodies = [
        {"inputs": X.tolist()},
        {"instances": X.tolist()},
        {"instances": records},
        {"dataframe_records": records},
        {"dataframe_split": {"columns": NAMES, "data": X.tolist()}},
        {"dataframe_split": {"columns": NAMES[::-1], "data": X[:, ::-1].tolist()}},
        {"inputs": {n: X[:, j].tolist() for j, n in enumerate(NAMES)}},
    ]
    for body in bodies:
        response = client.post("/v1/models/heart@production/invocations", json=body)
        assert response.status_code == 200, (body, response.text)
        assert response.json() == {"predictions": labels}
    csv_text = ",".join(NAMES) + "\n" + "\n".join(",".join(map(repr, r)) for r in X.tolist())
    response = client.post(
        f"/v1/models/{model}/invocations", content=csv_text, headers={"content-type": "text/csv"}
    )
    assert response.json() == {"predictions": labels}


def test_invocations_errors_are_mlflows(client, served):
    url = f"/v1/models/{served['model']}/invocations"
    bad = client.post(url, json={"dataframe_records": [{"nope": 1}]})
    assert bad.status_code == 400
    assert bad.json()["error_code"] == "BAD_REQUEST" and "'nope'" in bad.json()["message"]
    missing = client.post("/v1/models/nothing@production/invocations", json={"inputs": [[1]]})
    assert missing.status_code == 404
    assert missing.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"
    media = client.post(url, content=b"x", headers={"content-type": "image/png"})
    assert media.status_code == 415 and "message" in media.json()


def test_invocations_csv_one_column_or_value_over_is_400(client, served):
    url = f"/v1/models/{served['model']}/invocations"
    row = ",".join(map(repr, served["X"][0].tolist()))

    def post(text: str):
        return client.post(url, content=text, headers={"content-type": "text/csv"})

    assert post(",".join(NAMES) + "\n" + row).status_code == 200
    wide = post(",".join([*NAMES, "extra"]) + "\n" + row + ",0")
    assert wide.status_code == 400 and "more columns" in wide.json()["message"]
    long_row = post(",".join(NAMES) + "\n" + row + ",0")
    assert long_row.status_code == 400 and "more values" in long_row.json()["message"]


def test_invocations_csv_skips_empty_lines_and_reads_quoted_numbers(client, served):
    """RFC 4180 allows any field quoted: `"0.5"` was refused ("could not convert"); empty lines,
    LF or CRLF, are skipped."""
    X, model = served["X"][:3], served["model"]
    labels = predict(client, model, {"instances": X.tolist()})["labels"]
    rows = [[repr(v) for v in row] for row in X.tolist()]
    quoted = [",".join(f'"{v}"' for v in row) for row in rows]
    bodies = [
        ",".join(f'"{n}"' for n in NAMES) + "\n" + "\n".join(quoted) + "\n",
        ",".join(NAMES) + "\n\n" + "\n\n\n".join(",".join(r) for r in rows) + "\n\n",
        ",".join(NAMES) + "\r\n\r\n" + "\r\n\r\n".join(quoted) + "\r\n\r\n",
    ]
    for body in bodies:
        response = client.post(
            f"/v1/models/{model}/invocations", content=body, headers={"content-type": "text/csv"}
        )
        assert response.status_code == 200, (body, response.text)
        assert response.json() == {"predictions": labels}


def test_invocations_csv_rows_not_lines_meet_the_batch_bound(app, client, served, monkeypatch):
    """MAX_PREDICT_BATCH counts the rows: 3 rows among empty lines were 413 at a bound of 3 (every
    line counted), and a 4th row without a final newline was let through."""
    monkeypatch.setattr(app.state.settings, "max_predict_batch", 3)
    rows = [",".join(map(repr, row)) for row in served["X"][:4].tolist()]

    def post(text: str):
        return client.post(
            f"/v1/models/{served['model']}/invocations",
            content=",".join(NAMES) + "\n" + text,
            headers={"content-type": "text/csv"},
        )

    at_bound = post("\n" * 10 + "\n\n\n".join(rows[:3]) + "\n" * 10)
    assert at_bound.status_code == 200 and len(at_bound.json()["predictions"]) == 3
    for over in ("\n".join(rows), "\n".join(rows) + "\n", "\r\n\r\n".join(rows)):
        answer = post(over)
        assert answer.status_code == 413 and "at most 3" in answer.json()["message"], answer.text


def test_invocations_csv_header_may_quote_a_name_holding_a_comma(app, client):
    """A CSV upload's quoted header name "a,b" is a feature name; the same header sent to
    /invocations was refused as "more columns than the model's 2 features" (its commas were
    counted as columns)."""
    body = 'label,"a,b",c\n1,1,2\n-1,-1,-2\n1,2,1\n-1,-2,-1\n'
    dataset = client.post("/v1/datasets", files={"file": ("q.csv", body)}).json()
    assert dataset["feature_names"] == ["a,b", "c"]
    model = train(app, client, dataset["id"])
    expected = predict(client, model, {"records": [{"a,b": 1.0, "c": 2.0}]})["labels"]
    url = f"/v1/models/{model}/invocations"
    for text in ('"a,b",c\n1,2\n', 'c,"a,b"\n2,1\n'):
        answer = client.post(url, content=text, headers={"content-type": "text/csv"})
        assert answer.status_code == 200, answer.text
        assert answer.json() == {"predictions": expected}
    for wide in ('"a,b",c,d\n1,2,3\n', "a,b,c,d\n1,2,3,4\n"):  # one comma over is refused
        answer = client.post(url, content=wide, headers={"content-type": "text/csv"})
        assert answer.status_code == 400 and "more columns" in answer.json()["message"]
