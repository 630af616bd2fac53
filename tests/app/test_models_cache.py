"""The model cache: LRU order, size bound, revalidation timing."""

import threading

import numpy as np

from app.services.model_cache import ModelCache
from app.services.prediction import LinearModel


def model(model_id):
    return LinearModel(
        id=model_id,
        kind="classifier",
        classes=[0, 1],
        n_features=1,
        zero_based=False,
        coef=np.ones((1, 1)),
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
