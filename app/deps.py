"""Typed FastAPI dependencies: the app's settings and database session, and rows or 404."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.errors import ProblemError
from app.tables import Dataset, Job, Model


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_database(request: Request) -> Database:
    return request.app.state.db


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.db.session() as session:
        yield session


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
DatabaseDep = Annotated[Database, Depends(get_database)]
# "function": the session (and its pooled connection) is given back when the endpoint returns,
# before the response is sent, so a streamed response (events, exports, downloads) read slowly
# by its client does not hold a connection for its whole life.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


def not_found(kind: str, ident: str) -> ProblemError:
    return ProblemError(404, f"{kind} not found", f"no {kind.lower()} with id {ident!r}")


def dataset_or_404(dataset_id: str, session: SessionDep) -> Dataset:
    row = session.get(Dataset, dataset_id)
    if row is None:
        raise not_found("Dataset", dataset_id)
    return row


def job_or_404(job_id: str, session: SessionDep) -> Job:
    row = session.get(Job, job_id)
    if row is None:
        raise not_found("Job", job_id)
    return row


def model_or_404(model_id: str, session: SessionDep) -> Model:
    """The model of an id, or of a registry reference (``name@alias``, ``name@vN``)."""
    from app.services import registry

    resolved = registry.resolve(session, model_id) if registry.is_reference(model_id) else model_id
    # the weights load when a route reads them (model_from_row), in this session
    row = session.get(Model, resolved, options=[Model.without_weights()]) if resolved else None
    if row is None:
        raise not_found("Model", model_id)
    return row


DatasetDep = Annotated[Dataset, Depends(dataset_or_404)]
JobDep = Annotated[Job, Depends(job_or_404)]
ModelDep = Annotated[Model, Depends(model_or_404)]
