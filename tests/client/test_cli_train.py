"""`margin train`: a search over C with calibration, a file argument uploaded first (with the
upload's table options), and flags that state the service's defaults."""

from __future__ import annotations

import pytest

from margin_client import Client
from tests.client.cli_helpers import as_json, margin
from tests.client.conftest import HEART


def test_train_searches_C_and_calibrates(service, heart_dataset):
    # before: a search could only be asked for by --param 'search={...}' in JSON
    job = as_json(margin(service, "train", heart_dataset, "--Cs", "0.01,0.1,1", "--cv", "3",
                         "--scoring", "balanced_accuracy", "--follow", "--json"))
    assert job["status"] == "succeeded"
    assert job["params"]["search"] == {"Cs": [0.01, 0.1, 1.0], "cv": 3,
                                       "scoring": "balanced_accuracy"}
    model = as_json(margin(service, "models", "show", job["model_id"], "--json"))
    assert model["params"]["C"] in (0.01, 0.1, 1.0)
    assert model["selection"]["C"] == model["params"]["C"] and model["calibration"]
    # before: the search's table was one JSON value, and rich padded every line to its width
    shown = margin(service, "models", "show", job["model_id"])
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert all(line == line.rstrip() for line in lines) and max(map(len, lines)) < 250
    table = lines[lines.index("3-fold cross-validation, balanced_accuracy:") + 2 :]
    assert lines[lines.index("3-fold cross-validation, balanced_accuracy:") - 1].startswith(
        "passes: of each fold's solve, started from the previous C's solution")
    assert [float(line.strip(" *").split()[0]) for line in table] == pytest.approx([0.01, 0.1, 1])
    marked = [line.split()[1] for line in table if line.lstrip().startswith("*")]
    assert marked == [f"{model['params']['C']:.4g}"]
    plain = as_json(margin(service, "train", heart_dataset, "--probability", "--calibration",
                           "isotonic", "--json"))
    assert plain["params"]["probability"] is True and plain["params"]["search"] is None
    assert plain["params"]["calibration"] == "isotonic"
    refused = margin(service, "train", heart_dataset, "--Cs", "0.1,-1")
    assert refused.returncode == 2 and "every C must be > 0" in refused.stderr


def test_a_train_file_argument_is_uploaded_first(service):
    job = as_json(margin(service, "train", str(HEART), "--tol", "0.01", "--json"))
    assert job["status"] in ("queued", "running", "succeeded")
    with Client(service.url) as client:
        assert client.datasets.get(job["dataset_id"])["n_rows"] == 270


