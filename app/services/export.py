"""Export a stored model as a LIBLINEAR model file, JSON, ONNX or a scikit-learn object (skops).

ONNX: `solvers.export_onnx` builds the graph (input ``input`` [N, n_features], outputs ``label``
and ``decision_values``, and ``probabilities`` for a calibrated model). skops: a fitted
scikit-learn ``LinearSVC`` (classifiers) or ``LinearSVR`` (regressors) whose ``coef_``,
``intercept_`` and ``classes_`` are the model's, so that its ``decision_function`` and
``predict`` give the service's values and labels; ``feature_names_in_`` holds the training
columns' names of a model trained on a table.

LIBLINEAR's model file (what ``save_model`` writes and ``load_model`` reads)::

    solver_type L2R_L2LOSS_SVC_DUAL
    nr_class 2
    label 1 -1
    nr_feature 122
    bias 1
    w
    <w_size rows of nr_w numbers>

Its conventions, and how ours map onto them:

- ``w`` is feature-major: row i holds feature i+1's weight for each of the ``nr_w`` outputs. A
  binary model (two classes, not Crammer–Singer) has ``nr_w = 1`` and its single column scores
  ``label[0]`` as the positive class. Ours scores ``classes[1]`` as positive, so the label line
  lists ``classes[1] classes[0]`` and the weights keep their signs.
- A bias is an extra feature of value ``bias`` appended to every instance, with its weights as
  one more ``w`` row. Our intercept is already ``bias * w_bias``, so the file states ``bias 1``
  and stores the intercept itself as that row (decision values are then bit-identical); a model
  without an intercept states ``bias -1`` and has no extra row.
- LIBLINEAR's indices are one-based: ``w`` row j is our column j, i.e. training-file index j+1
  for a one-based model and j for a zero-based one (whose instances must be shifted by one
  before LIBLINEAR predicts them).
- LIBLINEAR decides every two-class model by the sign of the first column, Crammer–Singer's
  included, so a two-class model with one column per class is written as the difference of its
  columns (the same arg-max) under its loss's binary solver type.
- Labels are integers; regression models have no label line.
- Numbers are written with ``%.17g`` so that they read back exactly.
"""

from __future__ import annotations

import numpy as np

from app.errors import ProblemError
from app.services.prediction import LinearModel, dumps

FORMAT_VERSION = 1


# ONNX and skops hold the weights as one dense (outputs, n_features) matrix, and writing it
# takes a few copies: beyond this many entries (64 MB of float64) a model is exported sparsely
# (json) or streamed (liblinear) instead. A 312-byte upload of indices near 2^24 trains a model
# whose dense ONNX export took 2.7 GB.
MAX_DENSE_EXPORT_ENTRIES = 1 << 23


C_INT_MIN, C_INT_MAX = -(2**31), 2**31 - 1  # the range of LIBLINEAR's labels


class NotExportable(ValueError):
    """The model cannot be written in the requested format."""


def check_dense_size(model: LinearModel, format: str) -> None:
    """413 when the format's dense weight matrix would exceed MAX_DENSE_EXPORT_ENTRIES."""
    entries = model.n_features * max(1, len(model.intercept))
    if entries > MAX_DENSE_EXPORT_ENTRIES:
        raise ProblemError(
            413, "Model too large for this format",
            f"a {format} export holds the weights densely: {model.n_features} features × "
            f"{len(model.intercept)} outputs = {entries} entries, more than the "
            f"{MAX_DENSE_EXPORT_ENTRIES} accepted; export format=json (sparse) or "
            "format=liblinear (streamed)",
        )  # fmt: skip


def liblinear_solver_type(model: LinearModel) -> str:
    """The LIBLINEAR solver whose model this one corresponds to (prediction depends on it only
    through ``nr_w``: Crammer–Singer keeps one column per class even for two classes)."""
    params = model.info.get("params") or {}
    if model.is_regressor:
        loss = params.get("loss", "epsilon_insensitive")
        return "L2R_L1LOSS_SVR_DUAL" if loss == "epsilon_insensitive" else "L2R_L2LOSS_SVR_DUAL"
    if params.get("multi_class") == "crammer_singer" and len(model.classes) > 2:
        return "MCSVM_CS"
    return "L2R_L1LOSS_SVC_DUAL" if params.get("loss") == "hinge" else "L2R_L2LOSS_SVC_DUAL"


