"""Estimator name -> how to train it on a stored dataset and turn the result into model weights.

Each trainer gets the validated params, the data and a progress callback, and returns a
`Trained` record; the solvers are imported here, inside the worker, never in the API process.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Trained:
    kind: str  # "classifier" | "regressor"
    classes: list[float] | None
    coef: np.ndarray  # (n_outputs, n_features)
    intercept: np.ndarray  # (n_outputs,)
    status: str  # the solver's status: converged, max_iter, stopped, time_limit
    gap: float | None
    n_iter: int
    predict: Callable[[Any], np.ndarray]  # labels (classifier) or values (regressor) of X


def _labels(value: Any) -> list[float]:
    return [float(v) for v in np.asarray(value).ravel()]


def _class_weight(weights: Any) -> Any:
    if isinstance(weights, dict):
        return {float(k): float(v) for k, v in weights.items()}
    return weights


def train_linear_svc(params: dict, X, y, qid, callback, n_jobs: int | None) -> Trained:
    from solvers import LinearSVC

    est = LinearSVC(
        **{**params, "class_weight": _class_weight(params.get("class_weight"))},
        callback=callback,
        n_jobs=n_jobs,
    )
    est.fit(X, y)
    return _from_estimator(est, "classifier", _labels(est.classes_))


def train_linear_svr(params: dict, X, y, qid, callback, n_jobs: int | None) -> Trained:
    from solvers import LinearSVR

    est = LinearSVR(**params, callback=callback)
    est.fit(X, y)
    return _from_estimator(est, "regressor", None)


def _from_estimator(est, kind: str, classes: list[float] | None) -> Trained:
    coef = np.atleast_2d(np.asarray(est.coef_, dtype=np.float64))
    intercept = np.broadcast_to(
        np.asarray(est.intercept_, dtype=np.float64), (coef.shape[0],)
    ).copy()
    n_iter = np.max(np.asarray(est.n_iter_)) if np.size(est.n_iter_) else 0
    gap = getattr(est, "gap_", None)
    gap = float(np.max(gap)) if gap is not None and np.size(gap) else None
    return Trained(
        kind=kind,
        classes=classes,
        coef=coef,
        intercept=intercept,
        status=str(est.status_),
        gap=gap,
        n_iter=int(n_iter),
        predict=est.predict,
    )


def train_structural(params: dict, X, y, qid, callback, n_jobs: int | None) -> Trained:
    from solvers import fit_structural

    options = {k: v for k, v in params.items() if k not in ("online", "cache_size")}
    result = fit_structural(X, y, qid, callback=callback, **options)
    coef = np.atleast_2d(np.asarray(result.w, dtype=np.float64))
    return Trained(
        kind="regressor",
        classes=None,
        coef=coef,
        intercept=np.zeros(coef.shape[0]),
        status=str(result.status),
        gap=None if result.gap is None else float(result.gap),
        n_iter=int(result.n_iter),
        predict=lambda Z: np.asarray(Z @ coef[0]),
    )


TRAINERS = {
    "LinearSVC": train_linear_svc,
    "LinearSVR": train_linear_svr,
    "structural": train_structural,
}
