"""Per-key request rates: 429 with Retry-After beyond them (the `limits` library counts).

A key's rate is its tenant's own (`tenants.rate_limit`, set with `margin keys quota --rate`) or
the service-wide RATE_LIMIT; unset means unlimited. Both use the `limits` notation, one or more
windows separated by ';' ("100/second;2000/minute"). Requests without a key (AUTH_MODE off, or
auto on loopback) are counted per tenant. Counts live in RATE_LIMIT_STORAGE (in this process's
memory by default; a shared store such as Redis makes several API processes share them).
"""

from __future__ import annotations

import math
import time
from functools import lru_cache

from limits import RateLimitItem, parse_many
from limits.storage import storage_from_string
from limits.strategies import SlidingWindowCounterRateLimiter

from app.errors import ProblemError
from app.tenancy import Principal


class InvalidRate(ValueError):
    """A rate that the `limits` notation cannot read."""


@lru_cache(maxsize=1024)
def parse_rate(text: str) -> tuple[RateLimitItem, ...]:
    """The windows of a rate such as "100/second;2000/minute"; InvalidRate if unreadable."""
    try:
        items = tuple(parse_many(text))
    except ValueError as exc:
        raise InvalidRate(
            f"cannot read the rate {text!r} ({exc}); expected e.g. '100/second;2000/minute'"
        ) from None
    if not items:
        raise InvalidRate(f"cannot read the rate {text!r}; expected e.g. '100/second'")
    return items


class RateLimiter:
    """Counts each principal's requests against its rate."""

    def __init__(self, storage_uri: str = "memory://"):
        self.strategy = SlidingWindowCounterRateLimiter(storage_from_string(storage_uri))

    def check(self, principal: Principal) -> None:
        """Count one request of `principal`; ProblemError 429 when it is over a window."""
        if not principal.rate_limit:
            return
        who = f"key:{principal.key_id}" if principal.key_id else f"tenant:{principal.tenant}"
        for item in parse_rate(principal.rate_limit):
            if not self.strategy.hit(item, who):
                reset = self.strategy.get_window_stats(item, who).reset_time
                retry = max(1, math.ceil(reset - time.time()))
                raise ProblemError(
                    429,
                    "Too many requests",
                    f"this API key may make at most {item.amount} requests per "
                    f"{item.get_expiry()} s; retry in {retry} s",
                    rate_limit=str(item),
                    headers={"Retry-After": str(retry)},
                )
