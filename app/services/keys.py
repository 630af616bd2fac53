"""API keys: create (the key is returned once, only its hash is stored), list, revoke; and the
per-tenant quota overrides kept beside them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import or_, select

from app.auth import KEY_PREFIX, generate_key, hash_key
from app.db import Database
from app.tables import ApiKey, Tenant, new_id, utcnow
from app.tenancy import SCOPES

TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
PREFIX_CHARS = 12  # "mgn_" and 8 characters of the token: enough to tell keys apart in a list


class KeyRequestError(ValueError):
    """A key request that cannot be honoured (bad tenant name or scope, unknown key)."""


def check_tenant(tenant: str) -> str:
    if not TENANT_PATTERN.match(tenant or ""):
        raise KeyRequestError(
            f"tenant: expected 1 to 64 characters from A-Z a-z 0-9 _ . - (starting with a letter "
            f"or digit), got {tenant!r}"
        )
    return tenant


def check_scopes(scopes: Iterable[str]) -> list[str]:
    scopes = sorted(set(scopes))
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown or not scopes:
        raise KeyRequestError(
            f"scope: expected one or more of {', '.join(SCOPES)}, got {unknown or []}"
        )
    return scopes


def create_key(db: Database, tenant: str, name: str, scopes: Iterable[str]) -> tuple[ApiKey, str]:
    """Store a new key for `tenant`; returns (row, key). The key itself is never stored."""
    tenant = check_tenant(tenant)
    scopes = check_scopes(scopes)
    if not name or len(name) > 255:
        raise KeyRequestError(f"name: expected 1 to 255 characters, got {len(name or '')}")
    key = generate_key()
    row = ApiKey(
        id=new_id("key"),
        tenant=tenant,
        name=name,
        prefix=key[:PREFIX_CHARS],
        key_hash=hash_key(key),
        scopes=scopes,
    )
    with db.write() as session:
        session.add(row)
        if session.get(Tenant, tenant) is None:
            session.add(Tenant(id=tenant))
    return row, key


def list_keys(db: Database, tenant: str | None = None, revoked: bool = False) -> list[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.tenant, ApiKey.id)
    if tenant is not None:
        query = query.where(ApiKey.tenant == tenant)
    if not revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    with db.session() as session:
        return list(session.scalars(query))


def revoke_key(db: Database, ident: str) -> ApiKey:
    """Revoke the key with this id or display prefix (or the key itself)."""
    if ident.startswith(KEY_PREFIX) and len(ident) > PREFIX_CHARS:
        condition = ApiKey.key_hash == hash_key(ident)
    else:
        condition = or_(ApiKey.id == ident, ApiKey.prefix == ident)
    with db.write() as session:
        rows = list(session.scalars(select(ApiKey).where(condition)))
        if len(rows) != 1:
            found = "no key" if not rows else f"{len(rows)} keys"
            raise KeyRequestError(f"expected one key matching {ident!r}, found {found}")
        row = rows[0]
        if row.revoked_at is None:
            row.revoked_at = utcnow()
    return row


KEEP = "keep"  # a limit set_quota leaves as it is


def set_quota(
    db: Database,
    tenant: str,
    storage_bytes: int | None | str = KEEP,
    active_jobs: int | None | str = KEEP,
    rate_limit: str | None = KEEP,
    active_prediction_runs: int | None | str = KEEP,
) -> Tenant:
    """Set a tenant's own limits: None puts one back to the service-wide default, `KEEP` (the
    default) leaves it as it is. `rate_limit` is a request rate per key in the `limits`
    notation, e.g. "50/second;1000/minute"."""
    from app.rate_limits import InvalidRate, parse_rate

    tenant = check_tenant(tenant)
    if rate_limit not in (None, KEEP):
        try:
            parse_rate(rate_limit)
        except InvalidRate as exc:
            raise KeyRequestError(str(exc)) from None
    limits = {
        "max_storage_bytes": storage_bytes,
        "max_active_jobs": active_jobs,
        "rate_limit": rate_limit,
        "max_active_prediction_runs": active_prediction_runs,
    }
    with db.write() as session:
        row = session.get(Tenant, tenant) or Tenant(id=tenant)
        for column, value in limits.items():
            if value != KEEP:
                setattr(row, column, value)
        session.add(row)
    return row
