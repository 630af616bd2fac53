"""The model registry: a tenant's names for models, numbered versions, and movable aliases.

A registered name (``fraud``) holds versions 1, 2, ... (numbered in creation order, never
reused), each pointing at one stored model; aliases (``production``, ``staging``, any name) point
at one version and move by a single-row update, so a reader sees the old version or the new one,
never neither. Wherever the API accepts a model id it also accepts a reference:

    mdl_...              the model itself
    {name}@{alias}       the version the alias points at
    {name}@v{N}          version N
    {name}               the latest version (the inference protocol's model name only)

References are resolved in the database, or through `AliasCache` on the prediction routes: an
API process then sees an alias move within ALIAS_CACHE_S seconds.
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import ProblemError
from app.tables import Model, ModelAlias, ModelVersion, RegisteredModel, new_id, utcnow

NAME_MAX = 128
NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{NAME_MAX - 1}}}")  # a model id matches too
# What a new registered name may be (its check and its OpenAPI description and pattern): 'mdl_'
# is a model id's prefix, and '@' and '/' (outside NAME) would split a reference or a path.
NAME_RULE = (
    f"1 to {NAME_MAX} ASCII letters, digits, '.', '_' or '-', starting with a letter or digit, "
    "not starting with 'mdl_'"
)
NAME_PATTERN = rf"^(?!mdl_){NAME.pattern}$"  # JSON Schema (ECMA 262): NAME_RULE as a pattern
ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9._-]{0,63}")
VERSION_REF = re.compile(r"v([0-9]{1,9})")
VERSION_LIKE = re.compile(r"v[0-9]+")  # names an alias may not take, however many digits


def check_name(name: str) -> str:
    if name.startswith("mdl_") or not NAME.fullmatch(name):
        raise ProblemError(
            422, "Invalid name", f"name: {name[:80]!r} is not a usable name: {NAME_RULE}"
        )
    return name


def check_alias(alias: str) -> str:
    if not ALIAS.fullmatch(alias) or VERSION_LIKE.fullmatch(alias):
        raise ProblemError(
            422,
            "Invalid alias",
            f"alias: {alias[:80]!r} is not a usable alias: 1 to 64 letters, digits, '.', '_' or "
            "'-', starting with a letter, and not of the form v<N> (those name versions)",
        )
    return alias


def split_ref(ref: str) -> tuple[str, str | None]:
    """(name, selector) of ``name@selector``; (ref, None) without '@'."""
    name, at, selector = ref.partition("@")
    return (name, selector) if at else (ref, None)


def plausible(ref: str) -> bool:
    """Whether `ref` could name a model: a model id or registered name, or ``name@alias`` /
    ``name@vN`` of usable parts. Anything else names nothing and is answered without a lookup
    (nor a place in the alias cache: 4,000 references of 60 KB held 240 MB there)."""
    name, selector = split_ref(ref)
    if not NAME.fullmatch(name):
        return False
    if selector is None or VERSION_REF.fullmatch(selector):
        return True
    return bool(ALIAS.fullmatch(selector)) and not VERSION_LIKE.fullmatch(selector)


def is_reference(ref: str) -> bool:
    return "@" in ref


# --------------------------------------------------------------------------------------------
# Lookups (in the current tenant's session)


def registered_or_404(session: Session, name: str, lock: bool = False) -> RegisteredModel:
    query = select(RegisteredModel).where(RegisteredModel.name == name)
    row = session.scalar(query.with_for_update() if lock else query)
    if row is None:
        raise ProblemError(404, "Registered model not found", f"no registered model {name!r}")
    return row


def version_or_404(session: Session, registered: RegisteredModel, version: int) -> ModelVersion:
    row = session.get(ModelVersion, (registered.id, version))
    if row is None:
        raise ProblemError(
            404, "Model version not found", f"{registered.name!r} has no version {version}"
        )
    return row


def aliases_of(session: Session, registered_id: str) -> dict[str, int]:
    rows = session.execute(
        select(ModelAlias.alias, ModelAlias.version)
        .where(ModelAlias.registered_model_id == registered_id)
        .order_by(ModelAlias.alias)
    ).all()
    return {alias: version for alias, version in rows}


def resolve(session: Session, ref: str, latest: bool = False) -> str | None:
    """The model id a reference names (None: nothing by that reference). A bare name is the
    latest version only with `latest` (the inference protocol); otherwise it is a model id."""
    name, selector = split_ref(ref)
    if selector is None and not latest:
        return ref
    registered = session.scalar(select(RegisteredModel).where(RegisteredModel.name == name))
    if registered is None:
        return None
    if selector is None:
        version = session.scalar(
            select(func.max(ModelVersion.version)).where(
                ModelVersion.registered_model_id == registered.id
            )
        )
    elif VERSION_REF.fullmatch(selector):
        version = int(selector[1:])
    else:
        version = session.scalar(
            select(ModelAlias.version).where(
                ModelAlias.registered_model_id == registered.id, ModelAlias.alias == selector
            )
        )
    if version is None:
        return None
    row = session.get(ModelVersion, (registered.id, version))
    return row.model_id if row is not None else None


# --------------------------------------------------------------------------------------------
# Changes (in a write session)


def create(session: Session, name: str, description: str | None, tags: dict) -> RegisteredModel:
    check_name(name)
    taken = ProblemError(409, "Name taken", f"a registered model named {name!r} exists")
    if session.scalar(select(RegisteredModel.id).where(RegisteredModel.name == name)):
        raise taken
    row = RegisteredModel(
        id=new_id("rm"), name=name, description=description, tags=tags, latest_version=0
    )
    session.add(row)
    try:
        session.flush()
    except IntegrityError:  # the same name registered at once: the unique index decided
        raise taken from None
    return row


def add_version(
    session: Session, name: str, model_id: str, description: str | None, tags: dict
) -> ModelVersion:
    registered = registered_or_404(session, name, lock=True)
    if model_in_use(session, model_id) is None:
        raise ProblemError(404, "Model not found", f"model_id: no model with id {model_id!r}")
    registered.latest_version += 1
    registered.updated_at = utcnow()
    row = ModelVersion(
        registered_model_id=registered.id,
        version=registered.latest_version,
        model_id=model_id,
        description=description,
        tags=tags,
    )
    session.add(row)
    session.flush()
    return row


def model_in_use(session: Session, model_id: str) -> Model | None:
    """The model a new row is about to point at, locked against its deletion until the row is
    committed (PostgreSQL: FOR KEY SHARE, which the deletion's FOR UPDATE waits for; a deletion
    committed first leaves None)."""
    return session.get(
        Model, model_id, with_for_update={"key_share": True}, options=[Model.without_weights()]
    )


def set_alias(session: Session, name: str, alias: str, version: int) -> ModelAlias:
    """Point `alias` at `version` (one row written: the move is atomic)."""
    check_alias(alias)
    registered = registered_or_404(session, name, lock=True)
    target = version_or_404(session, registered, version)
    if model_in_use(session, target.model_id) is None:  # deleted meanwhile, with the version
        raise ProblemError(404, "Model version not found", f"{name!r} has no version {version}")
    row = session.get(ModelAlias, (registered.id, alias), with_for_update=True)
    if row is None:
        row = ModelAlias(registered_model_id=registered.id, alias=alias, version=version)
        session.add(row)
    row.version = version
    row.updated_at = utcnow()
    session.flush()
    return row


def delete_version(session: Session, name: str, version: int) -> None:
    registered = registered_or_404(session, name, lock=True)
    row = version_or_404(session, registered, version)
    pointing = [a for a, v in aliases_of(session, registered.id).items() if v == version]
    if pointing:
        raise ProblemError(
            409,
            "Version in use",
            f"aliases {', '.join(pointing)} point at version {version}: move or delete them first",
        )
    session.delete(row)


def aliases_pointing_at(session: Session, model_id: str) -> list[str]:
    """``name@alias`` of every alias whose version is this model (a model they name cannot be
    deleted)."""
    rows = session.execute(
        select(RegisteredModel.name, ModelAlias.alias)
        .join(ModelAlias, ModelAlias.registered_model_id == RegisteredModel.id)
        .join(
            ModelVersion,
            (ModelVersion.registered_model_id == ModelAlias.registered_model_id)
            & (ModelVersion.version == ModelAlias.version),
        )
        .where(ModelVersion.model_id == model_id)
    ).all()
    return sorted(f"{name}@{alias}" for name, alias in rows)


def registered_view(session: Session, row: RegisteredModel) -> dict[str, Any]:
    # the newest version that exists: the row's counter numbers new versions and never goes
    # back, while a version goes with its model's deletion or its own
    latest = session.scalar(
        select(func.max(ModelVersion.version)).where(ModelVersion.registered_model_id == row.id)
    )
    return {
        "name": row.name,
        "description": row.description,
        "tags": row.tags or {},
        "latest_version": latest,
        "aliases": aliases_of(session, row.id),
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    }


def version_view(session: Session, name: str, row: ModelVersion) -> dict[str, Any]:
    aliases = [a for a, v in aliases_of(session, row.registered_model_id).items()
               if v == row.version]  # fmt: skip
    return {
        "name": name,
        "version": row.version,
        "model_id": row.model_id,
        "description": row.description,
        "tags": row.tags or {},
        "aliases": aliases,
        "created_at": row.created_at,
    }


# --------------------------------------------------------------------------------------------


class AliasCache:
    """Per-process cache of resolved references: (tenant, reference) -> model id, each entry
    trusted for `ttl_s` seconds (ALIAS_CACHE_S), so that prediction by alias costs no database
    round trip while a moved alias is seen within that bound."""

    def __init__(self, ttl_s: float, size: int = 4096, clock=time.monotonic):
        self.ttl_s = ttl_s
        self.size = size
        self.clock = clock
        self._items: dict[tuple[str, str], tuple[str | None, float]] = {}
        self._lock = threading.Lock()

    def get(self, tenant: str, ref: str) -> tuple[bool, str | None]:
        with self._lock:
            entry = self._items.get((tenant, ref))
        if entry is None or self.clock() - entry[1] >= self.ttl_s:
            return False, None
        return True, entry[0]

    def put(self, tenant: str, ref: str, model_id: str | None) -> None:
        if self.ttl_s <= 0:
            return
        with self._lock:
            if len(self._items) >= self.size:
                self._items.clear()  # crude but bounded; entries live a second anyway
            self._items[(tenant, ref)] = (model_id, self.clock())

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
