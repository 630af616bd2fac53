"""The model registry: names, versions and aliases, references wherever v1 takes a model id, and
the latest version of a name."""

from __future__ import annotations

from tests.app.serving_helpers import predict, train


def test_registry_names_versions_and_aliases(app, client, served):
    first = served["model"]
    second = train(app, client, served["dataset"]["id"], C=0.01)
    created = {"name": "heart", "description": "d", "tags": {"team": "cardio"}}
    assert client.post("/v1/registered-models", json=created).status_code == 201
    assert client.post("/v1/registered-models", json={"name": "heart"}).status_code == 409
    for bad in ("mdl_x", "a@b", "a/b", ""):
        assert client.post("/v1/registered-models", json={"name": bad}).status_code == 422
    v1 = client.post("/v1/registered-models/heart/versions", json={"model_id": first})
    v2 = client.post("/v1/registered-models/heart/versions", json={"model_id": second})
    assert (v1.json()["version"], v2.json()["version"]) == (1, 2)
    put = client.put("/v1/registered-models/heart/aliases/production", json={"version": 1})
    assert put.status_code == 200 and put.json()["model_id"] == first
    aliases = "/v1/registered-models/heart/aliases"
    assert client.put(f"{aliases}/v3", json={"version": 1}).status_code == 422
    assert client.put(f"{aliases}/v1000000000", json={"version": 1}).status_code == 422  # was 200
    assert client.put(f"{aliases}/x", json={"version": 9}).status_code == 404
    X = served["X"][:5].tolist()
    by_id = predict(client, first, {"instances": X})
    assert predict(client, "heart@production", {"instances": X}) == by_id
    assert predict(client, "heart@v1", {"instances": X}) == by_id
    assert client.get("/v1/models/heart@production").json()["id"] == first
    assert client.get("/v1/models/heart@v2/lineage").json()["model_id"] == second
    assert client.get("/v1/models/heart@v2/export?format=json").status_code == 200
    assert client.post("/v1/models/heart@nope/predict", json={"instances": X}).status_code == 404
    # the alias moves in one step; a model an alias points at cannot be deleted
    client.put("/v1/registered-models/heart/aliases/production", json={"version": 2})
    app.state.alias_cache.clear()
    moved = predict(client, "heart@production", {"instances": X})
    assert moved == predict(client, second, {"instances": X})
    blocked = client.delete(f"/v1/models/{second}")
    assert blocked.status_code == 409 and "heart@production" in blocked.json()["detail"]
    assert client.delete("/v1/registered-models/heart/versions/2").status_code == 409
    info = client.get("/v1/registered-models/heart").json()
    assert info["aliases"] == {"production": 2} and info["latest_version"] == 2
    assert info["tags"] == {"team": "cardio"}
    patched = client.patch("/v1/registered-models/heart/versions/1", json={"tags": {"a": "b"}})
    assert patched.json()["tags"] == {"a": "b"}
    lineage = client.get(f"/v1/models/{second}/lineage").json()
    assert lineage["registered"] == [{"name": "heart", "version": 2, "aliases": ["production"]}]
    assert client.delete(f"/v1/models/{first}").status_code == 204  # its version goes with it
    versions = client.get("/v1/registered-models/heart/versions").json()["items"]
    assert [v["version"] for v in versions] == [2]


def test_latest_version_is_the_newest_version_that_exists(app, client, served):
    """A version goes with its model's deletion (or its own): the name's latest_version said 2
    for a version 2 that was gone (the dashboard linked to it, a 404), while the protocol's
    bare name served version 1. Numbers are still never reused."""
    first = served["model"]
    second = train(app, client, served["dataset"]["id"], C=0.01)
    client.post("/v1/registered-models", json={"name": "heart"})
    for model in (first, second):
        client.post("/v1/registered-models/heart/versions", json={"model_id": model})
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 2
    assert client.delete(f"/v1/models/{second}").status_code == 204
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 1
    assert client.get("/v1/registered-models").json()["items"][0]["latest_version"] == 1
    assert client.get("/v2/models/heart").json()["versions"] == [first]
    assert client.delete("/v1/registered-models/heart/versions/1").status_code == 204
    assert client.get("/v1/registered-models/heart").json()["latest_version"] is None
    again = client.post("/v1/registered-models/heart/versions", json={"model_id": first})
    assert again.json()["version"] == 3
    assert client.get("/v1/registered-models/heart").json()["latest_version"] == 3
