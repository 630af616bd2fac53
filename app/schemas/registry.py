"""Schemas of the model registry (registered names, versions, aliases) and of model lineage."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from app.schemas.common import RequestBody
from app.services.registry import NAME_MAX, NAME_PATTERN, NAME_RULE


def refuse_nul(text: str) -> str:
    """PostgreSQL's text holds no NUL character (its description failed at the database, and
    SQLite and the tags' JSON stored it): refused here on either database."""
    if "\x00" in text:
        raise ValueError("holds a NUL character (U+0000), which registry text cannot")
    return text


NoNul = AfterValidator(refuse_nul)
TagKey = Annotated[str, StringConstraints(min_length=1, max_length=64), NoNul]
TagValue = Annotated[str, StringConstraints(max_length=256), NoNul]
Tags = Annotated[dict[TagKey, TagValue], Field(max_length=50)]
Description = Annotated[str, StringConstraints(max_length=4000), NoNul]
MAX_VERSION = 10**9


class RegisteredModelIn(RequestBody):
    name: str = Field(
        min_length=1,
        max_length=NAME_MAX,
        description=NAME_RULE,
        json_schema_extra={"pattern": NAME_PATTERN},  # documents check_name, which enforces it
    )
    description: Description | None = None
    tags: Tags = Field(default_factory=dict)


class RegistryPatch(RequestBody):
    """Fields to change (absent: unchanged)."""

    description: Description | None = None
    tags: Tags | None = None


class ModelVersionIn(RequestBody):
    model_config = ConfigDict(protected_namespaces=())

    model_id: str = Field(min_length=1, max_length=40)
    description: Description | None = None
    tags: Tags = Field(default_factory=dict)


class AliasIn(RequestBody):
    version: int = Field(ge=1, le=MAX_VERSION)


class RegisteredModelOut(BaseModel):
    name: str
    description: str | None
    tags: dict[str, str]
    latest_version: int | None = Field(description="the newest version that exists (null: none)")
    aliases: dict[str, int] = Field(description="alias -> version")
    created_at: datetime
    updated_at: datetime


class ModelVersionOut(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    name: str
    version: int
    model_id: str
    description: str | None
    tags: dict[str, str]
    aliases: list[str]
    created_at: datetime


class AliasOut(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    name: str
    alias: str
    version: int
    model_id: str
    updated_at: datetime


class LineageDataset(BaseModel):
    id: str
    name: str
    sha256: str = Field(description="SHA-256 of the upload as received")
    content_key: str | None = Field(description="the bytes and the options they were parsed by")
    format: str | None
    n_rows: int
    n_features: int


class LineageOut(BaseModel):
    model_config = ConfigDict(protected_namespaces=())

    model_id: str
    job_id: str | None
    estimator: str
    params: dict[str, Any]
    dataset: LineageDataset | None
    validation_dataset: LineageDataset | None
    package_version: str | None
    commit: str | None = Field(description="the code's commit, stamped at build (null: unknown)")
    solver: dict[str, Any] = Field(description="status, final gap, iterations, training time")
    metrics: dict[str, float | None]
    registered: list[dict[str, Any]] = Field(description="names and versions of this model")
    created_at: datetime
