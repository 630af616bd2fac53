"""Bounds on the requests of one kind that an API process serves at once: per tenant, and in all.

Uploads. An upload holds one of the process's parser processes (`parser_pool.ParserPool`) from
its file's first byte until it is parsed (the parser follows the body as it arrives), and a body
may arrive as slowly as MIN_BODY_RATE_KB allows: at the defaults a 2 GB upload may take
MAX_UPLOAD_MB / MIN_BODY_RATE_KB = 32,768 s. An upload that found no free parser would wait for
one, so a few such uploads would hold every parser for hours and every other upload would wait
behind them. So an API process receives at most MAX_UPLOADS_IN_FLIGHT uploads at once and runs
exactly that many parsers (`parser_count`): every upload it accepts has a parser of its own and
never waits for another upload's body. Within that bound each tenant may have at most
MAX_UPLOADS_PER_TENANT uploads in flight, fewer than MAX_UPLOADS_IN_FLIGHT (`Settings`): one
tenant alone cannot take every slot. Several tenants together can, and then the next upload is
refused, not kept waiting.

Evaluations. `POST /v1/models/{id}/evaluate` scores a stored dataset of up to MAX_EVALUATE_ROWS
rows while its client waits, on a thread of the process's pool (the route is synchronous; the
pool has 40 threads, anyio's default). Unbounded, one tenant sending forty at once would hold
them all, and every other synchronous request of every tenant would wait. So a tenant runs at
most MAX_EVALUATIONS_PER_TENANT at once.

Beyond a bound the request is 429 with Retry-After, before its body or any row is read. A
per-tenant bound is service-wide, with no per-tenant override: a tenant allowed more could take
every slot again. The counts are kept under a lock: evaluations hold theirs on threads that run
at once (uploads hold theirs on the event loop, where the lock is never contended).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app import tenancy
from app.errors import ProblemError
from app.tables import LOCAL_TENANT


def parser_count(uploads_in_flight: int) -> int:
    """Parser processes for a bound of `uploads_in_flight`: one for each upload."""
    return uploads_in_flight


@dataclass(frozen=True)
class Bound:
    """At most `limit` at once, set by the setting `name`."""

    limit: int
    name: str


class TenantSlots:
    """The requests of one kind (`kind`, a plural noun) that each tenant has in progress, against
    the bounds `per_tenant` and, where given, `in_all`; `retry_after_s` is what a refused
    client is told to wait."""

    def __init__(
        self, kind: str, per_tenant: Bound, in_all: Bound | None = None, retry_after_s: int = 5
    ):
        self.kind = kind
        self.per_tenant = per_tenant
        self.in_all = in_all
        self.retry_after_s = retry_after_s
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def in_progress(self, tenant: str | None = None) -> int:
        """The requests of `tenant` in progress, or of every tenant."""
        return self._held[tenant] if tenant is not None else self._held.total()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """One of the request's tenant's slots for the duration of the block (without keys,
        the tenant `local`'s); ProblemError 429 when the tenant already holds its share, or
        every slot is held."""
        tenant = tenancy.current_tenant() or LOCAL_TENANT
        with self._lock:
            self._check(tenant)
            self._held[tenant] += 1
        try:
            yield
        finally:
            with self._lock:
                self._held[tenant] -= 1
                if not self._held[tenant]:
                    del self._held[tenant]

    def _check(self, tenant: str) -> None:
        if self._held[tenant] >= self.per_tenant.limit:
            self._refuse(
                self.per_tenant,
                f"this tenant already has {self.per_tenant.limit} {self.kind} in progress on "
                f"this server, the most allowed at once ({self.per_tenant.name})",
            )
        if self.in_all is not None and self.in_progress() >= self.in_all.limit:
            self._refuse(
                self.in_all,
                f"this server already has {self.in_all.limit} {self.kind} in progress, the most "
                f"it takes at once ({self.in_all.name})",
            )

    def _refuse(self, bound: Bound, why: str) -> None:
        raise ProblemError(
            429,
            f"Too many {self.kind}",
            f"{why}; send this one when one of them has ended (retry in {self.retry_after_s} s)",
            limit=bound.limit,
            headers={"Retry-After": str(self.retry_after_s)},
        )
