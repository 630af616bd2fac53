"""`solvers.export_onnx` against the estimators themselves, in onnxruntime: labels, decision
values and, for calibrated classifiers, the probabilities of every calibration method."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

import solvers
from solvers.selection.calibration import fit_calibration

HEART = Path(__file__).resolve().parents[2] / "app" / "demo" / "heart_scale"
TOLERANCE = {"float64": 1e-9, "float32": 1e-4}


def run(model, X, dtype):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {"input": X.astype(dtype)}), strict=True))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_a_calibrated_linear_svc_exports_its_probabilities(dtype):
    X, y = solvers.read_libsvm(HEART)[:2]
    clf = solvers.LinearSVC(C=0.5, tol=1e-4, probability=True).fit(X, y)
    out = run(solvers.export_onnx(clf, dtype=dtype), X.toarray(), dtype)
    assert list(out) == ["label", "decision_values", "probabilities"]
    assert out["label"].tolist() == clf.predict(X).tolist()
    np.testing.assert_allclose(out["probabilities"], clf.predict_proba(X), atol=TOLERANCE[dtype])


@pytest.mark.parametrize("method", ["sigmoid", "softmax", "isotonic"])
@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_calibration_method_gives_the_same_probabilities(method, n_classes, dtype):
    rng = np.random.default_rng(n_classes)
    X = rng.normal(size=(400, 7))
    y = rng.integers(0, n_classes, 400)
    k = 1 if n_classes == 2 else n_classes
    W, b = rng.normal(size=(k, 7)), rng.normal(size=k)
    D = X @ W.T + b
    scores = D[:, 0] if k == 1 else D
    calibration = fit_calibration(scores, y, method)
    model = SimpleNamespace(coef_=W, intercept_=b, classes_=np.arange(n_classes),
                            calibration_=calibration)  # fmt: skip
    out = run(solvers.export_onnx(model, dtype=dtype), X, dtype)
    expected = calibration.probabilities(scores)
    assert out["probabilities"].shape == (400, n_classes)
    # isotonic's steep segments amplify float32's rounding of the scores
    atol = TOLERANCE[dtype] * (100 if method == "isotonic" and dtype == "float32" else 1)
    np.testing.assert_allclose(out["probabilities"], expected, atol=atol)
    np.testing.assert_allclose(out["probabilities"].sum(axis=1), 1.0, atol=TOLERANCE[dtype])


def test_a_model_without_calibration_has_no_probabilities_and_a_regressor_refuses_one():
    X, y = solvers.read_libsvm(HEART)[:2]
    clf = solvers.LinearSVC(tol=1e-3).fit(X, y)
    assert list(run(solvers.export_onnx(clf), X.toarray(), "float64")) == [
        "label", "decision_values"]  # fmt: skip
    regressor = SimpleNamespace(coef_=np.ones((1, 3)), intercept_=np.zeros(1),
                                calibration_={"method": "softmax", "temperature": 1.0})  # fmt: skip
    with pytest.raises(ValueError, match="regression"):
        solvers.export_onnx(regressor)


def test_float32_refuses_a_weight_beyond_its_range():
    # 1e39 would be inf in the float32 graph: every score inf or nan, every label wrong
    beyond = SimpleNamespace(coef_=np.array([[1e39, 1.0]]), intercept_=np.zeros(1),
                             classes_=np.array([-1, 1]))  # fmt: skip
    with pytest.raises(ValueError, match="beyond float32's range.*float64"):
        solvers.export_onnx(beyond, dtype="float32")
    assert solvers.export_onnx(beyond, dtype="float64") is not None
    at_the_edge = SimpleNamespace(coef_=np.array([[3e38, 1.0]]), intercept_=np.array([-3e38]),
                                  classes_=np.array([-1, 1]))  # fmt: skip
    assert solvers.export_onnx(at_the_edge, dtype="float32") is not None
