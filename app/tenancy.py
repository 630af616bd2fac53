"""Tenants: who is asking (a `Principal`), and keeping each tenant's rows to itself.

The request's principal lives in a context variable set by authentication (`app.auth`). While it
is set, every ORM query of this process sees only that tenant's datasets, jobs, models and
prediction runs (a `with_loader_criteria` added to each ORM execution), and new rows of those
kinds are stamped with the tenant. Worker processes, migrations and the CLI never set it and see
every row. Another tenant's row is thus simply absent: the routes answer 404 (not 403), in lists
too, without each route having to remember the rule.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

from sqlalchemy import event
from sqlalchemy.orm import ORMExecuteState, Session, with_loader_criteria

from app.scopes import SCOPES
from app.tables import (
    LOCAL_TENANT,
    Dataset,
    Job,
    Model,
    ModelAlias,
    ModelVersion,
    PredictionRun,
    RegisteredModel,
)

__all__ = ["LOCAL_TENANT", "OWNED", "SCOPES", "Principal", "current", "current_tenant", "install"]
OWNED = (Dataset, Job, Model, PredictionRun, RegisteredModel, ModelVersion, ModelAlias)


@dataclass(frozen=True)
class Principal:
    """The tenant a request acts for and what it may do."""

    tenant: str
    scopes: frozenset[str]
    key_id: str | None = None  # None when no key was sent (AUTH_MODE off)
    quota_storage_bytes: int | None = field(default=None, compare=False)
    quota_active_jobs: int | None = field(default=None, compare=False)
    quota_active_prediction_runs: int | None = field(default=None, compare=False)
    rate_limit: str | None = field(default=None, compare=False)  # app.rate_limits notation

    def allows(self, scope: str) -> bool:
        return "admin" in self.scopes or scope in self.scopes


_current: ContextVar[Principal | None] = ContextVar("margin_principal", default=None)


def current() -> Principal | None:
    """The principal of the request being served, or None outside requests (workers, CLI)."""
    return _current.get()


def current_tenant() -> str | None:
    principal = _current.get()
    return principal.tenant if principal is not None else None


def set_current(principal: Principal | None):
    """Make `principal` the current one; returns the token for `reset_current`."""
    return _current.set(principal)


def reset_current(token) -> None:
    _current.reset(token)


def _restrict_to_tenant(state: ORMExecuteState) -> None:
    tenant = current_tenant()
    if tenant is None or not (state.is_select or state.is_update or state.is_delete):
        return
    state.statement = state.statement.options(
        *(
            # `tenant` is a closure variable: SQLAlchemy turns it into a bound parameter
            with_loader_criteria(cls, lambda c: c.tenant == tenant, include_aliases=True)
            for cls in OWNED
        )
    )


def _stamp_new_rows(session: Session, flush_context, instances) -> None:
    tenant = current_tenant()
    if tenant is None:
        return
    for obj in session.new:
        if isinstance(obj, OWNED) and getattr(obj, "tenant", None) is None:
            obj.tenant = tenant


def install() -> None:
    """Attach the tenant filter to every ORM session of this process (idempotent)."""
    if not event.contains(Session, "do_orm_execute", _restrict_to_tenant):
        event.listen(Session, "do_orm_execute", _restrict_to_tenant)
        event.listen(Session, "before_flush", _stamp_new_rows)
