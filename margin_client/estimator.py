"""`RemoteLinearSVC`: a scikit-learn-style estimator that trains and predicts on the service."""

from __future__ import annotations

from typing import Any

import numpy as np

from margin_client._http import Client


class RemoteLinearSVC:
    """Like ``solvers.LinearSVC`` (the same parameters), but fitted by a Margin service.

    ``fit(X, y)`` uploads (X, y) as npz, starts a job with the parameters, waits for it and
    keeps the model's id; ``predict`` and ``decision_function`` call the service. Follows
    scikit-learn's conventions (``get_params``/``set_params``, so ``sklearn.base.clone``
    works; fitted attributes end in ``_``) without needing scikit-learn.

    Fitted attributes: ``model_id_``, ``dataset_id_``, ``job_`` (a `Job`), ``classes_``,
    ``n_features_in_``, ``status_``, ``gap_``, ``n_iter_``, and ``coef_``/``intercept_``
    (fetched once, on first use).
    """

    _estimator = "LinearSVC"

    def __init__(self, client: Client | None = None, **params: Any):
        self.client = client
        self.params = params

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        return {"client": self.client, **self.params}

    def set_params(self, **params: Any) -> RemoteLinearSVC:
        if "client" in params:
            self.client = params.pop("client")
        self.params.update(params)
        return self

    def _service(self) -> Client:
        if self.client is None:
            self.client = Client()
        return self.client

    def fit(self, X: Any, y: Any, progress: bool = False) -> RemoteLinearSVC:
        """Train on the service; raises `JobFailed` if the job does not succeed."""
        client = self._service()
        dataset = client.datasets.upload((X, y), name=f"{type(self).__name__} fit")
        job = client.jobs.create(dataset, self._estimator, dict(self.params))
        job.wait(progress=progress, check=True)
        info = client.models.get(job.model_id)
        self.dataset_id_ = dataset["id"]
        self.job_ = job
        self.model_id_ = info["id"]
        self.classes_ = np.asarray(info.get("classes") or [])
        self.n_features_in_ = int(info["n_features"])
        self.status_, self.gap_, self.n_iter_ = info["status"], info["gap"], info["n_iter"]
        self._weights: dict[str, Any] | None = None
        return self

    def _check_fitted(self) -> None:
        if not hasattr(self, "model_id_"):
            raise AttributeError(f"this {type(self).__name__} is not fitted yet: call fit first")

    def decision_function(self, X: Any) -> np.ndarray:
        """Decision values: shape (n,) for binary models, (n, classes) otherwise."""
        self._check_fitted()
        values = self._service().models.predict(self.model_id_, X).decision_values
        return values[:, 0] if values.shape[1] == 1 else values

    def predict(self, X: Any) -> np.ndarray:
        self._check_fitted()
        labels = self._service().models.predict(self.model_id_, X).labels
        return labels.astype(self.classes_.dtype) if self.classes_.size else labels

    def score(self, X: Any, y: Any) -> float:
        """Mean accuracy on (X, y)."""
        return float(np.mean(self.predict(X) == np.asarray(y)))

    def _weights_doc(self) -> dict[str, Any]:
        self._check_fitted()
        if getattr(self, "_weights", None) is None:
            self._weights = self._service().models.export(self.model_id_, format="json")
        return self._weights

    @property
    def coef_(self) -> np.ndarray:
        return np.asarray(self._weights_doc()["coef"], dtype=np.float64)

    @property
    def intercept_(self) -> np.ndarray:
        return np.asarray(self._weights_doc()["intercept"], dtype=np.float64)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"
