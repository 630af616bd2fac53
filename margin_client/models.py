"""``client.models``: list, get, delete, export, evaluate, and predict in batches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from margin_client import _encode
from margin_client._http import MarginError, answer_json, resource_id, segment
from margin_client.datasets import dataset_id

if TYPE_CHECKING:
    from margin_client._http import Client

DEFAULT_BATCH = 1000


class ModelInfo(TypedDict, total=False):
    """A stored model's metadata (more keys may appear)."""

    id: str
    job_id: str | None
    dataset_id: str | None
    estimator: str
    params: dict[str, Any]
    kind: str
    classes: list[Any] | None
    n_features: int
    zero_based: bool
    status: str
    gap: float | None
    n_iter: int
    train_time_s: float
    train_accuracy: float | None
    validation_accuracy: float | None


@dataclass
class Prediction:
    """Predictions for n instances: classifiers fill ``labels`` (n,) and ``decision_values``
    (n, 1) for binary models or (n, classes), and ``probabilities`` (n, classes; columns in
    the model's ``classes`` order) when asked for; regressors fill ``values`` (n,)."""

    labels: np.ndarray | None = None
    decision_values: np.ndarray | None = None
    values: np.ndarray | None = None
    probabilities: np.ndarray | None = None

    @classmethod
    def join(cls, parts: list[dict[str, Any]]) -> Prediction:
        def stack(key: str, two_d: bool = False) -> np.ndarray | None:
            if not parts or key not in parts[0]:
                return None
            rows = [row for part in parts for row in part[key]]
            if key == "labels" and any(isinstance(r, str) for r in rows):
                return np.asarray(rows, dtype=str)  # class names of text labels
            return np.asarray(rows, dtype=np.float64).reshape((len(rows), -1) if two_d else -1)

        return cls(stack("labels"), stack("decision_values", True), stack("values"),
                   stack("probabilities", True))


def model_id(model: str | dict[str, Any]) -> str:
    return resource_id("model", model if isinstance(model, str) else model["id"])


class Models:
    def __init__(self, client: Client):
        self._client = client
        self._bases: dict[str, int] = {}

    def list(
        self,
        dataset: str | dict[str, Any] | None = None,
        job: str | None = None,
        limit: int | None = None,
    ) -> list[ModelInfo]:
        params = {"dataset_id": dataset_id(dataset) if dataset else None, "job_id": job}
        return list(self._client.paginate("/v1/models", params, limit))

    def get(self, model: str | dict[str, Any]) -> ModelInfo:
        ident = model_id(model)
        record = self._client.get_json(f"/v1/models/{segment(ident)}")
        self._bases[ident] = 0 if record["zero_based"] else 1  # what `predict` would ask for
        return record

    def delete(self, model: str | dict[str, Any]) -> None:
        self._client.request("DELETE", f"/v1/models/{segment(model_id(model))}")

    def export(
        self, model: str | dict[str, Any], format: str = "liblinear", path: str | Path | None = None
    ) -> Any:
        """The model as a LIBLINEAR model file (text), JSON (a dict), or an ONNX graph or a
        skops file of a scikit-learn estimator (bytes); written to `path` instead when given
        (then `path` is returned)."""
        url = f"/v1/models/{segment(model_id(model))}/export"
        if path is not None:
            self._client.download(url, path, params={"format": format})
            return Path(path)
        response = self._client.request("GET", url, params={"format": format})
        if format == "json":
            return answer_json(response)
        return response.text if format == "liblinear" else response.content

    def evaluate(self, model: str | dict[str, Any], dataset: str | dict[str, Any]) -> dict:
        """Accuracy and confusion matrix (classifiers), or MSE and R² (regressors), on a stored
        dataset."""
        return self._client.post_json(
            f"/v1/models/{segment(model_id(model))}/evaluate", {"dataset_id": dataset_id(dataset)}
        )

    def top_features(self, model: str | dict[str, Any], k: int = 20) -> dict[str, Any]:
        """The `k` largest weights by magnitude, with their features and classes."""
        return self._client.get_json(
            f"/v1/models/{segment(model_id(model))}/coefficients", params={"top": k}
        )

    def predict(
        self,
        model: str | dict[str, Any],
        X: Any,
        batch_size: int = DEFAULT_BATCH,
        probabilities: bool = False,
    ) -> Prediction:
        """Predict X: a numpy array or scipy sparse matrix (column j is feature j + 1 of a
        model trained on a one-based file, feature j of a zero-based one), a list of
        ``{feature index: value}`` dicts (or ``{feature name: value}`` for a model trained on a
        table: a name left out reads as 0), or LIBSVM lines (a string or a list of strings, with
        or without labels). Sent in batches of at most `batch_size` instances; a batch over
        the service's limit (413) is split in two and retried. With `probabilities`, the
        calibrated class probabilities too (a model trained with a search or with
        ``probability=True``; others answer 422)."""
        ident = model_id(model)
        offset = self._offset(ident) if not self._raw(X) else 0
        n = _encode.count(X)
        records = _encode.is_dicts(X) and _encode.by_name(X)
        parts: list[dict[str, Any]] = []
        start, size = 0, max(1, batch_size)
        while start < n:
            stop = min(n, start + size)
            try:
                response = self._client.request(
                    "POST",
                    f"/v1/models/{segment(ident)}/predict",
                    params={"probabilities": "true"} if probabilities else None,
                    **_encode.request_for(X, start, stop, offset, records),
                )
            except MarginError as exc:
                if exc.status == 413 and stop - start > 1:
                    size = max(1, (stop - start) // 2)
                    continue
                raise
            parts.append(answer_json(response))
            start = stop
        return Prediction.join(parts)

    @staticmethod
    def _raw(X: Any) -> bool:
        return _encode.is_libsvm_lines(X) or _encode.is_dicts(X)

    def _offset(self, ident: str) -> int:
        if ident not in self._bases:
            self._bases[ident] = 0 if self.get(ident)["zero_based"] else 1
        return self._bases[ident]
