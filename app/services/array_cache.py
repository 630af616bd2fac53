"""A worker's local copies of stored datasets (STORAGE_URL=s3://...), memory-mapped from disk.

A dataset's arrays are downloaded once into CACHE_DIR/<content key>/ and every later job on
this machine maps them from there, so the solvers and the out-of-core structural mode read local
files as with the file storage. The key is the dataset's content hash: two datasets with the same
content share one copy.

- Atomic: a download goes to a `part-<host>-<pid>-<random>` directory that is renamed into place
  when every array is there, so a job sees a whole copy or none; a download killed half-way
  leaves only its part directory, which no job reads and the next cache start removes.
- One download at a time per key, across the processes sharing the directory (`flock`) and
  the threads of one (a lock per key): a download that waits on a hanging store holds up only
  the readers of its own dataset.
- Bounded: after each download the least recently used copies go until the cache is under
  CACHE_MAX_MB (the copy just fetched stays). Removing a copy that a job has mapped is safe: the
  mapping keeps the file's pages until the job ends.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from threading import Lock

from app.services.uploads import temp_name
from app.storage import Storage, retry_unavailable

log = logging.getLogger("margin.cache")
PART_MAX_AGE_S = 86_400.0
DOWNLOAD_TRIES = 3
DOWNLOAD_DELAY_S = 2.0  # then 4 s: an S3 hiccup, not an outage, is waited out


class ArrayCache:
    def __init__(self, root: Path, max_bytes: int):
        self.root = Path(root)
        self.max_bytes = max_bytes
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / ".locks").mkdir(exist_ok=True)
        # one lock per key while any thread holds or waits for it: [lock, users]
        self._locks: dict[str, list] = {}
        self._locks_lock = Lock()
        self.sweep_parts()

    def directory(
        self, storage: Storage, prefix: str, key: str, names: list[str], tries: int = DOWNLOAD_TRIES
    ) -> Path:
        """The local directory holding `names` (`<name>.npy` under `prefix` in `storage`),
        downloaded on first use, trying `tries` times while the store is unavailable (a request
        tries once: it is to fail within about STORAGE_TIMEOUT_S)."""
        final = self.root / _safe(key)
        if final.is_dir():
            _touch(final)
            return final

        def download() -> None:
            if not final.is_dir():  # another process may have fetched it while we waited
                self._download(storage, prefix, names, final)

        with self._key_lock(key), _file_lock(self.root / ".locks" / f"{_safe(key)}.lock"):
            retry_unavailable(download, f"downloading {prefix}", tries, DOWNLOAD_DELAY_S)
        _touch(final)
        self.evict(keep=final)
        return final

    @contextmanager
    def _key_lock(self, key: str) -> Iterator[None]:
        """Hold the key's lock; the entry goes when its last user leaves, so a long-lived
        process keeps no lock per dataset it ever read."""
        with self._locks_lock:
            entry = self._locks.setdefault(key, [Lock(), 0])
            entry[1] += 1
        try:
            with entry[0]:
                yield
        finally:
            with self._locks_lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._locks[key]

    def _download(self, storage: Storage, prefix: str, names: list[str], final: Path) -> None:
        part = self.root / temp_name("part")
        part.mkdir()
        start = time.perf_counter()
        try:
            for name in names:
                storage.fetch(f"{prefix}/{name}.npy", part / f"{name}.npy")
            os.rename(part, final)
        except BaseException:
            shutil.rmtree(part, ignore_errors=True)
            raise
        size = _size(final)
        log.info(
            "cached %s (%.1f MB) in %.2f s", prefix, size / 2**20, time.perf_counter() - start
        )

    def entries(self) -> list[tuple[float, int, Path]]:
        """(last use, bytes, directory) of each complete copy, least recently used first."""
        out = []
        for path in self.root.iterdir():
            if path.is_dir() and not path.name.startswith((".", "part-")):
                try:
                    out.append((path.stat().st_mtime, _size(path), path))
                except FileNotFoundError:
                    continue
        return sorted(out)

    def evict(self, keep: Path | None = None) -> list[Path]:
        """Remove least recently used copies until the cache fits in max_bytes."""
        entries = self.entries()
        total = sum(size for _, size, _ in entries)
        removed = []
        for _, size, path in entries:
            if total <= self.max_bytes:
                break
            if keep is not None and path == keep:
                continue
            shutil.rmtree(path, ignore_errors=True)
            total -= size
            removed.append(path)
        if removed:
            log.info("cache over %d MB: removed %d copies", self.max_bytes >> 20, len(removed))
        return removed

    def sweep_parts(self) -> list[Path]:
        """Remove the part directories of downloads whose process is gone (or a day old)."""
        removed = []
        for path in self.root.glob("part-*"):
            if _abandoned(path):
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        return removed


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)[:128]


def _size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.iterdir() if p.is_file())


def _touch(path: Path) -> None:
    try:
        os.utime(path)
    except FileNotFoundError:
        pass


class _file_lock:
    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)
        return False


def _abandoned(path: Path) -> bool:
    """`part-<host>-<pid>-<random>` of a dead process on this host, or older than a day."""
    try:
        if time.time() - path.stat().st_mtime > PART_MAX_AGE_S:
            return True
    except FileNotFoundError:
        return False
    parts = path.name.split("-")
    if len(parts) < 4 or "-".join(parts[1:-2]) != socket.gethostname():
        return False
    pid = int(parts[-2]) if parts[-2].isdigit() else None
    if pid is None or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
