"""The worker's local cache of stored datasets: one download per content key, atomic (a download
killed half-way leaves nothing a later job reads), least-recently-used eviction under its bound."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from app.services.array_cache import ArrayCache
from app.storage import FileStorage, StorageUnavailable

ROOT = Path(__file__).resolve().parents[2]


class CountingStorage(FileStorage):
    def __init__(self, root: Path):
        super().__init__(root)
        self.fetched: list[str] = []
        self._lock = threading.Lock()

    def fetch(self, key: str, path: Path) -> None:
        with self._lock:
            self.fetched.append(key)
        time.sleep(0.05)
        super().fetch(key, path)


def _store(root: Path, dataset_id: str, size: int) -> None:
    directory = root / "datasets" / dataset_id
    directory.mkdir(parents=True)
    for name in ("a", "b"):
        (directory / f"{name}.npy").write_bytes(bytes([len(dataset_id)]) * size)


def test_one_download_per_key_even_when_asked_at_once(tmp_path):
    storage = CountingStorage(tmp_path / "store")
    _store(storage.root, "ds_1", 1000)
    cache = ArrayCache(tmp_path / "cache", 10**6)
    results = []
    def fetch():
        results.append(cache.directory(storage, "datasets/ds_1", "k1", ["a", "b"]))

    threads = [threading.Thread(target=fetch) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(storage.fetched) == 2  # two arrays, fetched once
    assert sorted(p.name for p in results[0].iterdir()) == ["a.npy", "b.npy"]


def test_least_recently_used_copies_are_evicted(tmp_path):
    storage = FileStorage(tmp_path / "store")
    for n in range(3):
        _store(storage.root, f"ds_{n}", 1000)
    cache = ArrayCache(tmp_path / "cache", 4500)  # room for two copies of 2000 bytes
    first = cache.directory(storage, "datasets/ds_0", "k0", ["a", "b"])
    time.sleep(0.02)
    second = cache.directory(storage, "datasets/ds_1", "k1", ["a", "b"])
    time.sleep(0.02)
    assert cache.directory(storage, "datasets/ds_0", "k0", ["a", "b"]) == first  # used again
    time.sleep(0.02)
    third = cache.directory(storage, "datasets/ds_2", "k2", ["a", "b"])
    assert first.is_dir() and third.is_dir()
    assert not second.exists()  # the least recently used went
    assert sum(size for _, size, _ in cache.entries()) <= 4500


def test_a_failed_download_leaves_no_copy(tmp_path, monkeypatch):
    from app.services import array_cache

    monkeypatch.setattr(array_cache.time, "sleep", lambda s: None)

    class Failing(FileStorage):
        calls = 0

        def fetch(self, key, path):
            Failing.calls += 1
            if key.endswith("b.npy"):
                Path(path).write_bytes(b"half")
                raise StorageUnavailable("gone")
            super().fetch(key, path)

    storage = Failing(tmp_path / "store")
    _store(storage.root, "ds_1", 100)
    cache = ArrayCache(tmp_path / "cache", 10**6)
    with pytest.raises(StorageUnavailable):
        cache.directory(storage, "datasets/ds_1", "k1", ["a", "b"], tries=2)
    assert Failing.calls == 4  # tried twice
    assert [p.name for p in cache.root.iterdir() if p.name != ".locks"] == []


SLOW_FETCH = """
import sys, time
from pathlib import Path
from app.services.array_cache import ArrayCache
from app.storage import FileStorage

class Slow(FileStorage):
    def fetch(self, key, path):
        data = self._path(key).read_bytes()
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2]); f.flush()
            print("half", flush=True)
            time.sleep(60)
            f.write(data[len(data) // 2 :])

cache = ArrayCache(Path(sys.argv[2]), 10**9)
cache.directory(Slow(Path(sys.argv[1])), "datasets/ds_1", "k1", ["a", "b"])
"""


def test_a_download_killed_half_way_is_never_read(tmp_path):
    storage = FileStorage(tmp_path / "store")
    _store(storage.root, "ds_1", 100_000)
    cache_dir = tmp_path / "cache"
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_FETCH, str(storage.root), str(cache_dir)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        assert proc.stdout.readline().strip() == b"half"
        partial = [p for p in cache_dir.iterdir() if p.name.startswith("part-")]
        assert len(partial) == 1 and (partial[0] / "a.npy").stat().st_size == 50_000
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # a later job on the same machine: a whole copy, fetched again; the dead download is swept
    cache = ArrayCache(cache_dir, 10**9)
    assert not partial[0].exists()
    directory = cache.directory(storage, "datasets/ds_1", "k1", ["a", "b"])
    for name in ("a", "b"):
        assert (directory / f"{name}.npy").read_bytes() == (
            storage.root / "datasets" / "ds_1" / f"{name}.npy"
        ).read_bytes()


class HangingStorage(FileStorage):
    """A store whose reads of one dataset hang until released (an S3 endpoint that stopped
    answering for one prefix)."""

    def __init__(self, root: Path, hanging_prefix: str):
        super().__init__(root)
        self.hanging_prefix = hanging_prefix
        self.entered, self.release = threading.Event(), threading.Event()

    def fetch(self, key: str, path: Path) -> None:
        if key.startswith(self.hanging_prefix):
            self.entered.set()
            self.release.wait(30)
        super().fetch(key, path)


def test_a_download_hanging_on_the_store_holds_up_only_its_own_dataset(tmp_path):
    # before: one lock of the process covered every download, so every reader of any dataset
    # waited behind the one the store did not answer
    storage = HangingStorage(tmp_path / "store", "datasets/ds_slow/")
    _store(storage.root, "ds_slow", 100)
    _store(storage.root, "ds_quick", 100)
    cache = ArrayCache(tmp_path / "cache", 10**6)
    slow = threading.Thread(
        target=cache.directory, args=(storage, "datasets/ds_slow", "k_slow", ["a", "b"])
    )
    slow.start()
    try:
        assert storage.entered.wait(10)
        done = []
        quick = threading.Thread(target=lambda: done.append(
            cache.directory(storage, "datasets/ds_quick", "k_quick", ["a", "b"])
        ))  # fmt: skip
        quick.start()
        quick.join(5)
        assert done and (done[0] / "a.npy").exists(), "the other dataset waited on the hang"
    finally:
        storage.release.set()
        slow.join(10)
    assert (tmp_path / "cache" / "k_slow" / "b.npy").exists()
    assert cache._locks == {}  # no lock kept per dataset once its downloads are done
