"""Export to LIBLINEAR's model format, checked by loading it into liblinear-official."""

import json
import tracemalloc
from dataclasses import replace

import numpy as np
import pytest
import scipy.sparse as sp
from liblinear import liblinearutil

from app.services.export import (
    NotExportable,
    json_chunks,
    json_document,
    liblinear_chunks,
    liblinear_text,
)
from app.services.prediction import LinearModel, decision_function, dumps, predict_payload


def random_problem(n=60, d=25, seed=0):
    X = sp.random(n, d, density=0.3, format="csr", random_state=seed, dtype=np.float64)
    X.data = X.data * 4 - 2
    return X


def model(coef, intercept, classes, kind="classifier", params=None, zero_based=False):
    coef = np.asarray(coef, dtype=np.float64)
    return LinearModel(
        id="m1",
        kind=kind,
        classes=list(classes),
        n_features=coef.shape[1],
        zero_based=zero_based,
        coef=coef,
        intercept=np.asarray(intercept, dtype=np.float64),
        info={"estimator": "LinearSVC", "params": params or {}},
    )


def liblinear_predict(text, X, tmp_path):
    path = tmp_path / "model.txt"
    path.write_text(text)
    m = liblinearutil.load_model(str(path))
    labels, _, values = liblinearutil.predict([], X, m, "-q")
    return m, np.array(labels), np.array(values)


def ours(m, X):
    out = predict_payload(m, X)
    if "values" in out:
        return np.asarray(out["values"]), decision_function(m, X)
    return np.asarray(out["labels"], dtype=float), out["decision_values"]


@pytest.mark.parametrize("with_bias", [True, False])
def test_binary_round_trip(tmp_path, with_bias):
    rng = np.random.default_rng(1)
    X = random_problem()
    m = model(rng.standard_normal((1, 25)), [0.7 if with_bias else 0.0], classes=[-1, 1])
    text = liblinear_text(m)
    assert ("bias 1\n" if with_bias else "bias -1\n") in text
    assert "label 1 -1\n" in text
    lm, labels, values = liblinear_predict(text, X, tmp_path)
    our_labels, D = ours(m, X)
    assert lm.get_nr_feature() == 25 and lm.get_labels() == [1, -1]
    np.testing.assert_array_equal(labels, our_labels)
    np.testing.assert_allclose(values, D, rtol=1e-12, atol=1e-12)
    assert len(set(our_labels)) == 2


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("multi_class", ["ovr", "crammer_singer"])
def test_multiclass_round_trip(tmp_path, with_bias, multi_class):
    rng = np.random.default_rng(2)
    X = random_problem(seed=3)
    intercept = rng.standard_normal(4) if with_bias else np.zeros(4)
    m = model(
        rng.standard_normal((4, 25)),
        intercept,
        classes=[2, 5, 7, 9],
        params={"multi_class": multi_class},
    )
    text = liblinear_text(m)
    assert text.startswith(
        "solver_type " + ("MCSVM_CS" if multi_class == "crammer_singer" else "L2R_L2LOSS_SVC_DUAL")
    )
    _, labels, values = liblinear_predict(text, X, tmp_path)
    our_labels, D = ours(m, X)
    np.testing.assert_array_equal(labels, our_labels)
    np.testing.assert_allclose(values, D, rtol=1e-12, atol=1e-12)
    assert len(set(our_labels)) > 2


