"""An in-memory LRU of unpacked models, so that prediction does no database work per request.

Models never change once stored; the only way an entry goes stale is the model being deleted.
The process that deletes a model evicts it at once. Another API process (a deployment may run
several) learns of the deletion when it revalidates the entry, which the caller does when
:meth:`ModelCache.get` reports the entry as due (every ``revalidate_s`` seconds per entry), so a
deleted model stops being served within that bound.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
from sqlalchemy import select

from app.services.prediction import LinearModel


def model_bytes(model: LinearModel) -> int:
    """The bytes of a model's arrays (weights, intercepts, a sparse model's columns)."""
    arrays = (model.coef, model.intercept, model.columns)
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


class ModelCache:
    """Thread-safe LRU of :class:`LinearModel` keyed by model id.

    Parameters
    ----------
    size : int
        Most models kept; 0 disables caching.
    max_bytes : int or None
        Most bytes of weights kept (None: no bound), the least recently used evicted first;
        the newest model stays even when it alone is larger, so that a model that large is
        unpacked once, not for every request. A count alone let 32 models at the weight limit
        (1 GiB each) hold 32 GiB.
    revalidate_s : float
        Age after which :meth:`get` reports an entry as due for an existence check.
    clock : callable
        Monotonic time source (tests inject one).
    """

    def __init__(
        self,
        size: int,
        revalidate_s: float = 5.0,
        clock: Callable = time.monotonic,
        max_bytes: int | None = None,
    ):
        self.size = max(0, int(size))
        self.max_bytes = max_bytes
        self.bytes = 0
        self.revalidate_s = revalidate_s
        self._clock = clock
        self._items: OrderedDict[str, tuple[LinearModel, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, model_id: str) -> tuple[LinearModel | None, bool]:
        """(model or None, due): ``due`` is True when the entry should be revalidated."""
        with self._lock:
            entry = self._items.get(model_id)
            if entry is None:
                self.misses += 1
                return None, False
            self._items.move_to_end(model_id)
            self.hits += 1
            model, checked = entry
            return model, self._clock() - checked >= self.revalidate_s

    def put(self, model: LinearModel) -> None:
        if self.size == 0:
            return
        with self._lock:
            self._drop(model.id)
            self._items[model.id] = (model, self._clock())
            self.bytes += model_bytes(model)
            while len(self._items) > self.size or (
                self.max_bytes is not None and self.bytes > self.max_bytes and len(self._items) > 1
            ):
                self._drop(next(iter(self._items)))

    def _drop(self, model_id: str) -> None:
        entry = self._items.pop(model_id, None)
        if entry is not None:
            self.bytes -= model_bytes(entry[0])

    def touch(self, model_id: str) -> None:
        """Mark an entry as just revalidated."""
        with self._lock:
            entry = self._items.get(model_id)
            if entry is not None:
                self._items[model_id] = (entry[0], self._clock())

    def evict(self, model_id: str) -> None:
        with self._lock:
            self._drop(model_id)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, model_id: str) -> bool:
        return model_id in self._items


def model_from_row(row) -> LinearModel:
    """Unpack a ``tables.Model`` row for prediction."""
    from app.services.model_store import load_weights
    from app.services.trainers import label_values

    weights = load_weights(row.weights)
    return LinearModel(
        id=row.id,
        kind=row.kind,
        classes=label_values(row.classes or []),  # models stored as floats predict ints too
        n_features=int(row.n_features),
        zero_based=bool(row.zero_based),
        coef=np.ascontiguousarray(weights.coef, dtype=np.float64),
        intercept=np.ascontiguousarray(weights.intercept, dtype=np.float64),
        info={
            "estimator": row.estimator,
            "params": row.trained_params,
            "tenant": row.tenant,
            "status": row.status,  # why a calibration asked for may be missing
        },
        columns=weights.columns,
        feature_names=list(row.feature_names) if row.feature_names else None,
        calibration=row.calibration,
    )


def fetch_model(db, cache: ModelCache, model_id: str) -> LinearModel | None:
    """The model from the cache, or from the database (then cached); None when it does not
    exist. Blocking: call it from a worker thread, not the event loop."""
    from app.tables import Model

    model, due = cache.get(model_id)
    if model is not None and not due:
        return model
    with db.session() as session:
        if model is not None:
            if session.scalar(select(Model.id).where(Model.id == model_id)) is None:
                cache.evict(model_id)
                return None
            cache.touch(model_id)
            return model
        row = session.get(Model, model_id)
        if row is None:
            return None
        model = model_from_row(row)
    cache.put(model)
    return model
