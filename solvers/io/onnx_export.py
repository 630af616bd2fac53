"""ONNX export of a fitted linear model: ``export_onnx(estimator)``.

The graph computes what the estimator's ``decision_function`` and ``predict`` compute:

    decision_values = input @ W + b            W = coef_.T (n_features, k), b = intercept_
    label = classes_[decision_values[:, 0] > 0]      two classes, one column
          = classes_[argmax(decision_values, 1)]     k columns
          = decision_values[:, 0]                    regression (no classes_)

with one input ``input`` (FP64 or FP32, shape [N, n_features]) and the outputs, in this order,
``label`` [N] and ``decision_values`` [N, k] ([N, 1] for a binary model), then, for a calibrated
classifier (``calibration_`` set, see `solvers.selection.calibration`), ``probabilities``
[N, n_classes] with rows summing to 1 and columns in the order of ``classes_``:

    sigmoid   p_j = 1 / (1 + exp(A_j f_j + B_j)); two classes: [1 − p, p]; else p / Σ p
    softmax   softmax(f / T); two classes on the scores (−f/2, f/2)
    isotonic  the monotone piecewise-linear map through (x_i, y_i), constant outside, written as
              y_0 + Σ_i slope_i · (min(max(f, x_i), x_{i+1}) − x_i); normalized as sigmoid

Integer-valued labels are INT64, other numeric ones DOUBLE, text labels STRING. Opset 17, IR
version 8 (loaded by onnxruntime 1.10 and later).

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
    if dtype == "float32":
        _check_float32_range(coef, intercept)
    classes = getattr(estimator, "classes_", None)
    if classes is not None and len(classes) == 2 and coef.shape[0] not in (1, 2):
        raise ValueError(f"a two-class model has 1 or 2 weight rows, got {coef.shape[0]}")
    calibration = _calibration_dict(getattr(estimator, "calibration_", None))
    if calibration is not None and classes is None:
        raise ValueError("a regression model has no probabilities to calibrate")
    model = _graph(coef, intercept, None if classes is None else np.asarray(classes), dtype, name)
    if calibration is not None:
        _add_probabilities(model.graph, calibration, len(classes), coef.shape[0], dtype)
    return model


def _check_float32_range(coef, intercept) -> None:
    """A weight beyond float32's range would become inf in a float32 graph, and its scores inf
    or nan: refuse rather than write a graph that answers wrongly."""
    largest = max(float(np.abs(coef).max(initial=0.0)), float(np.abs(intercept).max(initial=0.0)))
    if largest > np.finfo(np.float32).max:
        raise ValueError(
            f"dtype float32: a weight of magnitude {largest:.3g} is beyond float32's range "
            f"({float(np.finfo(np.float32).max):.3g}); export with dtype float64"
        )


def _calibration_dict(calibration) -> dict | None:
    """``calibration_`` as its plain form: a `Calibration` (``to_dict``), a dict, or None."""
    if calibration is None or isinstance(calibration, dict):
        return calibration
    return calibration.to_dict()


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


def _add_probabilities(graph, calibration: dict, n_classes: int, k: int, dtype: str) -> None:
    """Append the nodes mapping ``decision_values`` [N, k] to ``probabilities`` [N, n_classes]."""
    from onnx import TensorProto, helper, numpy_helper

    elem = TensorProto.DOUBLE if dtype == "float64" else TensorProto.FLOAT

    def const(name, value, kind=dtype):
        graph.initializer.append(numpy_helper.from_array(np.asarray(value, dtype=kind), name))
        return name

    def node(op, inputs, output, **attributes):
        graph.node.append(helper.make_node(op, inputs, [output], **attributes))
        return output

    method = calibration["method"]
    if method == "softmax":
        scores = "decision_values"
        if k == 1:  # the binary score as the pair (−f/2, f/2)
            scores = node("Mul", [scores, const("p_halves", [[-0.5, 0.5]])], "p_pair")
        z = node("Div", [scores, const("p_temperature", calibration["temperature"])], "p_z")
        node("Softmax", [z], "probabilities", axis=1)
    else:
        axis1 = "p_axis1" if k == 1 and method == "sigmoid" else const("p_axis1", [1], np.int64)
        if method == "sigmoid":
            Af = node("Mul", ["decision_values", const("p_A", calibration["A"])], "p_Af")
            z = node("Add", [Af, const("p_B", calibration["B"])], "p_z")
            p = node("Sigmoid", [node("Neg", [z], "p_minus_z")], "p_columns")
        else:
            p = _isotonic_nodes(calibration["x"], calibration["y"], const, node, axis1)
        if k == 1:
            negative = node("Sub", [const("p_one", [[1.0]]), p], "p_negative")
            node("Concat", [negative, p], "probabilities", axis=1)
        else:  # normalized; a row of zeros (every score saturated) becomes uniform
            total = node("ReduceSum", [p, axis1], "p_total", keepdims=1)
            empty_b = node("Equal", [total, const("p_zero", [[0.0]])], "p_empty_b")
            empty = node("Cast", [empty_b], "p_empty", to=elem)
            fill = node("Mul", [empty, const("p_uniform", [[1.0 / n_classes]])], "p_fill")
            filled = node("Add", [p, fill], "p_filled")
            denominator = node("Add", [total, empty], "p_denominator")
            node("Div", [filled, denominator], "probabilities")
    graph.output.append(helper.make_tensor_value_info("probabilities", elem, ["N", n_classes]))


def _isotonic_nodes(xs, ys, const, node, axis1: str) -> str:
    """Per column j, the interpolation through (xs[j], ys[j]), constant outside, for all columns
    at once: y_0 + Σ_i slope_i · (min(max(f, x_i), x_{i+1}) − x_i) (shorter columns padded with
    flat segments)."""
    segments = max(max(len(x) - 1, 1) for x in xs)
    low = np.zeros((segments, len(xs)))
    high = np.zeros((segments, len(xs)))
    slope = np.zeros((segments, len(xs)))
    for j, (x, y) in enumerate(zip(xs, ys, strict=True)):
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        n = len(x) - 1
        low[:, j] = high[:, j] = x[-1]
        low[:n, j], high[:n, j] = x[:-1], x[1:]
        slope[:n, j] = np.diff(y) / np.diff(x)
    f = node("Unsqueeze", ["decision_values", axis1], "p_f3")  # [N, 1, k] against [segments, k]
    above = node("Max", [f, const("p_low", low)], "p_above")
    clipped = node("Min", [above, const("p_high", high)], "p_clipped")
    run = node("Sub", [clipped, "p_low"], "p_run")
    rises = node("Mul", [run, const("p_slope", slope)], "p_rises")
    rise = node("ReduceSum", [rises, axis1], "p_rise", keepdims=0)
    return node("Add", [rise, const("p_start", [y[0] for y in ys])], "p_columns")
