"""``client.registry``: registered model names, their numbered versions and their aliases.

A name's versions point at stored models; ``name@alias``, ``name@v2`` and a bare name (its
latest version) then address a model wherever a model id is taken (``client.models.predict``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from margin_client._http import answer_json, resource_id, segment
from margin_client.models import model_id

if TYPE_CHECKING:
    from margin_client._http import Client


class Registry:
    def __init__(self, client: Client):
        self._client = client

    def _path(self, name: str, *rest: str) -> str:
        parts = [segment(resource_id("registered name", name)), *map(segment, rest)]
        return "/v1/registered-models/" + "/".join(parts)

    def create(
        self, name: str, description: str | None = None, tags: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """Register `name` (no versions yet); a name taken raises MarginError 409."""
        body = {"name": resource_id("registered name", name), "description": description,
                "tags": tags or {}}  # fmt: skip
        return self._client.post_json("/v1/registered-models", body)

    def list(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The tenant's registered names in name order, each with ``latest_version`` and
        ``aliases`` (alias -> version)."""
        return list(self._client.paginate("/v1/registered-models", None, limit))

    def get(self, name: str) -> dict[str, Any]:
        """One registered name: description, tags, latest version, aliases."""
        return self._client.get_json(self._path(name))

    def delete(self, name: str) -> None:
        """Delete the name with its versions and aliases; the models themselves stay."""
        self._client.request("DELETE", self._path(name))

    def versions(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The name's versions, newest first, each with its ``model_id`` and ``aliases``."""
        return list(self._client.paginate(self._path(name, "versions"), None, limit))

    def add_version(
        self,
        name: str,
        model: str | dict[str, Any],
        description: str | None = None,
        tags: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Add a stored model as the name's next version (numbered 1, 2, ...); the version."""
        body = {"model_id": model_id(model), "description": description, "tags": tags or {}}
        return self._client.post_json(self._path(name, "versions"), body)

    def get_version(self, name: str, version: int) -> dict[str, Any]:
        """Version `version` of the name, with its model id and aliases."""
        return self._client.get_json(self._path(name, "versions", str(version)))

    def delete_version(self, name: str, version: int) -> None:
        """Delete a version (MarginError 409 while an alias points at it); the model stays."""
        self._client.request("DELETE", self._path(name, "versions", str(version)))

    def set_alias(self, name: str, alias: str, version: int) -> dict[str, Any]:
        """Point `alias` at `version`, creating it or moving it in one step; the alias with the
        model id it now names."""
        path = self._path(name, "aliases", resource_id("alias", alias))
        return answer_json(self._client.request("PUT", path, json={"version": version}))

    def get_alias(self, name: str, alias: str) -> dict[str, Any]:
        """The version and model id `alias` points at."""
        return self._client.get_json(self._path(name, "aliases", resource_id("alias", alias)))

    def delete_alias(self, name: str, alias: str) -> None:
        """Remove `alias`; the version it pointed at stays."""
        self._client.request("DELETE", self._path(name, "aliases", resource_id("alias", alias)))
