"""Predict request parsing and decision rules, without a database."""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from app.services import predict_json
from app.services.prediction import (
    InvalidInstances,
    LinearModel,
    decision_function,
    dumps,
    parse_body,
    parse_json,
    parse_text,
    predict_payload,
)


def make_model(
    zero_based=False, n_features=5, classes=(-1, 1), kind="classifier", coef=None, intercept=None
):
    coef = np.arange(1.0, n_features + 1)[None, :] if coef is None else np.asarray(coef, float)
    intercept = np.full(coef.shape[0], -0.5) if intercept is None else np.asarray(intercept, float)
    return LinearModel(
        id="m",
        kind=kind,
        classes=list(classes),
        n_features=n_features,
        zero_based=zero_based,
        coef=coef,
        intercept=intercept,
    )


def js(doc):
    import json

    return json.dumps(doc).encode()


def test_sparse_json_uses_the_training_files_numbering():
    one = parse_json(
        js({"instances": [{"indices": [1, 5], "values": [2.0, 3.0]}]}),
        make_model(zero_based=False),
        10,
    )
    zero = parse_json(
        js({"instances": [{"indices": [0, 4], "values": [2.0, 3.0]}]}),
        make_model(zero_based=True),
        10,
    )
    expected = np.array([[2.0, 0, 0, 0, 3.0]])
    np.testing.assert_array_equal(one.toarray(), expected)
    np.testing.assert_array_equal(zero.toarray(), expected)


def test_unsorted_indices_and_integers_as_values_are_accepted():
    X = parse_json(js({"instances": [{"indices": [3, 1], "values": [1, 2.5]}]}), make_model(), 10)
    np.testing.assert_array_equal(X.toarray(), [[2.5, 0, 1.0, 0, 0]])


def test_features_beyond_the_model_are_ignored():
    X = parse_json(
        js({"instances": [{"indices": [2, 6, 900], "values": [1.0, 7.0, 8.0]}]}), make_model(), 10
    )
    assert X.shape == (1, 5)
    np.testing.assert_array_equal(X.toarray(), [[0, 1.0, 0, 0, 0]])


def test_dense_rows_and_mixed_forms():
    model = make_model()
    X = parse_json(js({"instances": [[0, 1.5, 0, 0, 2], {"indices": [], "values": []}]}), model, 10)
    np.testing.assert_array_equal(X.toarray(), [[0, 1.5, 0, 0, 2], [0, 0, 0, 0, 0]])


@pytest.mark.parametrize("streamed", [False, True], ids=["small", "streamed"])
def test_a_dense_row_longer_than_the_model_is_rejected(monkeypatch, streamed):
    if streamed:
        monkeypatch.setattr(predict_json, "SMALL_JSON", 0)
    with pytest.raises(InvalidInstances, match="instances\\[1\\]: a dense instance needs 5 values"):
        parse_json(js({"instances": [[0] * 5, [0, 1.5, 0, 0, 2, 99.0]]}), make_model(), 10)


