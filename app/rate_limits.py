"""Per-key request rates, and failed key lookups per client address: 429 with Retry-After beyond
them (the `limits` library counts).

A key's rate is its tenant's own (`tenants.rate_limit`, set with `margin keys quota --rate`) or
the service-wide RATE_LIMIT; unset means unlimited. Both use the `limits` notation, one or more
windows separated by ';' ("100/second;2000/minute"). Requests without a key (AUTH_MODE off, or
auto on loopback) are counted per tenant. Counts live in RATE_LIMIT_STORAGE (in this process's
memory by default; a shared store such as Redis makes several API processes share them).

A key that is in neither of the authenticator's caches costs a database lookup, and a made-up key
is a 401 only after it. AUTH_FAILURE_RATE bounds the lookups that found no key, per client
address (an IPv6 address counts with its /64, which one client usually holds whole): once it is
reached, a key that is not cached gets 429 before any lookup, until the window has room again.
Keys in the cache of live keys are never counted nor refused. A failure is counted when its
lookup ends, so lookups of one address that run at once all pass the check: the overshoot is at
most the lookups in flight (the thread pool and the database pool bound them). The address is
the one uvicorn gives the app: behind a proxy, the proxy's own unless uvicorn trusts it to
forward the client's (FORWARDED_ALLOW_IPS, see the README).
"""

from __future__ import annotations

import ipaddress
import math
import time
from functools import lru_cache

from limits import RateLimitItem, parse_many
from limits.storage import Storage
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

    def __init__(self, storage: Storage):
        self.strategy = SlidingWindowCounterRateLimiter(storage)

    def check(self, principal: Principal) -> None:
        """Count one request of `principal`; ProblemError 429 when it is over a window."""
        if not principal.rate_limit:
            return
        who = f"key:{principal.key_id}" if principal.key_id else f"tenant:{principal.tenant}"
        for item in parse_rate(principal.rate_limit):
            if not self.strategy.hit(item, who):
                raise _over(
                    self.strategy, item, who, "Too many requests",
                    f"this API key may make at most {item.amount} requests per "
                    f"{item.get_expiry()} s",
                )  # fmt: skip


class AuthFailures:
    """Failed key lookups per client address, against the rate `rate` (None or "": no bound)."""

    def __init__(self, rate: str | None, storage: Storage):
        self.items = parse_rate(rate) if rate else ()  # an unreadable rate stops the start
        self.strategy = SlidingWindowCounterRateLimiter(storage)

    def check(self, address: str | None) -> None:
        """ProblemError 429 when `address` has no room for one more failure."""
        who = client_of(address)
        for item in self.items:
            if not self.strategy.test(item, who):
                raise _over(
                    self.strategy, item, who, "Too many failed authentications",
                    f"at most {item.amount} requests with unknown API keys are answered per "
                    f"{item.get_expiry()} s from one address (AUTH_FAILURE_RATE)",
                )  # fmt: skip

    def count(self, address: str | None) -> None:
        """Count one failed lookup of `address`."""
        who = client_of(address)
        for item in self.items:
            self.strategy.hit(item, who)


def client_of(address: str | None) -> str:
    """The counter of a client address: the address, or its /64 for IPv6."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return f"auth-failures:{address}"
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return f"auth-failures:{ip.ipv4_mapped}"
        return f"auth-failures:{ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"auth-failures:{ip}"


def _over(strategy, item: RateLimitItem, who: str, title: str, limit: str) -> ProblemError:
    """429 for `who` over the window `item`: `limit` says which, then when to retry."""
    retry = _retry_after(strategy, item, who)
    return ProblemError(
        429,
        title,
        f"{limit}; retry in {retry} s",
        rate_limit=str(item),
        headers={"Retry-After": str(retry)},
    )


def _retry_after(strategy, item: RateLimitItem, who: str) -> int:
    """Whole seconds until the window of `item` has room for `who` again (at least 1)."""
    reset = strategy.get_window_stats(item, who).reset_time
    return max(1, math.ceil(reset - time.time()))
