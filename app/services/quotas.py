"""Per-tenant quotas: stored bytes and active (queued or running) jobs; 429 beyond them.

Limits are the tenant's own (`tenants` row) or the service-wide defaults (QUOTA_STORAGE_MB,
QUOTA_ACTIVE_JOBS; unset means unlimited). Checks run inside the transaction that creates the
resource and lock the tenant's row first, so concurrent requests of one tenant cannot both slip
under the limit (SQLite serializes writers anyway; PostgreSQL takes the row lock).
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app import tenancy
from app.errors import ProblemError
from app.tables import ACTIVE_STATUSES, Dataset, Job, Tenant
from app.tenancy import Principal

STORAGE_RETRY_AFTER_S = 60
JOBS_RETRY_AFTER_S = 5


def _limits(session: Session, principal: Principal) -> tuple[int | None, int | None]:
    row = session.get(Tenant, principal.tenant, with_for_update=True)
    if row is None:
        return principal.quota_storage_bytes, principal.quota_active_jobs
    storage = row.max_storage_bytes
    jobs = row.max_active_jobs
    return (
        storage if storage is not None else principal.quota_storage_bytes,
        jobs if jobs is not None else principal.quota_active_jobs,
    )


def storage_used(session: Session, tenant: str) -> int:
    used = session.scalar(
        select(func.coalesce(func.sum(Dataset.size_bytes), 0)).where(Dataset.tenant == tenant)
    )
    return int(used or 0)


def check_storage(session: Session, incoming_bytes: int) -> None:
    """429 when storing `incoming_bytes` more would put the current tenant over its quota."""
    principal = tenancy.current()
    if principal is None:
        return
    limit, _ = _limits(session, principal)
    if limit is None:
        return
    used = storage_used(session, principal.tenant)
    if used + incoming_bytes > limit:
        raise ProblemError(
            429,
            "Storage quota exceeded",
            f"tenant {principal.tenant!r} stores {used} bytes; this upload of {incoming_bytes} "
            f"bytes would exceed its quota of {limit} bytes (delete datasets to make room)",
            quota_bytes=limit,
            used_bytes=used,
            headers={"Retry-After": str(STORAGE_RETRY_AFTER_S)},
        )


def check_active_jobs(session: Session) -> None:
    """429 when the current tenant already has as many queued or running jobs as allowed."""
    principal = tenancy.current()
    if principal is None:
        return
    _, limit = _limits(session, principal)
    if limit is None:
        return
    active = session.scalar(
        select(func.count())
        .select_from(Job)
        .where(Job.tenant == principal.tenant, Job.status.in_(ACTIVE_STATUSES))
    )
    if active >= limit:
        raise ProblemError(
            429,
            "Job quota exceeded",
            f"tenant {principal.tenant!r} has {active} queued or running jobs, its limit is "
            f"{limit}; retry when one ends",
            quota_active_jobs=limit,
            headers={"Retry-After": str(JOBS_RETRY_AFTER_S)},
        )
