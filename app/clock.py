"""The service's clock: the database server's.

Heartbeats, job events and the start of an attempt are written by one process and judged by
another (a reaper deciding that a heartbeat is JOB_STALL_S old, the API counting the workers
that beat lately, a retried attempt's budget), and in a deployment those processes run on hosts
whose clocks may disagree by more than JOB_STALL_S. A reaper whose clock runs ahead would take
every live worker's job; one whose clock lags would leave a dead worker's job running. So each
process keeps the offset of its own clock from the database server's, and `now()` is its clock
corrected by that offset: every time a process writes or compares is then on one clock.

The offset is measured by `synchronize`, at most every `SYNC_EVERY_S`, by the code that judges
such times (the reapers, the count of ready workers), so every engine and the API refresh it as
they work; until a first measure it is zero. An SQLite database is one host's file: its offset
stays zero.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.orm import Session

SYNC_EVERY_S = 60.0

_offset = timedelta(0)
_synced_at: float | None = None  # time.monotonic() of the last measure
_lock = threading.Lock()


def local_now() -> datetime:
    """This host's own clock."""
    return datetime.now(UTC)


def now() -> datetime:
    """The database server's time, as far as this process can tell."""
    return local_now() + _offset


def synchronize(session: Session, force: bool = False) -> None:
    """Measure this process's offset from the database server's clock, unless it was measured
    less than SYNC_EVERY_S ago (or ``force``). The midpoint of the round trip is taken as the
    moment the server read its clock: the error is at most half the round trip."""
    global _offset, _synced_at
    if session.get_bind().dialect.name != "postgresql":
        return
    if not force and _synced_at is not None and time.monotonic() - _synced_at < SYNC_EVERY_S:
        return
    before = local_now()
    server = session.execute(text("SELECT clock_timestamp()")).scalar_one()
    after = local_now()
    with _lock:
        _offset = server - (before + (after - before) / 2)
        _synced_at = time.monotonic()