def test_a_table_file_argument_is_read_by_the_upload_options(service, tmp_path):
    # before: train, evaluate and runs start uploaded a file with the defaults only, so a table
    # whose label column is not "label" was read with its first column as the label
    table = tmp_path / "table.csv"
    rows = [(i / 10, (i % 3) / 3, "yes" if i % 2 else "no") for i in range(20)]
    table.write_text("x1,x2,target\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))
    refused = margin(service, "train", str(table), "--json")
    assert refused.returncode == 1 and "column 'target'" in refused.stderr
    job = as_json(margin(service, "train", str(table), "--label-column", "target", "--follow",
                         "--json"))
    with Client(service.url) as client:
        labels = client.datasets.get(job["dataset_id"])["labels"]
    assert labels["classes"] == [{"label": "no", "count": 10}, {"label": "yes", "count": 10}]
    scored = as_json(margin(service, "evaluate", job["model_id"], str(table),
                            "--label-column", "target", "--json"))
    assert scored["n"] == 20 and scored["labels"] == ["no", "yes"]
    wrong = margin(service, "evaluate", job["model_id"], job["dataset_id"],
                   "--label-column", "target")
    assert wrong.returncode == 1 and "is a stored dataset" in wrong.stderr


def test_train_flags_state_the_services_defaults():
    """`margin train --help` names each flag's default: they are the service's own."""
    from app.schemas.params import LinearSVCParams, LinearSVRParams
    from margin_client.cli_jobs import TRAIN_FLAGS

    svc = {k: f.default for k, f in LinearSVCParams.model_fields.items()}
    svr = {k: f.default for k, f in LinearSVRParams.model_fields.items()}
    helps = {name: text for name, _, text in TRAIN_FLAGS.values()}
    assert f"default {svc['C']:g}" in helps["C"]
    assert f"default {svc['tol']:g}" in helps["tol"] and f"LinearSVR {svr['tol']:g}" in helps["tol"]
    assert f"default {svc['max_iter']}" in helps["max_iter"]
    assert f"{svc['loss']} (default)" in helps["loss"]
    assert f"{svr['loss']} (default)" in helps["loss"]
    assert f"{svc['multi_class']} (default)" in helps["multi_class"]
    assert f"default {svr['epsilon']:g}" in helps["epsilon"]


def _labelled_table(path, seed: int) -> None:
    rows = [(i / 10 + seed, (i % 3) / 3, "yes" if i % 2 else "no") for i in range(20)]
    path.write_text("x1,x2,target\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))


def test_a_validation_file_is_uploaded_first_by_the_same_read_options(service, tmp_path):
    # before: --validation took an id only, and a file answered "404 no dataset with id"
    train, held_out = tmp_path / "train.csv", tmp_path / "held_out.csv"
    _labelled_table(train, 0)
    _labelled_table(held_out, 1)
    job = as_json(margin(service, "train", str(train), "--validation", str(held_out),
                         "--label-column", "target", "--json"))
    assert job["validation_dataset_id"].startswith("ds_")
    assert job["validation_dataset_id"] != job["dataset_id"]
    with Client(service.url) as client:
        stored = client.datasets.get(job["validation_dataset_id"])
    assert stored["filename"] == "held_out.csv" and stored["n_rows"] == 20
    # the options read the validation file beside a stored DATASET, not refused for the id
    beside_id = margin(service, "train", job["dataset_id"], "--validation", str(held_out),
                       "--label-column", "target", "--json")
    assert as_json(beside_id)["validation_dataset_id"] == job["validation_dataset_id"]


def test_a_missing_file_or_model_leaves_no_dataset_uploaded(service, tmp_path):
    # before: DATASET was uploaded, and stored, before the missing VALIDATION was found
    train, missing = tmp_path / "uploaded_never.csv", tmp_path / "missing.csv"
    _labelled_table(train, 11)
    result = margin(service, "train", str(train), "--validation", str(missing),
                    "--label-column", "target")
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"error: No such file (nor a dataset id): {missing}\n"
    # before: evaluate and runs start uploaded the file, then asked for the missing model
    for command in (("evaluate", "mdl_missing"), ("runs", "start", "mdl_missing")):
        wrong = margin(service, *command, str(train), "--label-column", "target")
        assert wrong.returncode == 1 and "mdl_missing" in wrong.stderr, wrong.stderr
    with Client(service.url) as client:
        assert train.name not in {dataset["filename"] for dataset in client.datasets.list()}


def test_a_file_argument_stored_before_is_not_said_to_be_uploaded(service, tmp_path):
    # before: "uploaded X as ds_..." whether the upload stored it or answered the stored one
    table = tmp_path / "again.csv"
    _labelled_table(table, 7)
    first = margin(service, "train", str(table), "--label-column", "target", "--follow",
                   "--json")
    assert f"uploaded {table} as ds_" in first.stderr, first.stderr
    model = as_json(first)["model_id"]
    for command in (("evaluate", model), ("runs", "start", model)):
        again = margin(service, *command, str(table), "--label-column", "target", "--json")
        assert again.returncode == 0, again.stderr
        assert f"{table} was already stored as ds_" in again.stderr, again.stderr
        assert "uploaded" not in again.stderr
    with Client(service.url) as client:
        assert client.datasets.upload(table, label_column="target").created is False
