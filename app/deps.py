"""Typed FastAPI dependencies: the app's settings and database session, and rows or 404."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from types import UnionType
from typing import Annotated, Union, get_args, get_origin

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from sqlalchemy.orm import Session
from starlette.datastructures import Headers, QueryParams

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


async def sent_once(request: Request) -> None:
    """Dependency of every API router: a single-valued query parameter or header of the route
    sent twice is a 422 naming it. FastAPI reads the last value of a query parameter and the
    first of a header, and a client's duplicate silently chose a format, a name, a flag or an
    Idempotency-Key it may not have meant. List parameters (`?status=a&status=b`) may repeat;
    names the route does not take are ignored, as they are when sent once. Async: it reads no
    file or database, and a plain function would cost every request a thread hop."""
    query = request.query_params
    repeated_query = len(query) != len(query.multi_items())
    header_names = request.headers.keys()
    repeated_header = len(header_names) != len(set(header_names))
    if not (repeated_query or repeated_header):  # nothing repeated: nothing to look up
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    if repeated_query:
        check_sent_once(query, _single_valued(dependant, "query_params"))
    if repeated_header:
        for name in _single_valued(dependant, "header_params"):
            check_header_once(request.headers, name.replace("_", "-"))


def check_header_once(headers: Headers, header: str) -> None:
    """422 for `header` sent more than once (routes that read a header by hand, such as v2
    infer, call it with the header they read)."""
    if len(headers.getlist(header)) > 1:
        shown = "-".join(part.capitalize() for part in header.split("-"))
        raise ProblemError(422, "Invalid request", f"{shown}: send it once")


def check_sent_once(query: QueryParams, names: Iterable[str]) -> None:
    """422 for the first of `names` sent more than once in the query string (routes that read
    their query by hand, such as predict, call it with the names they read)."""
    for name in names:
        if len(query.getlist(name)) > 1:
            raise ProblemError(422, "Invalid request", f"{name}: send it once in the query string")


def _single_valued(dependant: Dependant, kind: str) -> list[str]:
    """The query parameters or headers (``kind``: the Dependant's list of them) of a route and
    of its dependencies that take one value."""
    names, pending = [], [dependant]
    while pending:
        current = pending.pop()
        params = getattr(current, kind)
        names += [p.alias for p in params if not _repeatable(p.field_info.annotation)]
        pending += current.dependencies
    return names


async def plain_integers(request: Request) -> None:
    """Dependency of every router: an integer of the URL (a query or path parameter the route
    takes as `int`) is plain ASCII decimal digits, else a 422 naming it. Pydantic's lax int took
    `limit=5_0` as 50 and `+5`, ` 5` or `5.0` as 5, so that a typo read as another number."""
    if not request.query_params and not request.path_params:
        return
    dependant = getattr(request.scope.get("route"), "dependant", None)
    if dependant is None:
        return
    sent = {"query": request.query_params, "path": request.path_params}
    for kind, name in integer_params(dependant):
        text = sent[kind].get(name)
        if text is not None and not (text.isascii() and text.isdigit()):
            raise RequestValidationError([{
                "type": "int_parsing", "loc": (kind, name), "input": text,
                "msg": "Input should be an integer in plain decimal digits (0-9)",
            }])  # fmt: skip


def integer_params(dependant: Dependant) -> list[tuple[str, str]]:
    """`("query" or "path", name)` of each parameter of a route and of its dependencies that
    takes an integer (`int` or `int | None`)."""
    found, pending = [], [dependant]
    while pending:
        current = pending.pop()
        for kind in ("path", "query"):
            params = getattr(current, f"{kind}_params")
            found += [(kind, p.alias) for p in params if _integer(p.field_info.annotation)]
        pending += current.dependencies
    return found


def _plain_types(annotation) -> list:
    """The types a parameter's annotation admits, `Annotated` and unions taken apart
    (`Annotated[int | None, ...]` → [int, NoneType])."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _plain_types(get_args(annotation)[0])
    if origin is Union or origin is UnionType:
        return [kind for arg in get_args(annotation) for kind in _plain_types(arg)]
    return [annotation]


def _integer(annotation) -> bool:
    return any(kind is int for kind in _plain_types(annotation))


def _repeatable(annotation) -> bool:
    """Whether a query parameter's type takes a list of values (`list[str] | None`)."""
    return any(
        isinstance(get_origin(kind) or kind, type)
        and issubclass(get_origin(kind) or kind, list | tuple | set | frozenset)
        for kind in _plain_types(annotation)
    )


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
