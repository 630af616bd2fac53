"""The `margin` client commands on tables: a CSV or TSV upload with its parse options, and
predict reading a table's columns by the model's feature names (refused, naming why, when the
table does not fit the model)."""

from __future__ import annotations

import gzip
import io
import re

import pytest

from margin_client import Client
from margin_client.tables import TableError, read_instances
from tests.client.cli_helpers import as_json, margin
from tests.client.conftest import HEART, heart_table


def test_upload_a_table_with_its_parse_options(service, tmp_path):
    # before: --format took only libsvm or npz, and a table's label column could not be named
    table = tmp_path / "table.txt"  # no extension to go by
    table.write_text("a,b,target\n1,,1\n0,2,-1\n3,1,1\n")
    dataset = as_json(margin(service, "datasets", "upload", str(table), "--format", "csv",
                             "--label-column", "target", "--empty-cells", "zero", "--json"))
    assert dataset["format"] == "csv" and dataset["feature_names"] == ["a", "b"]
    assert dataset["n_rows"] == 3 and dataset["nnz"] == 4
    assert {c["label"]: c["count"] for c in dataset["labels"]["classes"]} == {-1: 1, 1: 2}
    refused = margin(service, "datasets", "upload", str(table), "--format", "csv")
    assert refused.returncode == 1 and "line 2" in refused.stderr  # the empty cell, named


def test_predict_reads_a_table_by_the_models_feature_names(service, tmp_path):
    # before: margin predict read LIBSVM lines only, though a model trained on a CSV upload
    # knows its columns by name
    names = heart_table(tmp_path / "heart.csv")
    dataset = as_json(margin(service, "datasets", "upload", str(tmp_path / "heart.csv"), "--json"))
    assert dataset["feature_names"] == names
    with Client(service.url) as client:
        model = client.jobs.create(dataset["id"], C=0.5, tol=1e-3).wait(check=True).model_id
        # the table's column j is feature j of a zero-based model: the LIBSVM lines, shifted
        shifted = [" ".join([line.split()[0], *(f"{int(p.split(':')[0]) - 1}:{p.split(':')[1]}"
                                                 for p in line.split()[1:])])
                   for line in HEART.read_text().splitlines()]  # fmt: skip
        expected = client.models.predict(model, shifted).decision_values[:, 0]
    # columns in another order, as TSV, without the label column, and gzip-compressed
    reordered = tmp_path / "reordered.tsv.gz"
    rows = [line.split(",") for line in (tmp_path / "heart.csv").read_text().splitlines()]
    reordered.write_bytes(gzip.compress(("\n".join("\t".join(row[:0:-1]) for row in rows)
                                         + "\n").encode()))  # fmt: skip
    for path in (tmp_path / "heart.csv", reordered):
        result = margin(service, "predict", model, str(path), "-o", str(tmp_path / "p.csv"))
        assert result.returncode == 0, result.stderr
        got = [float(r.split(",")[2]) for r in (tmp_path / "p.csv").read_text().splitlines()[1:]]
        assert got == expected.tolist()


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("label,f1\n1,0.5\n", "the model's feature 'f2' is not a column of the file"),
        ("y,f1,f2\n1,0,0\n", "column 'y' is not one of the model's features"),
        ("label,f1,f2\n1,,0\n", "line 2, column 'f1': the cell is empty"),
        ("label,f1,f2\n1,x,0\n", "line 2, column 'f1': 'x' is not a number"),
        ("label,f1,f2\n1,inf,0\n", "line 2, column 'f1': 'inf' is not a finite number"),
        ("f1,f2\n1,0\n2\n", "line 3: 1 cells, the header names 2"),
        ("label,f1,f2\n", "no instances after the header line"),
        ("f1,f2\n1,2\n,\n", "line 3, column 'f1': the cell is empty"),  # not a blank line
        ("f1,f1,f2\n1,2,3\n", "the header names column 'f1' twice"),
        ("f1,f2\n1_000,2\n", "line 2, column 'f1': '1_000' is not a number"),
        ("label,f1,f2\n\n1,2,3\n\n4,x,6\n", "line 5, column 'f1': 'x' is not a number"),
        ("", "the file is empty"),
    ],
)  # fmt: skip
def test_a_table_that_does_not_fit_the_model_is_refused_naming_why(table, message):
    with pytest.raises(TableError, match=re.escape(message)):
        read_instances(io.StringIO(table), "csv", ["f1", "f2"])


def test_a_table_is_read_as_the_service_reads_an_upload():
    # a byte-order mark (Excel's "CSV UTF-8") and CRLF line ends, as the service's own upload
    # takes them; a feature named "label" is a feature; blank lines are skipped
    text = "\ufefff2,label,f1\r\n\r\n1,2,3\r\n4,5,6\r\n"
    X = read_instances(io.StringIO(text, newline=""), "csv", ["f1", "f2", "label"])
    assert X.tolist() == [[3, 1, 2], [6, 4, 5]]
    X = read_instances(io.StringIO(text, newline=""), "csv", ["f1", "f2"])
    assert X.tolist() == [[3, 1], [6, 4]]


