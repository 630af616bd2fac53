"""A per-tenant bound on the uploads one API process receives at once.

An upload holds one of the process's parser processes (`parser_pool.ParserPool`) from its file's
first byte until it is parsed, and a body may arrive as slowly as MIN_BODY_RATE_KB allows: at the
defaults a 2 GB upload may take MAX_UPLOAD_MB / MIN_BODY_RATE_KB = 32,768 s. A tenant opening a
few such uploads would hold every parser for hours, and every other tenant's upload would wait.
So each tenant may have at most MAX_UPLOADS_PER_TENANT uploads in flight in one API process
(429 with Retry-After beyond, before the body is read), and the pool has one parser more than
that (`parser_count`): while one tenant holds its bound, another tenant's upload finds a parser.

The bound is service-wide, with no per-tenant override: a tenant allowed more uploads than the
pool has parsers to spare would be able to hold them all again.

`UploadSlots` is used on the event loop only (the upload route is async), so its counts need no
lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.errors import ProblemError

RETRY_AFTER_S = 5  # an upload of an ordinary size ends well within this


def parser_count(uploads_per_tenant: int) -> int:
    """Parser processes for a bound of `uploads_per_tenant`: one more than a tenant can hold."""
    return uploads_per_tenant + 1


class UploadSlots:
    """The uploads each tenant has in flight, against the bound `per_tenant`."""

    def __init__(self, per_tenant: int):
        self.per_tenant = per_tenant
        self._held: Counter[str] = Counter()

    def in_flight(self, tenant: str) -> int:
        return self._held[tenant]

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """One of `tenant`'s slots for the duration of the block; ProblemError 429 when the
        tenant already holds them all."""
        if self._held[tenant] >= self.per_tenant:
            raise ProblemError(
                429,
                "Too many uploads",
                f"this tenant already has {self.per_tenant} uploads in progress on this server, "
                "the most allowed at once (MAX_UPLOADS_PER_TENANT); send this one when one of "
                f"them has ended (retry in {RETRY_AFTER_S} s)",
                limit=self.per_tenant,
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._held[tenant] += 1
        try:
            yield
        finally:
            self._held[tenant] -= 1
            if not self._held[tenant]:
                del self._held[tenant]
