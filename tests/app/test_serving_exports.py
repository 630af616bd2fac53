"""ONNX (onnxruntime) and skops (scikit-learn) exports that agree with the service, the skops
estimator knowing the model's feature names."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pyarrow as pa
import pytest
import skops.io

from tests.app.conftest import NAMES
from tests.app.serving_helpers import predict


def test_onnx_and_skops_exports_agree_with_the_service(client, served):
    X, model = served["X"], served["model"]
    service = predict(client, model, {"instances": X.tolist()})
    onnx_file = client.get(f"/v1/models/{model}/export", params={"format": "onnx"})
    assert onnx_file.status_code == 200
    session = ort.InferenceSession(onnx_file.content, providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == ["label", "decision_values"]
    labels, decision = session.run(None, {"input": X})
    np.testing.assert_allclose(decision, service["decision_values"], atol=1e-6, rtol=0)
    assert labels.tolist() == service["labels"]
    skops_file = client.get(f"/v1/models/{model}/export", params={"format": "skops"}).content
    estimator = skops.io.loads(skops_file, trusted=skops.io.get_untrusted_types(data=skops_file))
    assert estimator.predict(X).tolist() == service["labels"]
    np.testing.assert_allclose(
        estimator.decision_function(X), np.ravel(service["decision_values"]), atol=1e-9
    )


def _skops_estimator(client, model: str):
    exported = client.get(f"/v1/models/{model}/export", params={"format": "skops"})
    assert exported.status_code == 200, exported.text
    data = exported.content
    return skops.io.loads(data, trusted=skops.io.get_untrusted_types(data=data))


def test_the_skops_export_knows_the_feature_names(client, served, binary):
    """The estimator of a model trained on named columns had no `feature_names_in_`: a table
    with its columns in another order was predicted without a word. scikit-learn now checks
    them, and predicts a table by name as the service predicts its rows."""
    X, model = served["X"], served["model"]
    service = predict(client, model, {"instances": X.tolist()})
    estimator = _skops_estimator(client, model)
    assert estimator.feature_names_in_.tolist() == NAMES
    assert estimator.n_features_in_ == len(NAMES) == X.shape[1]
    table = pa.table({name: X[:, j] for j, name in enumerate(NAMES)})
    assert estimator.predict(table).tolist() == service["labels"]
    np.testing.assert_allclose(
        estimator.decision_function(table), np.ravel(service["decision_values"]), atol=1e-9
    )
    with pytest.raises(ValueError, match="same order"):
        estimator.predict(table.select(NAMES[::-1]))
    unnamed = _skops_estimator(client, binary[0])  # rows written without names (as LIBSVM)
    assert not hasattr(unnamed, "feature_names_in_")
    assert unnamed.n_features_in_ == binary[1].shape[1]