def test_a_table_error_is_one_line(service, heart_model, tmp_path):
    (tmp_path / "bad.csv").write_text("label,f1\n1,0.5\n")  # heart's model has no names
    result = margin(service, "predict", heart_model, str(tmp_path / "bad.csv"))
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr == (f"error: {tmp_path / 'bad.csv'}: this model's training data had no "
                             "column names: predict LIBSVM lines instead\n")  # fmt: skip
    result = margin(service, "predict", heart_model, str(HEART), "--label-column", "y")
    assert result.returncode == 1 and "--label-column is for CSV and TSV" in result.stderr


def test_text_labels_through_the_client_and_the_cli(service, tmp_path):
    """A CSV of text labels: the CLI lists the classes by name, predict writes the names (the
    client's labels are the same strings), and the LIBLINEAR export says why it cannot."""
    import numpy as np

    rng = np.random.default_rng(3)
    X = np.round(rng.standard_normal((60, 2)), 3)
    names = np.where(X[:, 0] > X[:, 1], "spam", "ham")
    table = tmp_path / "mail.csv"
    lines = [f"{n},{a},{b}\n" for n, (a, b) in zip(names, X, strict=True)]
    table.write_text("label,a,b\n" + "".join(lines))
    dataset = as_json(margin(service, "datasets", "upload", str(table), "--json"))
    counts = {"ham": int(np.sum(names == "ham")), "spam": int(np.sum(names == "spam"))}
    assert {c["label"]: c["count"] for c in dataset["labels"]["classes"]} == counts
    listed = margin(service, "datasets", "list")
    assert f"ham:{counts['ham']} spam:{counts['spam']}" in listed.stdout, listed.stdout
    with Client(service.url) as client:
        model = client.jobs.create(dataset["id"], C=1.0, tol=1e-4).wait(check=True).model_id
        expected = client.models.predict(model, X).labels
    assert expected.dtype.kind == "U" and set(expected) <= {"ham", "spam"}
    result = margin(service, "predict", model, str(table), "-o", str(tmp_path / "p.csv"))
    assert result.returncode == 0, result.stderr
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0].startswith("row,label,decision_value")
    assert [r.split(",")[1] for r in rows[1:]] == expected.tolist()
    assert '"ham", "spam"' in margin(service, "models", "show", model).stdout
    export = margin(service, "models", "export", model, "-o", str(tmp_path / "m.model"))
    assert export.returncode == 1 and "integer labels only" in export.stderr


def test_the_client_predicts_dicts_keyed_by_a_tables_column_names(service, tmp_path):
    # before: ValueError "invalid literal for int() with base 10: 'b'": dicts were read as
    # {feature index: value} only, though the service reads records by name
    import numpy as np

    rng = np.random.default_rng(4)
    X = np.round(rng.standard_normal((40, 2)), 3)
    table = tmp_path / "named.csv"
    lines = [f"{1 if a > b else -1},{a},{b}\n" for a, b in X]
    table.write_text("label,a,b\n" + "".join(lines))
    with Client(service.url) as client:
        dataset = client.datasets.upload(table)
        model = client.jobs.create(dataset, C=1.0, tol=1e-4).wait(check=True).model_id
        expected = client.models.predict(model, X[:3]).decision_values
        by_name = client.models.predict(model, [{"b": b, "a": a} for a, b in X[:3]])
        only_b = client.models.predict(model, [{"b": 1.5}]).decision_values
        assert by_name.decision_values.tolist() == expected.tolist()
        assert only_b.tolist() == client.models.predict(model, [[0, 1.5]]).decision_values.tolist()


def test_runs_start_names_a_feature_the_uploaded_table_lacks(service, tmp_path):
    # before: an unlabelled table's first column was taken as its label without a word, and
    # the run predicted every row with that feature read as 0
    import numpy as np

    rng = np.random.default_rng(5)
    X = np.round(rng.standard_normal((30, 2)), 3)
    labelled, unlabelled = tmp_path / "labelled.csv", tmp_path / "unlabelled.csv"
    labelled.write_text("label,a,b\n" + "".join(f"{1 if a > b else -1},{a},{b}\n" for a, b in X))
    unlabelled.write_text("a,b\n" + "".join(f"{a},{b}\n" for a, b in X))
    with Client(service.url) as client:
        model = client.jobs.create(client.datasets.upload(labelled), tol=1e-3).wait(
            check=True).model_id  # fmt: skip
    warned = margin(service, "runs", "start", model, str(unlabelled))
    assert warned.returncode == 0, warned.stderr
    assert f"warning: {unlabelled} has no feature column for the model's 'a', read as 0" in (
        warned.stderr)  # fmt: skip
    quiet = margin(service, "runs", "start", model, str(labelled))
    assert quiet.returncode == 0 and "warning" not in quiet.stderr, quiet.stderr
