"""Reading a predict request body into rows, counted and bounded while it is read: the bounds,
the error and the counter that the readers share.

Bodies are JSON (``{"instances": [...]}``, sparse objects or dense rows; or ``{"records":
[{"name": value, ...}]}`` by the feature names of a model trained on named columns; read by
`predict_json`) or ``text/plain`` LIBSVM lines (`predict_text`); each instance becomes a row in
`predict_instance`. Nothing is built for the whole body at once: instances are found one at a
time, each is counted before it is parsed, and the reading stops at the first limit crossed —

- instances: at most MAX_PREDICT_BATCH, and at most MAX_DECISION_VALUES decision values (instances
  times the model's outputs): 413 as soon as one more instance is found (`InstanceCounter`);
- values per instance: a dense row has exactly the model's ``n_features`` values; a sparse
  instance or a text line at most ``row_limit(model)`` entries, counted on the raw bytes (commas,
  colons) before any number is converted: 422;
- blank lines and comments are skipped by a regular expression, never one Python step each.

An instance's Python objects exist only while that instance is read, so the memory of a parse is
the body plus one instance plus the rows it produced; the readers yield rows for the caller to
stack a chunk at a time.

Errors raise `InvalidInstances` naming the instance (``instances[3]: ...``) or line (``line 7``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from app.services.prediction import LinearModel

MIN_ROW_LIMIT = 1024
MAX_DECISION_VALUES = 1_000_000

Row = tuple[np.ndarray, np.ndarray]  # (model columns int32, values float64)


class InvalidInstances(ValueError):
    """A prediction request that cannot be read; ``status`` is the HTTP status to answer with,
    ``title`` the problem's title where the status's usual one would mislead (None: that one)."""

    def __init__(self, message: str, status: int = 422, title: str | None = None):
        super().__init__(message)
        self.status = status
        self.title = title


def row_limit(model: LinearModel) -> int:
    """Most entries one sparse instance or text line may hold: the model's feature count (a row
    has no more distinct features in range), or MIN_ROW_LIMIT for narrow models, so that a few
    features beyond the model's (ignored, as LIBLINEAR does) still fit."""
    return max(model.n_features, MIN_ROW_LIMIT)


def batch_limit(model: LinearModel, max_batch: int) -> int:
    """Most instances in one request: MAX_PREDICT_BATCH, fewer for models with many outputs."""
    return max(1, min(max_batch, MAX_DECISION_VALUES // max(1, model.coef.shape[0])))


class InstanceCounter:
    """Counts instances against the batch limit; 413 on the first one over it."""

    def __init__(self, model: LinearModel, max_batch: int):
        self.limit = batch_limit(model, max_batch)
        self.because = (
            "MAX_PREDICT_BATCH"
            if self.limit == max_batch
            else f"{MAX_DECISION_VALUES} decision values, {model.coef.shape[0]} per instance"
        )
        self.n = 0

    def add(self) -> None:
        self.n += 1
        if self.n > self.limit:
            raise InvalidInstances(
                f"too many instances: at most {self.limit} per request ({self.because}); "
                "split the batch or use POST /v1/models/{id}/predictions on a stored dataset",
                status=413,
            )

    def done(self) -> None:
        if self.n == 0:
            raise InvalidInstances("expected at least one instance, got none")


def too_many_entries(where: str, model: LinearModel) -> InvalidInstances:
    return InvalidInstances(
        f"{where}: more than {row_limit(model)} entries in one instance (the model has "
        f"{model.n_features} features)"
    )


def json_type(v) -> str:
    """What a parsed JSON value is, in the words of a message."""
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }
    return names.get(type(v), type(v).__name__)


def shorten(v, limit: int = 40) -> str:
    """A value as a message quotes it: at most `limit` characters."""
    s = v if isinstance(v, str) else repr(v)
    return s if len(s) <= limit else s[: limit - 3] + "..."