def test_text_lines_with_and_without_labels_equal_json():
    model = make_model()
    text = b"+1 1:0.5 3:2 # a comment\n\n  4:1e-3 qid:7\n-1\n"
    X = parse_text(text, model, 10)
    np.testing.assert_array_equal(
        X.toarray(), [[0.5, 0, 2, 0, 0], [0, 0, 0, 1e-3, 0], [0, 0, 0, 0, 0]]
    )
    assert parse_body(text, "text/plain; charset=utf-8", model, 10).shape == (3, 5)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {"instances": [{"indices": [1, 2], "values": [1.0]}]},
            "instances[0]: 'indices' and 'values' must have the same length, got 2 indices and 1",
        ),
        (
            {"instances": [{"indices": [1], "values": [1.0]}, {"indices": [0], "values": [1.0]}]},
            "instances[1]: feature index 0 is out of range: the model's indices are one-based",
        ),
        ({"instances": [{"indices": [-3], "values": [1.0]}]}, "feature index -3 is out of range"),
        (
            {"instances": [{"indices": [2, 4, 2], "values": [1.0, 1.0, 1.0]}]},
            "instances[0]: feature index 2 appears more than once",
        ),
        (
            {"instances": [{"indices": [1.5], "values": [1.0]}]},
            "instances[0]: indices[0] must be an integer, got a number 1.5",
        ),
        (
            {"instances": [{"indices": [1.0], "values": [1.0]}]},
            "instances[0]: indices[0] must be an integer, got the number 1.0 (a decimal point or "
            "an exponent makes a JSON number a float); send 1",
        ),
        ({"instances": [{"indices": [True], "values": [1.0]}]}, "indices[0] must be an integer"),
        (
            {"instances": [{"indices": [1], "values": ["1"]}]},
            "values[0] must be a number, got a string",
        ),
        (
            {"instances": [{"indices": [1], "values": [None]}]},
            "values[0] must be a number, got null",
        ),
        ({"instances": [{"indices": [2**70], "values": [1.0]}]}, "too large"),
        (
            {"instances": [{"indices": [1], "values": [10**400]}]},
            "'values' holds an integer too large to be a float64 value",
        ),
        ({"instances": [{"indices": [1]}]}, "instances[0]: missing field 'values'"),
        ({"instances": [{"indices": [1], "values": [1], "x": 1}]}, "unexpected field 'x'"),
        (
            {"instances": [{"indices": 1, "values": [1]}]},
            "'indices' must be a list, got an integer",
        ),
        ({"instances": ["1:2"]}, "instances[0]: expected an object"),
        ({"instances": [[1.0, 2.0]]}, "instances[0]: a dense instance needs 5 values"),
        ({"instances": [[1.0, 2.0, "a", 0, 0]]}, "instances[0][2] must be a number, got a string"),
        ({"instances": []}, "expected at least one instance"),
        ({"instances": {}}, "'instances' must be a list, got an object"),
        ({"rows": []}, 'expected a JSON object {"instances": [...]}'),
        ([1, 2], "expected a JSON object"),
        ({"instances": [[1.0] * 5], "extra": 1}, "unexpected field 'extra'"),
        # both forms: the first was read, and the other called an unexpected field
        ({"instances": [[1.0] * 5], "records": [{}]}, "send 'instances' or 'records', not both"),
    ],
)
def test_bad_json_instances_are_rejected_with_a_message(doc, message, monkeypatch):
    with pytest.raises(InvalidInstances, match=None) as info:
        parse_json(js(doc), make_model(), 10)
    assert info.value.status == 422
    assert message in str(info.value)
    # a large body is read instance by instance: the same problems, named the same way where the
    # body has the usual shape
    monkeypatch.setattr(predict_json, "SMALL_JSON", 0)
    with pytest.raises(InvalidInstances) as info:
        parse_json(js(doc), make_model(), 10)
    assert info.value.status == 422
    if isinstance(doc, dict) and set(doc) == {"instances"} and isinstance(doc["instances"], list):
        assert message in str(info.value)


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"instances": [[1.0] * 5], "records": [{}]}, "send 'instances' or 'records', not both"),
        ({"probabilities": True, "instances": [[1.0] * 5], "records": []},
         "send 'instances' or 'records', not both"),
        ({"instances": [[1.0] * 5], "probabilities": True, "records": []},
         "send 'instances' or 'records', not both"),
        ({"instances": [[1.0] * 5], "probabilities": True, "extra": 1},
         "unexpected field after the instances; expected only 'probabilities'"),
        ({"instances": [[1.0] * 5], "extra": 1},
         "unexpected field after the instances; expected only 'probabilities'"),
    ],
)  # fmt: skip
def test_a_large_body_with_both_keys_is_told_to_send_one(doc, message, monkeypatch):
    # the large body's reader told {"instances": [...], "records": [...]} that 'records' was an
    # unexpected field and only 'probabilities' expected; the small body's names both keys
    monkeypatch.setattr(predict_json, "SMALL_JSON", 0)
    with pytest.raises(InvalidInstances) as info:
        parse_json(js(doc), make_model(), 10)
    assert info.value.status == 422 and message in str(info.value), str(info.value)


