"""A model trained on a CSV upload: predicted by its feature names, and its lineage naming that
upload."""

from __future__ import annotations

import numpy as np

from tests.app.conftest import NAMES
from tests.app.serving_helpers import predict


def test_predict_by_records_matches_dense_rows(client, served):
    X, model = served["X"], served["model"]
    assert client.get(f"/v1/models/{model}").json()["feature_names"] == NAMES
    dense = predict(client, model, {"instances": X[:20].tolist()})
    records = [{n: v for n, v in zip(NAMES, row, strict=True) if v != 0} for row in X[:20]]
    by_name = predict(client, model, {"records": records})  # a missing name is 0
    assert by_name["labels"] == dense["labels"]
    np.testing.assert_allclose(by_name["decision_values"], dense["decision_values"], atol=1e-12)
    unknown = client.post(f"/v1/models/{model}/predict", json={"records": [{"agee": 1.0}]})
    assert unknown.status_code == 422 and "'agee'" in unknown.json()["detail"]
    text = client.post(f"/v1/models/{model}/predict", json={"records": [{"age": "old"}]})
    assert text.status_code == 422 and "'age' must be a finite number" in text.json()["detail"]


def test_lineage(client, served):
    lineage = client.get(f"/v1/models/{served['model']}/lineage").json()
    assert lineage["dataset"]["sha256"] == served["dataset"]["sha256"]
    assert lineage["dataset"]["format"] == "csv" and lineage["params"]["tol"] == 1e-4
    assert lineage["solver"]["status"] == "converged" and lineage["package_version"] == "0.1.0"
    assert lineage["commit"] is None or len(lineage["commit"]) == 40
    assert lineage["metrics"]["train_accuracy"] > 0.8
