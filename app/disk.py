"""A few megabytes kept aside in the data directory for the day its disk fills up.

With SQLite in DATA_DIR (the default layout), a full disk stops every write to the database: a job
whose progress write fails with "disk full" could not even record why it failed, and would be
found later as "no heartbeat". The reserve is a file of DISK_RESERVE_MB allocated in DATA_DIR; the
worker that hits a full disk deletes it, so that its failure ("disk full") fits, and the reserve is
allocated again once there is room. Requests that fail on a full disk get 507 and never touch it.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("margin.disk")
RESERVE_NAME = ".disk-reserve"


class DiskReserve:
    def __init__(self, data_dir: Path, size_bytes: int):
        self.path = Path(data_dir) / RESERVE_NAME
        self.size_bytes = size_bytes

    def ensure(self) -> bool:
        """Allocate the reserve if it is missing and there is room; True when it is in place."""
        if self.size_bytes <= 0:
            return False
        try:
            if self.path.stat().st_size >= self.size_bytes:
                return True
        except FileNotFoundError:
            pass
        part = self.path.with_name(f"{RESERVE_NAME}.{os.getpid()}.part")
        try:
            fd = os.open(part, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            try:
                os.posix_fallocate(fd, 0, self.size_bytes)  # real blocks, not a sparse file
            finally:
                os.close(fd)
            os.replace(part, self.path)
            return True
        except OSError as exc:
            part.unlink(missing_ok=True)
            log.debug("no disk reserve in %s: %s", self.path.parent, exc)
            return False

    def release(self) -> bool:
        """Give the reserve's space back to the disk; True when there was one."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        log.warning(
            "the disk is full: released the %d-byte reserve in %s",
            self.size_bytes,
            self.path.parent,
        )
        return True