def test_zero_is_valid_for_zero_based_models_only():
    doc = js({"instances": [{"indices": [0], "values": [1.0]}]})
    assert parse_json(doc, make_model(zero_based=True), 10).nnz == 1
    with pytest.raises(InvalidInstances, match="start at 1"):
        parse_json(doc, make_model(zero_based=False), 10)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_values_are_rejected(bad):
    import json

    for doc in (
        {"instances": [{"indices": [1, 2], "values": [1.0, bad]}]},
        {"instances": [[0.0, bad, 0, 0, 0]]},
    ):
        with pytest.raises(InvalidInstances, match="expected a finite number"):
            parse_json(json.dumps(doc).encode(), make_model(), 10)
    with pytest.raises(InvalidInstances, match="line 2: value of feature 3"):
        parse_text(f"1:1\n3:{bad}\n".encode(), make_model(), 10)


def test_invalid_json_and_overflowing_numbers():
    with pytest.raises(InvalidInstances, match="not valid JSON"):
        parse_json(b'{"instances": [', make_model(), 10)
    with pytest.raises(InvalidInstances, match="value of feature 1 is inf, expected a finite"):
        parse_json(b'{"instances": [{"indices": [1], "values": [1e999]}]}', make_model(), 10)
    with pytest.raises(InvalidInstances, match="not valid JSON"):
        parse_json(b'{"instances": [NaN', make_model(), 10)


@pytest.mark.parametrize("first", [b"1:0.5 3:2", b"+1 1:0.5 3:2", b"  1:0.5 3:2"])
def test_a_byte_order_mark_before_the_first_line_is_skipped(first):
    # the upload of a LIBSVM file skips one; predict refused the same file's first line
    # ("expected 'index:value' ..., got '\ufeff1:0.5'")
    text = first + b"\n4:1e-3\n"
    X = parse_text("\ufeff".encode() + text, make_model(), 10)
    np.testing.assert_array_equal(X.toarray(), parse_text(text, make_model(), 10).toarray())
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 2, 0, 0], [0, 0, 0, 1e-3, 0]])


@pytest.mark.parametrize("first", [b"# exported", b"", b"  ", b"\r", b"  # note 1:2"])
def test_a_byte_order_mark_before_a_comment_or_blank_first_line_is_skipped(first):
    # the mark was skipped only before an instance: before a comment or a blank line it was
    # read as one ("line 1: expected a label or 'index:value', got '\ufeff'")
    text = first + b"\n1:0.5\n4:1e-3\n"
    X = parse_text("\ufeff".encode() + text, make_model(), 10)
    np.testing.assert_array_equal(X.toarray(), [[0.5, 0, 0, 0, 0], [0, 0, 0, 1e-3, 0]])


def test_a_byte_order_mark_after_the_first_line_is_a_byte_of_its_line():
    # only the body's first bytes may be the mark a file begins with
    with pytest.raises(InvalidInstances, match="line 2: expected 'index:value' .*got '\ufeff4:1'"):
        parse_text(b"1:0.5\n" + "\ufeff".encode() + b"4:1\n", make_model(), 10)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"1:1\nabc 1:2\n", "line 2: expected a label or 'index:value', got 'abc'"),
        (b"1 1:x\n", "line 1: expected 'index:value' with an integer index and a number"),
        (b"1 a:1\n", "line 1: expected 'index:value'"),
        (b"1 2\n", "line 1: expected 'index:value'"),
        (b"1 0:1\n", "line 1: feature index 0 is out of range"),
        (b"1 3:1 3:2\n", "line 1: feature index 3 appears more than once"),
        (b"\n\n# only comments\n", "expected at least one instance"),
        (b"\xff\xfe", "not UTF-8"),
        # what Python's int() and float() take and the upload's reader refuses (before: 1_0
        # was read as 10)
        (b"1 1:1_0\n", "line 1: expected 'index:value' with an integer index and a number"),
        (b"1 1_0:1\n", "line 1: expected 'index:value' with an integer index and a number"),
        (b"1 +1:1\n", "line 1: expected 'index:value' with an integer index and a number"),
        (b"1_1 1:1\n", "line 1: expected a label or 'index:value', got '1_1'"),
    ],
)
def test_bad_text_lines_are_rejected_with_a_message(text, message):
    with pytest.raises(InvalidInstances) as info:
        parse_text(text, make_model(), 10)
    assert message in str(info.value)


