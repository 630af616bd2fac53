"""Bounds on the uploads one API process receives at once: per tenant, and in all.

An upload holds one of the process's parser processes (`parser_pool.ParserPool`) from its file's
first byte until it is parsed (the parser follows the body as it arrives), and a body may arrive
as slowly as MIN_BODY_RATE_KB allows: at the defaults a 2 GB upload may take MAX_UPLOAD_MB /
MIN_BODY_RATE_KB = 32,768 s. An upload that finds no free parser waits for one, so a few such
uploads would hold every parser for hours and every other upload would wait behind them.

So an API process receives at most MAX_UPLOADS_IN_FLIGHT uploads at once, and runs exactly that
many parsers (`parser_count`): every upload it accepts has a parser of its own and never waits
for another upload's body. Beyond the bound an upload is 429 with Retry-After before its body is
read. Within it, each tenant may have at most MAX_UPLOADS_PER_TENANT uploads in flight (checked
first, 429 too), fewer than MAX_UPLOADS_IN_FLIGHT (`Settings`): one tenant alone cannot take
every slot. Several tenants together can, and then the next upload is refused, not kept waiting.

The per-tenant bound is service-wide, with no per-tenant override: a tenant allowed more could
take every slot again.

`UploadSlots` is used on the event loop only (the upload route is async), so its counts need no
lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.errors import ProblemError

RETRY_AFTER_S = 5  # an upload of an ordinary size ends well within this


def parser_count(uploads_in_flight: int) -> int:
    """Parser processes for a bound of `uploads_in_flight`: one for each upload."""
    return uploads_in_flight


class UploadSlots:
    """The uploads each tenant has in flight, against the bounds `per_tenant` and `in_all`."""

    def __init__(self, per_tenant: int, in_all: int):
        self.per_tenant = per_tenant
        self.in_all = in_all
        self._held: Counter[str] = Counter()

    def in_flight(self, tenant: str | None = None) -> int:
        """The uploads of `tenant` in flight, or of every tenant."""
        return self._held[tenant] if tenant is not None else self._held.total()

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """One of `tenant`'s slots for the duration of the block; ProblemError 429 when the
        tenant already holds its share, or every slot is held."""
        self._check(tenant)
        self._held[tenant] += 1
        try:
            yield
        finally:
            self._held[tenant] -= 1
            if not self._held[tenant]:
                del self._held[tenant]

    def _check(self, tenant: str) -> None:
        if self._held[tenant] >= self.per_tenant:
            raise _too_many(
                self.per_tenant,
                f"this tenant already has {self.per_tenant} uploads in progress on this server, "
                "the most allowed at once (MAX_UPLOADS_PER_TENANT)",
            )
        if self.in_flight() >= self.in_all:
            raise _too_many(
                self.in_all,
                f"this server already receives {self.in_all} uploads, the most it takes at once "
                "(MAX_UPLOADS_IN_FLIGHT)",
            )


def _too_many(limit: int, why: str) -> ProblemError:
    return ProblemError(
        429,
        "Too many uploads",
        f"{why}; send this one when one of them has ended (retry in {RETRY_AFTER_S} s)",
        limit=limit,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
