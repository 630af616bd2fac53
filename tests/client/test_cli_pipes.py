"""The `margin` client commands through pipes, from a file to predictions: `--json` is plain
JSON, human output has no control codes, predictions and exports are written as asked, and a
reader that leaves ends the command quietly."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from margin_client import Client
from tests.client.cli_helpers import ESC, as_json, margin
from tests.client.conftest import HEART, ROOT, Service
from tests.deploy.cluster import wait_for


def test_version(service):
    result = margin(service, "--version")
    assert result.returncode == 0 and re.fullmatch(r"margin \d+\.\d+\.\d+\S*\n", result.stdout)


def test_from_a_file_to_predictions_through_pipes(service, tmp_path):
    # bytes of its own: a tenant's upload of content it already stored returns that dataset
    # (under the name it was stored with), whichever test of the session stored it first
    own = tmp_path / "heart_cli"
    own.write_bytes(HEART.read_bytes() + b"\n")
    dataset = as_json(margin(service, "datasets", "upload", str(own), "--name", "cli", "--json"))
    assert dataset["n_rows"] == 270 and dataset["name"] == "cli"
    listed = as_json(margin(service, "datasets", "list", "--json"))
    assert dataset["id"] in [d["id"] for d in listed]
    assert as_json(margin(service, "datasets", "show", dataset["id"], "--json")) == dataset

    job = as_json(margin(service, "train", dataset["id"], "--C", "0.5", "--loss", "hinge",
                         "--param", "shrinking=false", "--follow", "--json"))
    assert job["status"] == "succeeded" and job["params"]["shrinking"] is False
    assert job["params"]["C"] == 0.5 and job["params"]["loss"] == "hinge"
    shown = as_json(margin(service, "jobs", "show", job["id"], "--json"))
    assert shown["model_id"] == job["model_id"]
    jobs = as_json(margin(service, "jobs", "list", "--status", "succeeded", "--json"))
    assert job["id"] in [j["id"] for j in jobs]
    model = as_json(margin(service, "models", "show", job["model_id"], "--json"))
    assert model["job_id"] == job["id"]

    predicted = as_json(margin(service, "predict", model["id"], str(HEART), "--json"))
    assert len(predicted["labels"]) == 270
    # the model's classes as the service writes them (before: -1.0 and 1.0, the client's floats)
    assert {type(v) for v in predicted["labels"]} == {int}
    assert set(predicted["labels"]) <= set(model["classes"]) == {-1, 1}
    report = as_json(margin(service, "evaluate", model["id"], dataset["id"], "--json"))
    assert report["accuracy"] == pytest.approx(model["train_accuracy"])
    assert sum(predicted["labels"][i] == label for i, label in enumerate(
        float(line.split()[0]) for line in HEART.read_text().splitlines())) == round(
            report["accuracy"] * 270)

    out = tmp_path / "p.csv"
    result = margin(service, "predict", model["id"], "-", "-o", str(out),
                    stdin=HEART.read_text())
    assert result.returncode == 0, result.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "row,label,decision_value" and len(rows) == 271
    exported = tmp_path / "m.model"
    as_json(margin(service, "models", "export", model["id"], "-o", str(exported), "--json"))
    assert exported.read_text().startswith("solver_type L2R_L1LOSS_SVC_DUAL")

    as_json(margin(service, "models", "rm", model["id"], "--json"))
    as_json(margin(service, "datasets", "rm", dataset["id"], "--json"))
    missing = margin(service, "datasets", "show", dataset["id"])
    assert missing.returncode == 1 and "404 Dataset not found" in missing.stderr


def test_prediction_runs_start_list_download_and_cancel(
    service, heart_model, heart_dataset, capsys, tmp_path
):
    from margin_client.cli import main  # in this process: no interpreter to start each time

    def cli(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--url", service.url])
        return (code, *capsys.readouterr())

    code, out, _ = cli("runs", "start", heart_model, heart_dataset, "--json")
    run = json.loads(out)
    with Client(service.url) as client:
        ended = wait_for(
            lambda: (r := client.runs.get(heart_model, run["id"]))["status"]
            not in ("queued", "running") and r,
            60, "the run to end",
        )  # fmt: skip
    assert code == 0 and ended["status"] == "succeeded" and ended["n_rows"] == 270
    code, out, _ = cli("runs", "list", heart_model)
    assert code == 0 and "status" in out and "succeeded" in out
    code, out, _ = cli("runs", "show", heart_model, run["id"], "--json")
    assert code == 0 and json.loads(out) == ended
    written = tmp_path / "run.csv"  # before: the CSV only through the API or the Python client
    code, out, _ = cli("runs", "download", heart_model, run["id"], "-o", str(written), "--json")
    assert code == 0 and json.loads(out) == {"id": run["id"], "path": str(written)}
    with Client(service.url) as client:
        client.runs.download(heart_model, run["id"], tmp_path / "reference.csv")
    assert written.read_bytes() == (tmp_path / "reference.csv").read_bytes()
    assert len(written.read_text().splitlines()) == 271  # the header and one row per instance
    code, _, err = cli("runs", "cancel", heart_model, run["id"])
    assert code == 1 and "409 Prediction run already ended" in err
    code, _, err = cli("runs", "start", heart_model, heart_dataset, "--probabilities")
    assert code == 1 and "422 No probability calibration" in err, err  # heart_model has none


def test_human_output_has_no_control_codes_when_piped(service, heart_dataset, heart_model):
    with Client(service.url) as client:
        ids = {"datasets": [d["id"] for d in client.datasets.list()],
               "jobs": [j["id"] for j in client.jobs.list()],
               "models": [m["id"] for m in client.models.list()]}  # fmt: skip
    for args in (("datasets", "list"), ("jobs", "list"), ("models", "list"),
                 ("datasets", "show", heart_dataset)):
        result = margin(service, *args)
        assert result.returncode == 0, result.stderr
        assert ESC not in result.stdout
        assert "ds_" in result.stdout or args[0] != "datasets"
        if args[1] == "list":  # before: rich cut piped tables at 80 columns ("mdl_01a21…")
            assert "…" not in result.stdout, result.stdout
            assert set(ids[args[0]]) <= set(result.stdout.split()), result.stdout


def test_export_writes_the_binary_formats(service, heart_model, tmp_path):
    # before: --format took only liblinear or json, though the service also exports onnx, skops
    path = tmp_path / "heart.onnx"
    written = as_json(margin(service, "models", "export", heart_model, "--format", "onnx",
                             "-o", str(path), "--json"))
    assert written == {"id": heart_model, "format": "onnx", "path": str(path)}
    with Client(service.url) as client:  # the bytes the service sends (they load: test_client)
        assert path.read_bytes() == client.models.export(heart_model, format="onnx")


def test_predict_writes_probabilities(service, heart_dataset, tmp_path):
    # before: margin predict had no way to ask for probabilities
    with Client(service.url) as client:
        job = client.jobs.create(heart_dataset, tol=1e-3, probability=True).wait(check=True)
        expected = client.models.predict(job.model_id, HEART.read_text().splitlines(),
                                         probabilities=True).probabilities
    out = tmp_path / "p.csv"
    result = margin(service, "predict", job.model_id, str(HEART), "--probabilities",
                    "-o", str(out))
    assert result.returncode == 0, result.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "row,label,decision_value,probability_-1,probability_1"
    shown = [[float(v) for v in row.split(",")[3:]] for row in rows[1:]]
    assert shown == expected.tolist()


def test_predict_writes_a_regressors_values_as_numbers(service, heart_dataset, tmp_path):
    # before: each cell was numpy's repr, "np.float64(0.93...)"
    with Client(service.url) as client:
        job = client.jobs.create(heart_dataset, "LinearSVR", {"tol": 1e-3}).wait(check=True)
        expected = client.models.predict(job.model_id, HEART.read_text().splitlines()).values
    out = tmp_path / "v.csv"
    result = margin(service, "predict", job.model_id, str(HEART), "-o", str(out))
    assert result.returncode == 0, result.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "row,value"
    assert [float(row.split(",")[1]) for row in rows[1:]] == expected.tolist()


def test_upload_of_stored_bytes_under_another_name_says_which_dataset_it_is(service, tmp_path):
    # before: the stored dataset came back under its first name without a word, as though
    # --name had been ignored
    own = tmp_path / "heart_named"
    own.write_bytes(HEART.read_bytes() + b"\n\n")
    first = as_json(margin(service, "datasets", "upload", str(own), "--name", "one", "--json"))
    again = margin(service, "datasets", "upload", str(own), "--name", "two", "--json")
    assert again.returncode == 0 and as_json(again)["id"] == first["id"]
    assert f"already stored as {first['id']}, named 'one'" in again.stderr
    same = margin(service, "datasets", "upload", str(own), "--name", "one", "--json")
    assert same.returncode == 0 and "note" not in same.stderr, same.stderr


def test_predict_writes_its_csv_to_the_output_file_with_json_too(service, heart_model, tmp_path):
    # before: --json printed the predictions as JSON and never wrote the file -o named
    out = tmp_path / "p.csv"
    result = margin(service, "predict", heart_model, str(HEART), "-o", str(out), "--json")
    assert result.returncode == 0, result.stderr
    assert as_json(result) == {"model": heart_model, "path": str(out), "n_predictions": 270}
    rows = out.read_text().splitlines()
    assert rows[0] == "row,label,decision_value" and len(rows) == 271


def test_a_reader_that_leaves_ends_the_command_quietly(service, heart_model):
    # before: "error: Broken pipe" and exit 1 under `margin predict ... | head`
    for args in (("predict", heart_model, str(HEART)), ("models", "show", heart_model)):
        read_end, write_end = os.pipe()
        os.close(read_end)  # the reader has left before the first line
        try:
            result = subprocess.run(Service.margin(*args), cwd=ROOT, stdout=write_end,
                                    stderr=subprocess.PIPE, text=True, timeout=120,
                                    env={**service.env, "MARGIN_URL": service.url})
        finally:
            os.close(write_end)
        assert (result.returncode, result.stderr) == (141, ""), result.stderr
