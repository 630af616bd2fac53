"""Idempotency-Key: a retried creating POST returns the resource the first one created.

The key is stored in the same transaction as the resource, so a concurrent duplicate fails on the
primary key and the caller replays the winner's resource.

A key is remembered for IDEMPOTENCY_TTL_HOURS (24 by default, the window common payment APIs
keep keys for: a client retries within minutes, not days). After that a request with the same key
is a fresh request: `lookup` ignores an expired record at once and `remember` replaces it, so the
answer never depends on when the periodic sweep (`forget_expired`, run by the workers' reaper)
last removed the expired rows; the sweep only keeps the table from growing.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app import tenancy
from app.errors import ProblemError
from app.tables import LOCAL_TENANT, IdempotencyKey, utcnow

MAX_KEY_LENGTH = 255


def check_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ProblemError(
            422,
            "Invalid Idempotency-Key",
            f"Idempotency-Key: expected 1 to {MAX_KEY_LENGTH} characters, got {len(key)}",
        )
    return key


def request_hash(body: Any) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def tenant_scope(scope: str) -> str:
    """Keys are per tenant: another tenant's identical key is a different key."""
    tenant = tenancy.current_tenant()
    return scope if tenant in (None, LOCAL_TENANT) else f"{scope}:{tenant}"


def expired_before(ttl_hours: float) -> datetime:
    """Records created before this are forgotten."""
    return utcnow() - timedelta(hours=ttl_hours)


def lookup(
    session: Session,
    scope: str,
    key: str,
    body_hash: str | None,
    ttl_hours: float,
    legacy_hash: str | None = None,
) -> str | None:
    """The resource id created under this key within the last `ttl_hours`, or None; 422 if the
    key came with another body. `legacy_hash` is the same body's fingerprint as an earlier
    release computed it: a key it stored before an upgrade still matches its retry."""
    row = session.get(IdempotencyKey, (tenant_scope(scope), key))
    if row is None or row.created_at < expired_before(ttl_hours):
        return None
    if body_hash is not None and row.request_hash not in (None, body_hash, legacy_hash):
        raise reused()
    return row.resource_id


def reused() -> ProblemError:
    return ProblemError(
        422,
        "Idempotency-Key reused",
        "Idempotency-Key: this key was already used with a different request body",
    )


def deleted(kind: str, resource_id: str) -> ProblemError:
    """The answer to a key whose resource was deleted since: creating another one under the same
    key would make a late retry of the first request create a second resource."""
    return ProblemError(
        409,
        "Idempotency-Key of a deleted resource",
        f"Idempotency-Key: the {kind} created with this key ({resource_id}) was deleted since; "
        "send a new key to create another",
    )


def remember(
    session: Session,
    scope: str,
    key: str,
    body_hash: str | None,
    resource_id: str,
    ttl_hours: float,
) -> None:
    """Record the key in the creating transaction; an expired record of the same key that the
    sweep has not removed yet gives way (a live one makes the insert fail, and the caller
    replays)."""
    scoped = tenant_scope(scope)
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.scope == scoped,
            IdempotencyKey.key == key,
            IdempotencyKey.created_at < expired_before(ttl_hours),
        )
    )
    session.add(
        IdempotencyKey(scope=scoped, key=key, request_hash=body_hash, resource_id=resource_id)
    )


def forget_expired(session: Session, ttl_hours: float) -> int:
    """Delete the records older than `ttl_hours` (every tenant's); returns how many went."""
    result = session.execute(
        delete(IdempotencyKey).where(IdempotencyKey.created_at < expired_before(ttl_hours))
    )
    return result.rowcount
