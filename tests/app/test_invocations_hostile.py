"""Hostile text/csv and dataframe_split bodies sent to /invocations: a quoted field running over
two lines, a column named twice, a header opened by a UTF-8 byte order mark."""

from __future__ import annotations

import pytest

from tests.app.conftest import NAMES
from tests.app.serving_helpers import predict

pytestmark = pytest.mark.one_database


def post_csv(client, model, text):
    return client.post(
        f"/v1/models/{model}/invocations", content=text, headers={"content-type": "text/csv"}
    )


def row_text(values) -> str:
    return ",".join(repr(v) for v in values)


def test_a_quoted_field_over_two_lines_is_400_not_their_digits_joined(client, served):
    """`"1<LF>2"` was read as 12 (the lines were handed to the parser without their LF)."""
    rest = row_text(served["X"][0].tolist()[1:])
    answer = post_csv(client, served["model"], ",".join(NAMES) + '\n"1\n2",' + rest + "\n")
    assert answer.status_code == 400, answer.text
    assert "1\\n2" in answer.json()["message"]


def test_a_csv_header_naming_a_column_twice_is_400(client, served):
    """'age' twice and 'thal' not at all: the second 'age' overwrote the first, and thal was 0."""
    header = ",".join([*NAMES[:12], "age"])
    row = row_text(served["X"][0].tolist())
    answer = post_csv(client, served["model"], header + "\n" + row + "\n")
    assert answer.status_code == 400, answer.text
    assert "'age' more than once" in answer.json()["message"]


def test_dataframe_split_columns_naming_one_twice_is_400(client, served):
    """14 columns for 13 features, 'age' twice: the first age (5.0) was dropped, answered 200."""
    split = {"columns": ["age", *NAMES], "data": [[5.0, *served["X"][0].tolist()]]}
    answer = client.post(
        f"/v1/models/{served['model']}/invocations", json={"dataframe_split": split}
    )
    assert answer.status_code == 400, answer.text
    assert "'age' more than once" in answer.json()["message"]


def test_a_header_after_a_byte_order_mark_is_read(client, served):
    X, model = served["X"][:2], served["model"]
    labels = predict(client, model, {"instances": X.tolist()})["labels"]
    body = "\ufeff" + ",".join(NAMES) + "\n" + "\n".join(row_text(r) for r in X.tolist()) + "\n"
    answer = post_csv(client, model, body)
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"predictions": labels}


def test_a_reordered_header_after_a_byte_order_mark_is_read_by_name(client, served):
    """The mark made the first name '\\ufeffthal', no feature, and a header of 13 names that
    are not all features was read in the model's order: every column another's, silently."""
    X, model = served["X"], served["model"]
    order = list(range(13))[::-1]
    expected = predict(client, model, {"instances": X.tolist()})
    header = ",".join(NAMES[i] for i in order)
    rows = "\n".join(row_text(r) for r in X[:, order].tolist())
    answer = post_csv(client, model, "\ufeff" + header + "\n" + rows + "\n")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"predictions": expected["labels"]}


def test_a_header_naming_some_features_and_a_stranger_is_400(client, served):
    """13 names, 12 of them features in another order and one misspelt: placed in the model's
    order, every column but the last was read as another feature's."""
    header = ",".join(["ages", *NAMES[1:]][::-1])
    row = row_text(served["X"][0].tolist())
    answer = post_csv(client, served["model"], header + "\n" + row + "\n")
    assert answer.status_code == 400, answer.text
    assert "'ages'" in answer.json()["message"]