def test_two_class_model_with_a_column_per_class_is_written_as_one_column(tmp_path):
    """LIBLINEAR decides two-class models by the first column's sign, even Crammer-Singer's."""
    rng = np.random.default_rng(4)
    X = random_problem(seed=5)
    m = model(
        rng.standard_normal((2, 25)),
        [0.1, -0.1],
        classes=[0, 1],
        params={"multi_class": "crammer_singer"},
    )
    text = liblinear_text(m)
    assert "solver_type L2R_L2LOSS_SVC_DUAL" in text and "label 1 0\n" in text
    _, labels, values = liblinear_predict(text, X, tmp_path)
    our_labels, D = ours(m, X)
    np.testing.assert_array_equal(labels, our_labels)
    np.testing.assert_allclose(values[:, 0], D[:, 1] - D[:, 0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("loss", ["epsilon_insensitive", "squared_epsilon_insensitive"])
def test_regression_round_trip(tmp_path, loss):
    rng = np.random.default_rng(6)
    X = random_problem(seed=7)
    m = model(
        rng.standard_normal((1, 25)), [1.5], classes=[], kind="regressor", params={"loss": loss}
    )
    text = liblinear_text(m)
    assert "label" not in text
    lm, values, _ = liblinear_predict(text, X, tmp_path)
    assert lm.is_regression_model()
    our_values, _ = ours(m, X)
    np.testing.assert_allclose(values, our_values, rtol=1e-12, atol=1e-12)


def test_numbers_are_written_to_read_back_exactly():
    m = model([[1 / 3, -2e-300, 0.1]], [np.pi], classes=[-1, 1])
    rows = liblinear_text(m).split("w\n", 1)[1].split("\n")
    assert [float(r) for r in rows if r] == [1 / 3, -2e-300, 0.1, np.pi]


@pytest.mark.parametrize("solver", ["-s 1 -B 1", "-s 3 -B 2.5", "-s 4 -B 1", "-s 2"])
def test_liblinear_trained_models_predict_the_same_through_our_rule(tmp_path, solver):
    """Our decision rule applied to the weights LIBLINEAR learned gives LIBLINEAR's labels; the
    file we export for them gives LIBLINEAR's labels too."""
    rng = np.random.default_rng(8)
    X = random_problem(n=120, seed=9)
    multi = "-s 4" in solver
    w = rng.standard_normal((3 if multi else 1, 25))
    scores = X @ w.T
    y = (scores.argmax(axis=1) * 3 + 1) if multi else np.where(scores[:, 0] > 0, 1, -1)
    lm = liblinearutil.train(y.astype(float), X, solver + " -q")
    ref_labels, _, _ = liblinearutil.predict([], X, lm, "-q")
    labels = lm.get_labels()
    nr_w = len(labels) if multi else 1
    coef = np.array([[lm.get_decfun_coef(f, k) for f in range(1, 26)] for k in range(nr_w)])
    intercept = np.array([lm.get_decfun_bias(k) for k in range(nr_w)])
    if multi:
        order = np.argsort(labels)
        m = model(
            coef[order],
            intercept[order],
            classes=sorted(labels),
            params={"multi_class": "crammer_singer"},
        )
    else:
        # LIBLINEAR scores labels[0]; ours scores classes[1].
        m = model(coef, intercept, classes=[labels[1], labels[0]])
    our_labels, _ = ours(m, X)
    np.testing.assert_array_equal(our_labels, ref_labels)
    _, exported_labels, _ = liblinear_predict(liblinear_text(m), X, tmp_path)
    np.testing.assert_array_equal(exported_labels, ref_labels)


@pytest.mark.parametrize("rows_per_chunk", [2, 8192])
def test_a_sparse_model_with_gaps_between_its_columns_round_trips(tmp_path, rows_per_chunk):
    """A sparse model's rows before a gap of zero rows were held back while the gap was
    written: columns 0, 1 and 2 of [0, 1, 2, 9, 20] landed after the zeros, as features 7-9."""
    rng = np.random.default_rng(4)
    dense = model(np.zeros((3, 25)), [0.5, -1.0, 0.25], classes=[1, 2, 3])
    kept = np.array([0, 1, 2, 9, 20])
    dense.coef[:, kept] = rng.standard_normal((3, kept.size))
    sparse = replace(dense, coef=np.ascontiguousarray(dense.coef[:, kept]), columns=kept)
    text = "".join(liblinear_chunks(sparse, rows_per_chunk))
    assert text == liblinear_text(dense)
    X = random_problem(seed=5)
    _, labels, values = liblinear_predict(text, X, tmp_path)
    our_labels, D = ours(dense, X)
    np.testing.assert_array_equal(labels, our_labels)
    np.testing.assert_allclose(values, D, rtol=1e-12, atol=1e-12)


def test_non_integer_labels_cannot_be_exported():
    with pytest.raises(NotExportable, match="classes include 0.5"):
        liblinear_text(model([[1.0, 2.0]], [0.0], classes=[0.5, 1]))


def test_labels_beyond_a_c_int_cannot_be_exported(tmp_path):
    """LIBLINEAR reads labels into C ints: 3000000000 was read back as -1294967296."""
    for big in (2**31, -(2**31) - 1, 3_000_000_000):
        with pytest.raises(NotExportable, match=f"classes include {big}"):
            liblinear_text(model([[1.0, 2.0]], [0.0], classes=sorted([0, big])))
    edge = model([[1.0, 2.0]], [0.0], classes=[-(2**31), 2**31 - 1])
    m, _, _ = liblinear_predict(liblinear_text(edge), random_problem(d=2), tmp_path)
    assert m.get_labels() == [2**31 - 1, -(2**31)]


def test_json_document_round_trips():
    m = model([[1 / 3, 2.0]], [0.25], classes=[-1, 1], zero_based=True)
    doc = json.loads(dumps(json_document(m)))
    assert doc["coef"] == [[1 / 3, 2.0]] and doc["intercept"] == [0.25]
    assert doc["classes"] == [-1, 1] and doc["zero_based"] is True and doc["n_features"] == 2
    assert doc["format"] == "margin-linear-model"


@pytest.mark.parametrize("per_chunk", [1, 3, 1 << 16])
def test_the_streamed_json_document_is_the_document(per_chunk):
    rng = np.random.default_rng(0)
    dense = model(rng.standard_normal((3, 7)), [0.5, -1, 2], classes=[1, 2, 3])
    sparse = replace(dense, coef=np.ascontiguousarray(dense.coef[:, [1, 4, 5]]),
                     columns=np.array([1, 4, 5]))  # fmt: skip
    named = replace(dense, feature_names=[f"f{j}" for j in range(7)])
    slot = replace(dense, classes=["\x00array\x00", "b", "c"])  # the document written at once
    for m in (dense, sparse, named, slot, model([[]], [0.0], classes=[-1, 1])):
        streamed = b"".join(json_chunks(m, per_chunk))
        assert json.loads(streamed) == json.loads(dumps(json_document(m)))


def test_the_json_export_holds_a_slice_of_its_text_at_a_time():
    # before: the whole document was built in memory, about 20 bytes a weight (2.7 GB for a
    # model of 2^27 weights), on top of the model itself
    m = model(np.random.default_rng(0).standard_normal((1, 1 << 20)), [0.0], classes=[-1, 1])
    tracemalloc.start()
    try:
        size = sum(len(chunk) for chunk in json_chunks(m))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert size > 16 * 2**20 and peak < 2**20, (size / 2**20, peak / 2**20)
