"""`margin registry`: names, versions and aliases from the command line, checked against what
the service's registry routes answer (read with plain HTTP, not through the commands)."""

from __future__ import annotations

import json

import httpx
import pytest

from margin_client import Client
from tests.client.cli_helpers import ESC, margin


@pytest.fixture
def cli(service, capsys):
    from margin_client.cli import main  # in this process: no interpreter to start each time

    def run(*args: str) -> tuple[int, str, str]:
        code = main([*args, "--url", service.url])
        return (code, *capsys.readouterr())

    return run


@pytest.fixture(scope="module")
def two_models(service, heart_dataset, heart_model) -> tuple[str, str]:
    with Client(service.url) as client:
        other = client.jobs.create(heart_dataset, C=4.0, tol=1e-3).wait(check=True).model_id
    return heart_model, other


def api(service, path: str) -> httpx.Response:
    return httpx.get(f"{service.url}/v1/registered-models{path}", timeout=30)


def test_create_add_alias_move_unalias_and_remove(service, cli, two_models):
    first, second = two_models
    code, out, err = cli("registry", "create", "churn", "--description", "weekly churn",
                         "--tag", "team=growth", "--json")
    assert code == 0, err
    created = json.loads(out)
    assert created == api(service, "/churn").json()
    assert created["description"] == "weekly churn" and created["tags"] == {"team": "growth"}
    assert created["latest_version"] is None and created["aliases"] == {}

    code, out, err = cli("registry", "add", "churn", first)
    assert (code, out) == (0, f"churn v1 -> model {first}\n"), err
    code, out, err = cli("registry", "add", "churn", second, "--description", "C=4", "--json")
    added = json.loads(out)
    assert code == 0 and added == api(service, "/churn/versions/2").json()
    assert added["model_id"] == second and added["description"] == "C=4"

    code, out, err = cli("registry", "alias", "churn", "production", "1")
    assert (code, out) == (0, f"churn@production -> v1 (model {first})\n"), err
    assert api(service, "/churn/aliases/production").json()["model_id"] == first
    code, out, err = cli("registry", "alias", "churn", "production", "v2", "--json")  # moved
    assert code == 0 and json.loads(out)["model_id"] == second
    with Client(service.url) as client:  # the model the alias now names, wherever ids are taken
        assert client.models.get("churn@production")["id"] == second

    code, out, err = cli("registry", "list", "--json")
    listed = {r["name"]: r for r in json.loads(out)}
    assert code == 0 and listed["churn"] == api(service, "/churn").json()
    assert listed["churn"]["latest_version"] == 2 and listed["churn"]["aliases"] == {
        "production": 2}
    code, out, err = cli("registry", "show", "churn", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["versions"] == api(service, "/churn/versions").json()["items"]
    assert [(v["version"], v["model_id"], v["aliases"]) for v in shown["versions"]] == [
        (2, second, ["production"]), (1, first, [])]

    code, _, err = cli("registry", "rm", "churn", "2")  # an alias points at it
    assert code == 1 and "409" in err and len(err.splitlines()) == 1, err
    code, out, err = cli("registry", "unalias", "churn", "production")
    assert (code, out) == (0, "removed churn@production\n"), err
    assert api(service, "/churn/aliases/production").status_code == 404
    code, out, err = cli("registry", "rm", "churn", "v1", "--json")
    assert code == 0 and json.loads(out) == {"name": "churn", "version": 1, "deleted": True}
    assert [v["version"] for v in api(service, "/churn/versions").json()["items"]] == [2]
    code, out, err = cli("registry", "rm", "churn", "--all")
    assert (code, out) == (0, "removed churn\n"), err
    assert api(service, "/churn").status_code == 404
    with Client(service.url) as client:  # the models themselves stay
        assert {m["id"] for m in client.models.list()} >= {first, second}


def test_human_output_is_tables_of_whole_lines_when_piped(service, two_models):
    first, second = two_models
    with Client(service.url) as client:
        client.registry.create("fraud", description="[/bold] \x1b[31m not markup")
        client.registry.add_version("fraud", first)
        client.registry.add_version("fraud", second)
        client.registry.set_alias("fraud", "staging", 2)
        client.registry.set_alias("fraud", "production", 1)
    try:
        listed = margin(service, "registry", "list")
        assert listed.returncode == 0, listed.stderr
        assert ESC not in listed.stdout and "\\x1b[31m" in listed.stdout, listed.stdout
        row = next(line.strip() for line in listed.stdout.splitlines()
                   if line.split()[:1] == ["fraud"])
        assert row.split()[1:4] == ["v2", "production=v1", "staging=v2"], row
        assert "[/bold]" in row  # as written, neither markup nor an error

        shown = margin(service, "registry", "show", "fraud")
        assert shown.returncode == 0 and ESC not in shown.stdout, shown.stderr
        lines = [line.strip() for line in shown.stdout.splitlines()]
        assert any(line.split() == ["latest_version", "2"] for line in lines), lines
        versions = [line.split()[:3] for line in lines if line.startswith("v")]
        assert versions == [["version", "model", "aliases"], ["v2", second, "staging"],
                            ["v1", first, "production"]], shown.stdout
    finally:
        with Client(service.url) as client:
            client.registry.delete("fraud")


def test_an_unknown_name_is_a_one_line_error(service, cli, heart_model):
    for args in (("show", "nope"), ("add", "nope", heart_model), ("alias", "nope", "prod", "1"),
                 ("unalias", "nope", "prod"), ("rm", "nope", "1"), ("rm", "nope", "--all")):
        code, out, err = cli("registry", *args)
        assert (code, out) == (1, ""), (args, err)
        assert err == "error: 404 Registered model not found: no registered model 'nope'\n", args
    code, _, err = cli("registry", "show", "nope", "--json")  # the problem document, as JSON
    assert code == 1 and json.loads(err)["status"] == 404

    with Client(service.url) as client:
        client.registry.create("known")
    try:
        code, _, err = cli("registry", "alias", "known", "prod", "3")
        assert code == 1 and err == "error: 404 Model version not found: 'known' has no version 3\n"
        code, _, err = cli("registry", "add", "known", "mdl_missing")
        assert code == 1 and err.startswith("error: 404 Model not found") and err.count("\n") == 1
        code, _, err = cli("registry", "create", "known")
        assert code == 1 and err.startswith("error: 409 Name taken") and err.count("\n") == 1
        code, _, err = cli("registry", "create", "bad@name")
        assert code == 1 and err.startswith("error: 422 Invalid name") and err.count("\n") == 1
    finally:
        with Client(service.url) as client:
            client.registry.delete("known")


def test_arguments_are_checked_before_any_request(service):
    for args, message in (
        (("rm", "churn"), "give a VERSION, or --all"),
        (("rm", "churn", "1", "--all"), "give a VERSION, or --all"),
        (("alias", "churn", "prod", "latest"), "expected a version number (3 or v3)"),
        (("alias", "churn", "prod", "0"), "expected a version number (3 or v3)"),
        (("create", "churn", "--tag", "team"), "--tag expects KEY=VALUE"),
    ):
        result = margin(service, "registry", *args)
        assert result.returncode != 0 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    empty = margin(service, "registry", "show", "")  # would list the names instead
    assert empty.returncode == 2 and "must be a non-empty string" in empty.stderr