def _integer_labels(classes: list) -> list[int]:
    names = [c for c in classes if isinstance(c, str)]
    if names:
        raise NotExportable(
            f"LIBLINEAR model files hold integer labels only; this model's classes are text "
            f"({', '.join(repr(c) for c in names[:3])}{', ...' if len(names) > 3 else ''}). "
            "Export format=json, onnx or skops, which carry the class names"
        )
    labels = []
    for c in classes:
        if float(c) != int(c):
            raise NotExportable(f"LIBLINEAR labels are integers; this model's classes include {c}")
        if not C_INT_MIN <= int(c) <= C_INT_MAX:  # read as another label, silently
            raise NotExportable(
                f"LIBLINEAR reads labels as C ints ({C_INT_MIN} to {C_INT_MAX}); this model's "
                f"classes include {int(c)}. Export format=json, onnx or skops"
            )
        labels.append(int(c))
    return labels


def liblinear_text(model: LinearModel) -> str:
    """The model as a LIBLINEAR model file (text)."""
    return "".join(liblinear_chunks(model))


def liblinear_chunks(model: LinearModel, rows_per_chunk: int = 8192):
    """The LIBLINEAR model file in pieces of at most `rows_per_chunk` weight rows (runs of zero
    rows of a sparse model are written as repeats of one line), for a streamed response."""
    coef, intercept = model.coef, model.intercept
    if coef.shape[0] == 2 and not model.is_regressor:
        # LIBLINEAR decides any two-class model by the sign of its first column, so a model with
        # a column per class is written as the difference (same arg-max, one column).
        coef = (coef[1] - coef[0])[None, :]
        intercept = intercept[1:] - intercept[:1]
    has_bias = bool(np.any(intercept != 0))
    yield _liblinear_header(model, coef.shape[0], has_bias)
    columns = model.columns if model.columns is not None else np.arange(coef.shape[1])
    zero_line = "0 " * coef.shape[0] + "\n"
    written = 0  # model columns written so far
    for start in range(0, columns.size, rows_per_chunk):
        block = columns[start : start + rows_per_chunk].tolist()
        rows = coef[:, start : start + rows_per_chunk].T.tolist()
        out = []
        for column, row in zip(block, rows, strict=True):
            if column > written:  # the rows before the gap first, then the gap's zeros
                yield "".join(out)
                out = []
                yield from _zero_rows(zero_line, column - written, rows_per_chunk)
            out.append("".join(f"{v:.17g} " for v in row) + "\n")
            written = column + 1
        yield "".join(out)
    yield from _zero_rows(zero_line, model.n_features - written, rows_per_chunk)
    if has_bias:
        yield "".join(f"{v:.17g} " for v in intercept.tolist()) + "\n"


def _zero_rows(line: str, count: int, per_chunk: int):
    for start in range(0, count, per_chunk):
        yield line * min(per_chunk, count - start)


def _liblinear_header(model: LinearModel, nr_w: int, has_bias: bool) -> str:
    lines = [f"solver_type {liblinear_solver_type(model)}"]
    if model.is_regressor:
        lines.append("nr_class 2")
    else:
        labels = _integer_labels(model.classes)
        if nr_w == 1:
            labels = [labels[1], labels[0]]
        lines.append(f"nr_class {len(labels)}")
        lines.append("label " + " ".join(str(v) for v in labels))
    lines += [f"nr_feature {model.n_features}", f"bias {1 if has_bias else -1}", "w"]
    return "\n".join(lines) + "\n"


def json_document(model: LinearModel) -> dict:
    """The model as a self-describing JSON document (floats round-trip exactly)."""
    decision = (
        "value = x . coef[0] + intercept[0]"
        if model.is_regressor
        else "classes[1] if x . coef[0] + intercept[0] > 0 else classes[0]"
        if model.coef.shape[0] == 1
        else "classes[argmax_k(x . coef[k] + intercept[k])]"
    )
    return {
        "format": "margin-linear-model",
        "format_version": FORMAT_VERSION,
        "id": model.id,
        "estimator": model.info.get("estimator"),
        "params": model.info.get("params"),
        "kind": model.kind,
        "classes": model.classes,
        "n_features": model.n_features,
        "zero_based": model.zero_based,
        "feature_names": model.feature_names,
        "feature_index": (
            "coef column j is feature index j"
            if model.zero_based
            else "coef column j is feature index j + 1"
        ),
        "decision_rule": decision,
        **_coefficients(model),
        "intercept": model.intercept,
        "calibration": model.calibration,
        "probability_rule": None if model.calibration is None else PROBABILITY_RULES.get(
            model.calibration.get("method")),
    }


# stands for an array in the document's text until the array is streamed in its place
_SLOT = "\x00array\x00"


