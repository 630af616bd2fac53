"""What a user may mistype or be handed to the `margin` client commands (missing files, empty
or path-like ids, hostile names, numbers beyond a float): one line or plain text, never a
traceback or another resource."""

from __future__ import annotations

import json

import pytest

from margin_client import Client
from tests.client.cli_helpers import ESC, as_json, margin


def test_local_file_errors_are_one_line_not_a_traceback(service, tmp_path):
    for args in (("datasets", "upload", str(tmp_path / "missing.svm")),
                 ("datasets", "upload", str(tmp_path))):  # fmt: skip
        result = margin(service, *args)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: ") and str(tmp_path) in result.stderr
    empty = tmp_path / "empty.svm"
    empty.write_text("\n")
    result = margin(service, "predict", "mdl_any", str(empty))  # before: AttributeError
    assert result.returncode == 1 and result.stderr == f"error: no instances in {empty}\n"
    missing = tmp_path / "missing.csv"  # before: "404 Dataset not found: ... no dataset with id"
    result = margin(service, "train", str(missing))  # evaluate reads its argument the same way
    assert result.returncode == 1, result.stderr
    assert result.stderr == f"error: No such file (nor a dataset id): {missing}\n"


def test_an_empty_or_path_like_id_names_no_other_resource(service, heart_dataset):
    # before: `models rm ''` printed "removed" with status 0 (the 307 to the list was taken for
    # success), `datasets show ''` died on the redirect's empty body with a traceback, and
    # `datasets show ../jobs` listed the jobs
    for args in (("datasets", "show", ""), ("models", "rm", ""), ("jobs", "cancel", " ")):
        result = margin(service, *args)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
        assert "id must be a non-empty string" in result.stderr
    result = margin(service, "datasets", "show", "../jobs", "--json")
    assert result.returncode == 1 and json.loads(result.stderr)["status"] == 404
    result = margin(service, "datasets", "show", f"../datasets/{heart_dataset}", "--json")
    assert result.returncode == 1 and json.loads(result.stderr)["status"] == 404


def test_hostile_names_print_as_text(service, tmp_path):
    """Names come from whoever uploaded them: `[/bold]` (rich markup closing nothing) stopped
    `datasets list` and `show` with a MarkupError traceback, an ESC sequence reached the
    terminal raw, and a class name holding a comma made two columns of one in predict's CSV."""
    import csv
    import io

    names = ["[/bold]", "\x1b[31mred", "a,b"]
    rows = [f'"{names[i % 3]}",{i % 3},{i}' for i in range(30)]
    table = tmp_path / "[red]hostile.csv"
    table.write_text("label,a,b\n" + "\n".join(rows) + "\n")
    dataset = as_json(margin(service, "datasets", "upload", str(table), "--json"))
    for args in (("datasets", "list"), ("datasets", "show", dataset["id"])):
        shown = margin(service, *args)
        assert shown.returncode == 0, shown.stderr
        assert ESC not in shown.stdout
        assert "[/bold]" in shown.stdout  # a list's "\\x1b[31mred:10", show's JSON "\\u001b…"
        assert "\\x1b[31mred:10" in shown.stdout or "\\u001b[31mred" in shown.stdout
        assert "[red]hostile.csv" in shown.stdout
    job = as_json(margin(service, "train", dataset["id"], "--follow", "--json"))
    model = as_json(margin(service, "models", "show", job["model_id"], "--json"))
    assert sorted(model["classes"]) == sorted(names)
    instances = tmp_path / "x.csv"
    instances.write_text("a,b\n0,0\n1,1\n2,2\n")
    predicted = margin(service, "predict", job["model_id"], str(instances))
    assert predicted.returncode == 0, predicted.stderr
    read = list(csv.reader(io.StringIO(predicted.stdout)))
    assert read[0][:2] == ["row", "label"] and {len(row) for row in read} == {len(read[0])}
    assert {row[1] for row in read[1:]} <= set(names)


def test_a_number_beyond_a_float_is_one_line_not_a_traceback(service, heart_dataset):
    """`--C 1e400` reads as inf, which JSON cannot hold: the encoder's ValueError ("Out of range
    float values are not JSON compliant") ended the command with a traceback."""
    with Client(service.url) as client:
        before = len(client.jobs.list())
    for args in (("--C", "1e400"), ("--param", "tol=1e400"), ("--Cs", "0.1,1e400")):
        result = margin(service, "train", heart_dataset, *args)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr and "finite" in result.stderr, result.stderr
    with Client(service.url) as client:
        assert len(client.jobs.list()) == before


def test_a_limit_under_one_is_refused_in_one_line_as_the_service_refuses_it(service, heart_dataset):
    """`--limit 0` listed one item (each page asked for at least one); the service answers
    limit=0 with a 422, so the client refuses it before any request."""
    for command in (("datasets", "list"), ("jobs", "list"), ("models", "list"),
                    ("registry", "list")):
        result = margin(service, *command, "--limit", "0")
        assert result.returncode == 2, (command, result)
        assert result.stdout == ""
        assert result.stderr == "error: limit must be at least 1, got 0\n"
    with Client(service.url) as client, pytest.raises(ValueError, match="at least 1, got -3"):
        client.datasets.list(limit=-3)
    one = as_json(margin(service, "datasets", "list", "--limit", "1", "--json"))
    assert len(one) == 1
