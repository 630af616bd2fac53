"""The model cache: LRU order, size bound, revalidation timing."""

import threading

import numpy as np

from app.services.model_cache import ModelCache
from app.services.prediction import LinearModel


def model(model_id, n_features=1):
    return LinearModel(
        id=model_id,
        kind="classifier",
        classes=[0, 1],
        n_features=n_features,
        zero_based=False,
        coef=np.ones((1, n_features)),
        intercept=np.zeros(1),
    )


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_least_recently_used_is_evicted_first():
    cache = ModelCache(2)
    for name in "abc"[:2]:
        cache.put(model(name))
    assert cache.get("a")[0].id == "a"  # a is now the most recent
    cache.put(model("c"))
    assert "b" not in cache and "a" in cache and "c" in cache and len(cache) == 2


def test_size_zero_disables_caching():
    cache = ModelCache(0)
    cache.put(model("a"))
    assert cache.get("a") == (None, False) and len(cache) == 0


def test_entries_become_due_for_revalidation_and_touch_resets_them():
    clock = Clock()
    cache = ModelCache(4, revalidate_s=5.0, clock=clock)
    cache.put(model("a"))
    clock.t = 4.9
    assert cache.get("a")[1] is False
    clock.t = 5.0
    assert cache.get("a")[1] is True
    cache.touch("a")
    assert cache.get("a")[1] is False
    cache.evict("a")
    assert cache.get("a") == (None, False)
    assert cache.hits == 3 and cache.misses == 1


def test_concurrent_use_keeps_the_bound():
    cache = ModelCache(8)

    def work(k):
        for i in range(500):
            cache.put(model(f"{k}-{i % 20}"))
            cache.get(f"{k}-{(i * 7) % 20}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) == 8


def test_the_bytes_kept_are_bounded_and_the_newest_model_stays():
    """A count alone let 32 models at the weight limit (1 GiB each) hold 32 GiB: a 514 kB
    upload trains a model of 82 MB of weights, and each one predicted once stayed cached."""
    from app.services.model_cache import model_bytes

    one_mb = model("a", 2**17 - 1)  # 2^17 - 1 weights and an intercept: 1 MiB
    assert model_bytes(one_mb) == 2**20
    cache = ModelCache(32, max_bytes=3 * 2**20 + 8)
    for name in "abc":
        cache.put(model(name, 2**17 - 1))
    assert len(cache) == 3 and cache.bytes == 3 * 2**20
    cache.put(model("d", 2**17))  # 1 MiB + 8: the oldest goes, the rest are at the bound
    assert "a" not in cache and len(cache) == 3 and cache.bytes == 3 * 2**20 + 8
    cache.put(model("e", 2**17))  # 8 bytes over once "b" goes: "c" goes too
    assert list(cache._items) == ["d", "e"] and cache.bytes == 2 * 2**20 + 16
    cache.put(model("big", 2**19))  # 4 MiB alone: kept, every other model evicted
    assert list(cache._items) == ["big"] and cache.bytes == 4 * 2**20 + 8
    cache.put(model("big", 2**19))  # the same model again: counted once
    assert len(cache) == 1 and cache.bytes == 4 * 2**20 + 8
    cache.evict("big")
    assert cache.bytes == 0 and len(cache) == 0


def test_the_service_bounds_its_cache_by_model_cache_mb(app, client):
    from app.api.model_lookup import model_cache

    assert model_cache(app).max_bytes == int(app.state.settings.model_cache_mb * 2**20)