def json_chunks(model: LinearModel, per_chunk: int = 1 << 14):
    """`json_document`'s bytes in pieces, for a streamed response: the weights (and a sparse
    model's columns) are written in slices of at most `per_chunk` numbers in their place, so
    that the export holds one slice's text at a time instead of the whole document's (about 20
    bytes a weight: 2.7 GB for a model of MAX_MODEL_WEIGHTS)."""
    document = json_document(model)
    if document["layout"] == "dense":
        arrays, document["coef"] = [document["coef"]], _SLOT
    else:
        sparse = document["coef_sparse"]
        arrays = [sparse["columns"], sparse["values"]]
        document["coef_sparse"] = {"columns": _SLOT, "values": _SLOT}
    pieces = dumps(document).split(dumps(_SLOT))
    if len(pieces) != len(arrays) + 1:  # a label or name held the slot's text: all at once
        yield dumps(json_document(model))
        return
    for piece, array in zip(pieces, arrays, strict=False):
        yield piece
        yield from _array_chunks(np.asarray(array), per_chunk)
    yield pieces[-1]


def _array_chunks(array: np.ndarray, per_chunk: int):
    """A 1-d or 2-d array as JSON (nested lists), `per_chunk` numbers at most per piece."""
    if array.ndim == 2:
        yield b"["
        for k, row in enumerate(array):
            if k:
                yield b","
            yield from _array_chunks(row, per_chunk)
        yield b"]"
        return
    yield b"["
    for start in range(0, array.size, per_chunk):
        part = np.ascontiguousarray(array[start : start + per_chunk])
        if start:
            yield b","
        yield dumps(part)[1:-1]
    yield b"]"


# how the JSON export's calibration turns decision values into probabilities
# (a row whose p_k are all 0, isotonic below every x[k][0] or sigmoid past exp's range, is 1/k
# each, as the service answers: normalized as written, it was 0 / 0)
PROBABILITY_RULES = {
    "sigmoid": "p_k = 1 / (1 + exp(A[k] * d_k + B[k])), normalized to sum to 1 (all 0: 1/k "
    "each; two classes: p(classes[1]) from the one decision value, p(classes[0]) = 1 - "
    "p(classes[1]))",
    "softmax": "p = softmax(d / temperature) (two classes: d = (-d0 / 2, d0 / 2))",
    "isotonic": "p_k = interpolate(d_k, x[k], y[k]) (clipped at the ends), normalized to sum to "
    "1 (all 0: 1/k each; two classes as for sigmoid)",
}


def _coefficients(model: LinearModel) -> dict:
    """``coef`` (n_outputs, n_features) for a dense model; for a sparse one ``coef_sparse``:
    the columns holding a weight and their values (n_outputs, len(columns)), so that the
    document's size follows the weights, not the feature count."""
    if model.columns is None:
        return {"layout": "dense", "coef": model.coef}
    return {
        "layout": "sparse",
        "coef_sparse": {"columns": model.columns, "values": model.coef},
    }


def _classes_array(classes: list) -> np.ndarray:
    if any(isinstance(c, str) for c in classes):  # class names: ONNX STRING labels
        return np.asarray(classes, dtype=str)
    values = np.asarray(classes, dtype=np.float64)
    return values.astype(np.int64) if np.all(values == np.round(values)) else values


def onnx_bytes(model: LinearModel, dtype: str = "float64") -> bytes:
    """The model as a serialized ONNX graph (`solvers.export_onnx`)."""
    from types import SimpleNamespace

    import solvers

    parts = SimpleNamespace(coef_=model.dense_coef(), intercept_=model.intercept)
    if not model.is_regressor:
        parts.classes_ = _classes_array(model.classes)
        parts.calibration_ = model.calibration  # adds the `probabilities` output when set
    return solvers.export_onnx(parts, dtype=dtype, name=model.id).SerializeToString()


def sklearn_estimator(model: LinearModel):
    """A fitted scikit-learn LinearSVC / LinearSVR with the model's weights, and the training
    columns' names as ``feature_names_in_`` when it has them."""
    from sklearn.svm import LinearSVC, LinearSVR

    params = model.info.get("params") or {}
    C = float(params.get("C", 1.0))
    coef = np.ascontiguousarray(model.dense_coef(), dtype=np.float64)
    if model.is_regressor:
        est = LinearSVR(C=C)
        est.coef_ = coef[0].copy()
        est.intercept_ = model.intercept[:1].copy()
    else:
        est = LinearSVC(C=C)
        est.coef_ = coef
        est.intercept_ = model.intercept.copy()
        est.classes_ = _classes_array(model.classes)
    est.n_features_in_ = model.n_features
    names = model.feature_names
    if names is not None and len(names) == model.n_features:
        # trained on named columns (csv, tsv, parquet): scikit-learn then checks a table's
        # columns, by name and order, as fit would have set them (an object array of str)
        est.feature_names_in_ = np.asarray(names, dtype=object)
    est.n_iter_ = 0
    return est


def skops_bytes(model: LinearModel) -> bytes:
    """The scikit-learn estimator as a skops file (``skops.io.load`` with trusted types)."""
    import skops.io

    return skops.io.dumps(sklearn_estimator(model))
