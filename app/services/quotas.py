"""Per-tenant quotas: stored bytes, active (queued or running) jobs and active prediction runs;
429 beyond them.

Stored bytes are what the tenant keeps on the service: its datasets' parsed arrays (their upload
size for datasets stored before that was recorded), its models' weights (with the JSON each keeps:
feature names, class names, params, calibration and selection) and its prediction CSVs.
An upload is also stopped while it is parsed, as soon as its arrays outgrow the room left
(`storage_room`, handed to the parser as its budget).

Jobs and prediction runs have separate bounds: a job is a solve in a worker process, a run is
executed by the API process's own runner threads (PREDICTION_CONCURRENCY), so neither should take
the other's room (a tenant training a model can still predict with the previous one).

Limits are the tenant's own (`tenants` row) or the service-wide defaults (QUOTA_STORAGE_MB,
QUOTA_ACTIVE_JOBS, QUOTA_ACTIVE_PREDICTION_RUNS; None means unlimited). A limit is always the
number allowed: a tenant's own 0 allows none, and the service-wide ones are at least 1 (empty
means no bound; `Settings._quota`). Checks run inside the
transaction that creates the resource and lock the tenant's row first, so concurrent requests of
one tenant cannot both slip under the limit (SQLite serializes writers anyway; PostgreSQL takes the
row lock).
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from app import tenancy
from app.errors import ProblemError
from app.tables import ACTIVE_STATUSES, Dataset, Job, Model, PredictionRun, Tenant
from app.tenancy import Principal

STORAGE_RETRY_AFTER_S = 60
JOBS_RETRY_AFTER_S = 5
RUNS_RETRY_AFTER_S = 5


def _limit(session: Session, principal: Principal, column: str, default: int | None) -> int | None:
    """The tenant's own limit in `column` of its row (locked first), else `default`."""
    own = getattr(locked_tenant(session, principal.tenant), column)
    return own if own is not None else default


def locked_tenant(session: Session, tenant: str) -> Tenant:
    """The tenant's row, locked until the transaction ends. A tenant without one (the local
    tenant, or one whose keys were made before rows were) gets an empty row first: without a
    row to lock, two of its requests could both pass a check on PostgreSQL."""
    row = session.get(Tenant, tenant, with_for_update=True)
    if row is None:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        session.execute(insert(Tenant).values(id=tenant).on_conflict_do_nothing())
        row = session.get(Tenant, tenant, with_for_update=True, populate_existing=True)
    return row


def storage_used(session: Session, tenant: str) -> int:
    """Bytes stored by `tenant`: datasets, model weights and prediction CSVs."""
    stored = func.coalesce(Dataset.stored_bytes, Dataset.size_bytes)
    parts = (
        select(func.coalesce(func.sum(stored), 0)).where(Dataset.tenant == tenant),
        select(func.coalesce(func.sum(Model.size_bytes), 0)).where(Model.tenant == tenant),
        select(func.coalesce(func.sum(PredictionRun.size_bytes), 0)).where(
            PredictionRun.tenant == tenant
        ),
    )
    return sum(int(session.scalar(part) or 0) for part in parts)


def storage_room(session: Session) -> int | None:
    """Bytes the current tenant may still store (None: no quota), read without locking."""
    principal = tenancy.current()
    if principal is None:
        return None
    row = session.get(Tenant, principal.tenant)
    limit = row.max_storage_bytes if row is not None else None
    limit = limit if limit is not None else principal.quota_storage_bytes
    if limit is None:
        return None
    return max(0, limit - storage_used(session, principal.tenant))


def storage_exceeded(limit: int, used: int, incoming: int, tenant: str) -> ProblemError:
    return ProblemError(
        429,
        "Storage quota exceeded",
        f"tenant {tenant!r} stores {used} bytes; storing {incoming} bytes more would exceed its "
        f"quota of {limit} bytes (delete datasets, models or prediction runs to make room)",
        quota_bytes=limit,
        used_bytes=used,
        headers={"Retry-After": str(STORAGE_RETRY_AFTER_S)},
    )


def check_storage(session: Session, incoming_bytes: int) -> None:
    """429 when storing `incoming_bytes` more would put the current tenant over its quota."""
    principal = tenancy.current()
    if principal is None:
        return
    limit = _limit(session, principal, "max_storage_bytes", principal.quota_storage_bytes)
    if limit is None:
        return
    used = storage_used(session, principal.tenant)
    if used + incoming_bytes > limit:
        raise storage_exceeded(limit, used, incoming_bytes, principal.tenant)


def _at_limit(session: Session, table, column: str, default: str) -> tuple[str, int, int] | None:
    """(tenant, active, limit) when the current tenant already has as many queued or running
    rows of `table` (jobs, prediction runs) as allowed: its own `column` of its row, else the
    principal's `default` quota; None when it may add one."""
    principal = tenancy.current()
    if principal is None:
        return None
    limit = _limit(session, principal, column, getattr(principal, default))
    if limit is None:
        return None
    active = session.scalar(
        select(func.count())
        .select_from(table)
        .where(table.tenant == principal.tenant, table.status.in_(ACTIVE_STATUSES))
    )
    return (principal.tenant, active, limit) if active >= limit else None


def check_active_jobs(session: Session) -> None:
    """429 when the current tenant already has as many queued or running jobs as allowed."""
    over = _at_limit(session, Job, "max_active_jobs", "quota_active_jobs")
    if over is not None:
        tenant, active, limit = over
        raise ProblemError(
            429,
            "Job quota exceeded",
            f"tenant {tenant!r} has {active} queued or running jobs, its limit is "
            f"{limit}; retry when one ends",
            quota_active_jobs=limit,
            headers={"Retry-After": str(JOBS_RETRY_AFTER_S)},
        )


def check_active_prediction_runs(session: Session) -> None:
    """429 when the current tenant already has as many queued or running prediction runs as
    allowed (its own `max_active_prediction_runs`, else QUOTA_ACTIVE_PREDICTION_RUNS)."""
    over = _at_limit(
        session, PredictionRun, "max_active_prediction_runs", "quota_active_prediction_runs"
    )
    if over is not None:
        tenant, active, limit = over
        raise ProblemError(
            429,
            "Prediction run quota exceeded",
            f"tenant {tenant!r} has {active} queued or running prediction runs, its "
            f"limit is {limit}; retry when one ends, or cancel one",
            quota_active_prediction_runs=limit,
            headers={"Retry-After": str(RUNS_RETRY_AFTER_S)},
        )
