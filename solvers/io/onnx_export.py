"""ONNX export of a fitted linear model: ``export_onnx(estimator)``.

The graph computes what the estimator's ``decision_function`` and ``predict`` compute:

    decision_values = input @ W + b            W = coef_.T (n_features, k), b = intercept_
    label = classes_[decision_values[:, 0] > 0]      two classes, one column
          = classes_[argmax(decision_values, 1)]     k columns
          = decision_values[:, 0]                    regression (no classes_)

with one input ``input`` (FP64 or FP32, shape [N, n_features]) and the outputs, in this order,
``label`` [N] and ``decision_values`` [N, k] ([N, 1] for a binary model). Integer-valued labels
are INT64, other numeric ones DOUBLE, text labels STRING. Opset 17, IR version 8 (loaded by
onnxruntime 1.10 and later).

Any object with ``coef_`` and ``intercept_`` (and ``classes_`` for a classifier) is accepted:
`solvers.LinearSVC`, `solvers.LinearSVR`, scikit-learn's linear models, or a plain namespace.
The ``onnx`` package is imported only when this runs.
"""

from __future__ import annotations

import numpy as np

OPSET = 17
IR_VERSION = 8
DTYPES = ("float64", "float32")


def export_onnx(estimator, dtype: str = "float64", name: str = "margin-linear-model"):
    """The fitted linear `estimator` as an ``onnx.ModelProto`` (see the module docstring).

    Parameters
    ----------
    estimator : fitted object with ``coef_``, ``intercept_`` and, for classifiers, ``classes_``
    dtype : {"float64", "float32"}
        Element type of the input and of the weights.
    name : str
        The graph's name.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(DTYPES)}, got {dtype!r}")
    coef = np.atleast_2d(np.asarray(estimator.coef_, dtype=np.float64))
    intercept = np.broadcast_to(
        np.asarray(estimator.intercept_, dtype=np.float64), (coef.shape[0],)
    )
    classes = getattr(estimator, "classes_", None)
    if classes is not None and len(classes) == 2 and coef.shape[0] not in (1, 2):
        raise ValueError(f"a two-class model has 1 or 2 weight rows, got {coef.shape[0]}")
    return _graph(coef, intercept, None if classes is None else np.asarray(classes), dtype, name)


def _labels_tensor(classes: np.ndarray):
    from onnx import numpy_helper

    integral = classes.dtype.kind == "f" and bool(
        np.all(np.isfinite(classes)) and np.all(classes == np.round(classes))
    )
    if classes.dtype.kind in "iub" or integral:
        return numpy_helper.from_array(classes.astype(np.int64), "classes")
    if classes.dtype.kind == "f":
        return numpy_helper.from_array(classes.astype(np.float64), "classes")
    return numpy_helper.from_array(classes.astype(object), "classes")


def _graph(coef, intercept, classes, dtype: str, name: str):
    from onnx import TensorProto, helper, numpy_helper

    elem = TensorProto.DOUBLE if dtype == "float64" else TensorProto.FLOAT
    k, n_features = coef.shape
    initializers = [
        numpy_helper.from_array(np.ascontiguousarray(coef.T, dtype=dtype), "W"),
        numpy_helper.from_array(intercept.astype(dtype), "b"),
    ]
    if classes is None or k == 1:  # the axis that Squeeze removes
        initializers.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "axis1"))
    nodes = [
        helper.make_node("MatMul", ["input", "W"], ["scores"]),
        helper.make_node("Add", ["scores", "b"], ["decision_values"]),
    ]
    if classes is None:
        label_type = elem
        nodes.append(helper.make_node("Squeeze", ["decision_values", "axis1"], ["label"]))
    else:
        table = _labels_tensor(classes)
        initializers.append(table)
        label_type = table.data_type
        if k == 1:
            initializers.append(numpy_helper.from_array(np.zeros(1, dtype=dtype), "zero"))
            nodes += [
                helper.make_node("Squeeze", ["decision_values", "axis1"], ["first"]),
                helper.make_node("Greater", ["first", "zero"], ["positive"]),
                helper.make_node("Cast", ["positive"], ["index"], to=TensorProto.INT64),
            ]
        else:
            nodes.append(
                helper.make_node("ArgMax", ["decision_values"], ["index"], axis=1, keepdims=0)
            )
        nodes.append(helper.make_node("Gather", ["classes", "index"], ["label"], axis=0))
    graph = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("input", elem, ["N", n_features])],
        [
            helper.make_tensor_value_info("label", label_type, ["N"]),
            helper.make_tensor_value_info("decision_values", elem, ["N", k]),
        ],
        initializers,
    )
    return helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="margin",
        ir_version=IR_VERSION,
    )
