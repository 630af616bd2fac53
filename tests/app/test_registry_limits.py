"""The registry's limits, each at its bound and just over it (names 128 characters, aliases 64,
descriptions 4,000, 50 tags of keys 64 and values 256), the name rule the OpenAPI schema states
against the one the server applies, versions added at once from threads: each gets its own number
(the registered row is locked while the next is taken), and the latest version of a model when
two share a timestamp."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

from tests.app.model_rows import N_FEATURES

R = "/v1/registered-models"


def new_model(service) -> str:
    coef = np.random.default_rng(1).standard_normal((1, N_FEATURES))
    return service.add_model(coef, np.array([0.3]), classes=[-1, 1])


@pytest.mark.parametrize(
    ("field", "at", "over"),
    [
        ("name", "a" * 128, "a" * 129),
        ("description", "d" * 4000, "d" * 4001),
        ("tags", {f"k{i}": "v" for i in range(50)}, {f"k{i}": "v" for i in range(51)}),
        ("tags", {"k" * 64: "v"}, {"k" * 65: "v"}),
        ("tags", {"k": "v" * 256}, {"k": "v" * 257}),
    ],
)
def test_a_registered_model_at_each_limit_is_kept_and_over_it_refused(client, field, at, over):
    body = {"name": "limits", field: at}
    kept = client.post(R, json=body)
    assert kept.status_code == 201, kept.text
    assert kept.json()[field] == at
    refused = client.post(R, json={**body, "name": "over", field: over})
    assert refused.status_code == 422, refused.text
    assert refused.json()["errors"][0]["field"].startswith(field)
    assert client.get(f"{R}/over").status_code == 404
    # PATCH refuses the same values (and a name, which is no field of it: unknown fields are
    # refused, never ignored)
    patched = client.patch(f"{R}/{kept.json()['name']}", json={field: over})
    assert patched.status_code == 422, patched.text
    assert client.get(f"{R}/{kept.json()['name']}").json()[field] == at


def test_an_alias_of_64_characters_is_kept_and_65_refused(client, service):
    client.post(R, json={"name": "m"})
    client.post(f"{R}/m/versions", json={"model_id": new_model(service)})
    kept = client.put(f"{R}/m/aliases/{'a' * 64}", json={"version": 1})
    assert kept.status_code == 200, kept.text
    refused = client.put(f"{R}/m/aliases/{'a' * 65}", json={"version": 1})
    assert refused.status_code == 422, refused.text
    assert client.get(f"{R}/m").json()["aliases"] == {"a" * 64: 1}


def test_versions_added_at_once_get_distinct_numbers(app, client, service):
    client.post(R, json={"name": "m"})
    models = [new_model(service) for _ in range(3)]
    start, answers = threading.Barrier(8), []

    def add(model_id: str) -> None:
        with TestClient(app, base_url="http://localhost") as own:
            start.wait()
            answers.append(own.post(f"{R}/m/versions", json={"model_id": model_id}))

    threads = [threading.Thread(target=add, args=(models[i % 3],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(a.status_code for a in answers) == [201] * 8
    assert sorted(a.json()["version"] for a in answers) == list(range(1, 9))
    listed = client.get(f"{R}/m/versions").json()["items"]
    assert [v["version"] for v in listed] == list(range(8, 0, -1))


def test_the_served_name_rule_is_the_one_the_server_applies(client):
    field = client.get("/openapi.json").json()["components"]["schemas"]["RegisteredModelIn"]
    name = field["properties"]["name"]
    assert name["maxLength"] == 128 and name["minLength"] == 1
    assert name["description"] == (
        "1 to 128 ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, "
        "not starting with 'mdl_'"
    )
    pattern = re.compile(name["pattern"])  # ECMA 262 here is also Python's syntax
    candidates = [
        "a", "Z9", "7up", "a.b_c-d", "a" * 128, "mdlx", "mdl-x", "x_mdl_",  # accepted
        "a" * 129, "-a", ".a", "_a", "a b", "a@b", "a/b", "a+b", "é", "mdl_x",  # refused
    ]  # fmt: skip
    for candidate in candidates:
        answer = client.post(R, json={"name": candidate})
        assert answer.status_code in (201, 422), answer.text
        assert (answer.status_code == 201) == bool(pattern.search(candidate)), candidate


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("a" * 127 + "+", "1 to 128 ASCII letters, digits, '.', '_' or '-'"),
        ("a" * 129, "at most 128 characters"),
    ],
)
def test_a_name_just_outside_the_rule_is_refused_with_a_clear_message(client, name, message):
    assert client.post(R, json={"name": name[:-1]}).status_code == 201  # one character less
    refused = client.post(R, json={"name": name})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"].startswith("name: ")
    assert message in refused.json()["detail"]
    assert client.get(R).json()["items"][0]["name"] == name[:-1]
    assert len(client.get(R).json()["items"]) == 1
