"""Registry routes: registered model names, their versions and aliases."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from sqlalchemy import select

from app.deps import DatabaseDep, SessionDep
from app.schemas.common import DEFAULT_LIMIT, MAX_LIMIT, Page, decimal, keyset_page
from app.schemas.registry import (
    MAX_VERSION,
    AliasIn,
    AliasOut,
    ModelVersionIn,
    ModelVersionOut,
    RegisteredModelIn,
    RegisteredModelOut,
    RegistryPatch,
)
from app.services import registry
from app.tables import ModelAlias, ModelVersion, RegisteredModel

router = APIRouter(tags=["registry"])
Name = Annotated[str, Path(max_length=registry.NAME_MAX)]
Alias = Annotated[str, Path(max_length=64)]
Version = Annotated[int, Path(ge=1, le=MAX_VERSION)]


@router.post("/registered-models", status_code=201, response_model=RegisteredModelOut)
def create_registered_model(body: RegisteredModelIn, db: DatabaseDep, response: Response):
    """Register a name; versions are added from stored models."""
    with db.write() as session:
        row = registry.create(session, body.name, body.description, body.tags)
        out = registry.registered_view(session, row)
    response.headers["Location"] = f"/v1/registered-models/{body.name}"
    return out


@router.get("/registered-models", response_model=Page[RegisteredModelOut])
def list_registered_models(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    items, nxt = keyset_page(
        session, select(RegisteredModel), RegisteredModel.name, limit, cursor, descending=False
    )
    return {"items": [registry.registered_view(session, r) for r in items], "next": nxt}


@router.get("/registered-models/{name}", response_model=RegisteredModelOut)
def get_registered_model(name: Name, session: SessionDep):
    return registry.registered_view(session, registry.registered_or_404(session, name))


@router.patch("/registered-models/{name}", response_model=RegisteredModelOut)
def update_registered_model(name: Name, body: RegistryPatch, db: DatabaseDep):
    """Change the description or replace the tags."""
    with db.write() as session:
        row = registry.registered_or_404(session, name, lock=True)
        _patch(row, body)
        return registry.registered_view(session, row)


@router.delete("/registered-models/{name}", status_code=204)
def delete_registered_model(name: Name, db: DatabaseDep) -> Response:
    """Delete the name with its versions and aliases (the models themselves stay)."""
    with db.write() as session:
        session.delete(registry.registered_or_404(session, name, lock=True))
    return Response(status_code=204)


@router.post(
    "/registered-models/{name}/versions", status_code=201, response_model=ModelVersionOut
)
def create_model_version(name: Name, body: ModelVersionIn, db: DatabaseDep, response: Response):
    """Add a stored model as the name's next version (numbered 1, 2, ...)."""
    with db.write() as session:
        row = registry.add_version(session, name, body.model_id, body.description, body.tags)
        out = registry.version_view(session, name, row)
    response.headers["Location"] = f"/v1/registered-models/{name}/versions/{out['version']}"
    return out


@router.get("/registered-models/{name}/versions", response_model=Page[ModelVersionOut])
def list_model_versions(
    name: Name,
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT,
    cursor: str | None = None,
):
    """Versions, newest first."""
    registered = registry.registered_or_404(session, name)
    query = select(ModelVersion).where(ModelVersion.registered_model_id == registered.id)
    items, nxt = keyset_page(
        session, query, ModelVersion.version, limit, cursor, position=_int_cursor
    )
    return {"items": [registry.version_view(session, name, r) for r in items], "next": nxt}


@router.get("/registered-models/{name}/versions/{version}", response_model=ModelVersionOut)
def get_model_version(name: Name, version: Version, session: SessionDep):
    registered = registry.registered_or_404(session, name)
    row = registry.version_or_404(session, registered, version)
    return registry.version_view(session, name, row)


@router.patch("/registered-models/{name}/versions/{version}", response_model=ModelVersionOut)
def update_model_version(name: Name, version: Version, body: RegistryPatch, db: DatabaseDep):
    with db.write() as session:
        registered = registry.registered_or_404(session, name, lock=True)
        row = registry.version_or_404(session, registered, version)
        _patch(row, body)
        return registry.version_view(session, name, row)


@router.delete("/registered-models/{name}/versions/{version}", status_code=204)
def delete_model_version(name: Name, version: Version, db: DatabaseDep) -> Response:
    """Delete a version (409 while an alias points at it); the model itself stays."""
    with db.write() as session:
        registry.delete_version(session, name, version)
    return Response(status_code=204)


@router.put("/registered-models/{name}/aliases/{alias}", response_model=AliasOut)
def set_model_alias(name: Name, alias: Alias, body: AliasIn, db: DatabaseDep):
    """Point an alias at a version, creating or moving it in one step."""
    with db.write() as session:
        row = registry.set_alias(session, name, alias, body.version)
        return _alias_view(session, name, row)


@router.get("/registered-models/{name}/aliases/{alias}", response_model=AliasOut)
def get_model_alias(name: Name, alias: Alias, session: SessionDep):
    registered = registry.registered_or_404(session, name)
    return _alias_view(session, name, _alias_or_404(session, registered, alias))


@router.delete("/registered-models/{name}/aliases/{alias}", status_code=204)
def delete_model_alias(name: Name, alias: Alias, db: DatabaseDep) -> Response:
    with db.write() as session:
        registered = registry.registered_or_404(session, name, lock=True)
        session.delete(_alias_or_404(session, registered, alias))
    return Response(status_code=204)


def _alias_or_404(session, registered, alias: str) -> ModelAlias:
    from app.errors import ProblemError

    row = session.get(ModelAlias, (registered.id, alias))
    if row is None:
        raise ProblemError(404, "Alias not found", f"{registered.name!r} has no alias {alias!r}")
    return row


def _alias_view(session, name: str, row: ModelAlias) -> dict:
    version = session.get(ModelVersion, (row.registered_model_id, row.version))
    return {"name": name, "alias": row.alias, "version": row.version,
            "model_id": version.model_id, "updated_at": row.updated_at}  # fmt: skip


def _patch(row, body: RegistryPatch) -> None:
    from app.tables import utcnow

    fields = body.model_fields_set
    if "description" in fields:
        row.description = body.description
    if "tags" in fields:
        row.tags = body.tags or {}
    if hasattr(row, "updated_at"):
        row.updated_at = utcnow()


def _int_cursor(value: str) -> int:
    from app.errors import ProblemError

    version = decimal(value, MAX_VERSION)
    if version is None:
        raise ProblemError(422, "Invalid cursor", "cursor: expected a value from 'next'")
    return version
