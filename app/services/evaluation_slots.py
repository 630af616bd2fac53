"""A bound on the evaluations one tenant runs at once in an API process.

`POST /v1/models/{id}/evaluate` scores a stored dataset of up to MAX_EVALUATE_ROWS rows while its
client waits, on a thread of the process's pool (the route is synchronous; the pool has 40
threads, anyio's default). Unbounded, one tenant sending forty at once would hold them all, and
every other synchronous request of every tenant would wait. So a tenant may run at most
MAX_EVALUATIONS_PER_TENANT at once; beyond, 429 with Retry-After, before any row is read. The
counts are kept under a lock: the threads that hold them run at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.errors import ProblemError

RETRY_AFTER_S = 2  # a million rows of a few classes score within a second or two


class EvaluationSlots:
    """The evaluations each tenant has running, against the bound `per_tenant`."""

    def __init__(self, per_tenant: int):
        self.per_tenant = per_tenant
        self._running: Counter[str] = Counter()
        self._lock = threading.Lock()

    @contextmanager
    def hold(self, tenant: str) -> Iterator[None]:
        """One of `tenant`'s slots for the duration of the block; ProblemError 429 when the
        tenant already holds all of its own."""
        with self._lock:
            if self._running[tenant] >= self.per_tenant:
                raise ProblemError(
                    429,
                    "Too many evaluations",
                    f"this tenant already has {self.per_tenant} evaluations running on this "
                    "server, the most allowed at once (MAX_EVALUATIONS_PER_TENANT); send this one "
                    f"when one of them has ended (retry in {RETRY_AFTER_S} s)",
                    limit=self.per_tenant,
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                )
            self._running[tenant] += 1
        try:
            yield
        finally:
            with self._lock:
                self._running[tenant] -= 1
                if not self._running[tenant]:
                    del self._running[tenant]