def test_batches_over_the_limit_are_413():
    doc = js({"instances": [[0.0] * 5] * 4})
    assert parse_json(doc, make_model(), 4).shape == (4, 5)
    with pytest.raises(InvalidInstances) as info:
        parse_json(doc, make_model(), 3)
    assert info.value.status == 413 and "at most 3" in str(info.value)
    with pytest.raises(InvalidInstances) as info:
        parse_text(b"1:1\n" * 4, make_model(), 3)
    assert info.value.status == 413


def test_unknown_content_type_is_415():
    with pytest.raises(InvalidInstances) as info:
        parse_body(b"x", "application/xml", make_model(), 10)
    assert info.value.status == 415


def test_decision_rules_binary_multiclass_regression():
    rng = np.random.default_rng(0)
    X = sp.random(7, 5, density=0.5, format="csr", random_state=1)
    binary = make_model(classes=[3, 8])
    D = decision_function(binary, X)
    np.testing.assert_allclose(D, X.toarray() @ binary.coef.T + binary.intercept)
    out = predict_payload(binary, X)
    assert out["labels"] == [8 if d > 0 else 3 for d in D[:, 0]]

    coef = rng.standard_normal((3, 5))
    multi = make_model(classes=[0, 1, 2], coef=coef, intercept=[0.1, -0.2, 0.3])
    out = predict_payload(multi, X)
    expected = (X.toarray() @ coef.T + multi.intercept).argmax(axis=1)
    assert out["labels"] == expected.tolist()
    assert out["decision_values"].shape == (7, 3)

    reg = make_model(classes=[], kind="regressor")
    out = predict_payload(reg, X)
    assert set(out) == {"values"}
    np.testing.assert_allclose(out["values"], X.toarray() @ reg.coef[0] - 0.5)


def test_single_row_fast_path_matches_the_batch_path():
    coef = np.random.default_rng(2).standard_normal((4, 50))
    model = make_model(n_features=50, classes=[1, 2, 3, 4], coef=coef, intercept=[0, 1, 2, 3])
    X = sp.random(3, 50, density=0.3, format="csr", random_state=3)
    for i in range(3):
        np.testing.assert_allclose(
            decision_function(model, X[i]), decision_function(model, X)[i : i + 1]
        )


def test_a_zero_decision_value_predicts_the_first_class():
    model = make_model(classes=[-1, 1], intercept=[0.0])
    out = predict_payload(model, sp.csr_matrix((1, 5)))
    assert out["labels"] == [-1]


def test_payload_serializes_with_exact_floats():
    import json

    model = make_model(coef=[[0.1, 0.2, 1 / 3, 0, 0]], intercept=[1e-300])
    X = parse_json(js({"instances": [{"indices": [1, 2, 3], "values": [1.0, 1.0, 1.0]}]}), model, 1)
    out = predict_payload(model, X)
    doc = json.loads(dumps(out))
    assert doc["decision_values"][0][0] == out["decision_values"][0, 0]
    assert not math.isnan(doc["decision_values"][0][0])


def test_the_json_exports_isotonic_rule_says_what_a_row_of_zeros_gives():
    # below every class's first threshold each p_k is 0: the service answers 1/k each, and the
    # export's rule ("normalized to sum to 1") gave 0 / 0 to anyone who followed it
    from dataclasses import replace

    from app.services.export import json_document
    from app.services.prediction import probabilities_of

    model = make_model(coef=np.eye(3, 5), intercept=np.zeros(3), classes=(0, 1, 2))
    calibration = {"method": "isotonic", "x": [[-1.0, 1.0]] * 3, "y": [[0.0, 1.0]] * 3}
    model = replace(model, calibration=calibration)
    rule = json_document(model)["probability_rule"]
    assert "all 0: 1/k each" in rule
    D = np.array([[-5.0, -5.0, -5.0]])
    np.testing.assert_array_equal(probabilities_of(model, D), [[1 / 3] * 3])
