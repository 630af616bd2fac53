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
    classes: list[int | float] | None
    coef: np.ndarray  # (n_outputs, n_features)
    intercept: np.ndarray  # (n_outputs,)
    status: str  # the solver's status: converged, max_iter, stopped, time_limit
    gap: float | None
    n_iter: int
    predict: Callable[[Any], np.ndarray]  # labels (classifier) or values (regressor) of X
    dual: np.ndarray | None = None  # the dual variables (resumable estimators: a checkpoint)


def _labels(value: Any) -> list[int | float]:
    """The classes as the dataset's labels are: integers stay integers (`-1`, not `-1.0`)."""
    return label_values(np.asarray(value).ravel().tolist())


def label_values(values) -> list[int | float]:
    """Each label as an int when it is integral (as the dataset summary keeps them), else a
    float; predictions then return labels of the dataset's own type."""
    out = []
    for v in values:
        v = float(v)
        out.append(int(v) if v.is_integer() and abs(v) < 2**53 else v)
    return out


def _class_weight(weights: Any) -> Any:
    if isinstance(weights, dict):
        return {float(k): float(v) for k, v in weights.items()}
    return weights


def train_linear_svc(
    params: dict, X, y, qid, callback, n_jobs: int | None, init_dual=None
) -> Trained:
    """`init_dual`: start from these dual variables (a checkpoint), else from zero."""
    from solvers import LinearSVC

    est = LinearSVC(
        **{**params, "class_weight": _class_weight(params.get("class_weight"))},
        callback=callback,
        n_jobs=n_jobs,
        warm_start=init_dual is not None,
    )
    if init_dual is not None:
        est.dual_coef_ = init_dual
    est.fit(X, y)
    return _from_estimator(est, "classifier", _labels(est.classes_))


def train_linear_svr(
    params: dict, X, y, qid, callback, n_jobs: int | None, init_dual=None
) -> Trained:
    from solvers import LinearSVR

    est = LinearSVR(**params, callback=callback, warm_start=init_dual is not None)
    if init_dual is not None:
        est.dual_coef_ = init_dual
    est.fit(X, y)
    return _from_estimator(est, "regressor", None)


# trainers that start from a given dual point and hand theirs back (app.jobs.checkpoint)
train_linear_svc.resumable = True
train_linear_svr.resumable = True


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
        dual=getattr(est, "dual_coef_", None),
    )


STRUCTURAL_ONLINE_ONLY = ("online", "cache_size", "passes")
STRUCTURAL_BATCH_ONLY = ("pairwise", "shrinking")


def streams(estimator: str, params: dict) -> bool:
    """Whether the job reads its dataset as a stream (memory-mapped chunks) rather than loaded."""
    return estimator == "structural" and bool(params.get("online"))


def train_structural(params: dict, X, y, qid, callback, n_jobs: int | None) -> Trained:
    """Batch: `solvers.fit_structural` on the loaded rows. Online: `fit_structural_stream` over
    the memory-mapped arrays (`stored_chunks.map_arrays`), read in chunks sized to the cache."""
    if params.get("online"):
        result = _fit_structural_online(params, X, y, qid, callback)
    else:
        from solvers import fit_structural

        options = {k: v for k, v in params.items() if k not in STRUCTURAL_ONLINE_ONLY}
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


def _fit_structural_online(params: dict, X, y, qid, callback):
    from app.services import stored_chunks
    from solvers import fit_structural_stream

    stored_chunks.check_contiguous(qid)
    chunk_rows = stored_chunks.chunk_rows_for(X, qid, params["cache_size"])
    options = {
        k: v
        for k, v in params.items()
        if k not in STRUCTURAL_BATCH_ONLY and k not in ("online", "cache_size")
    }
    return fit_structural_stream(
        stored_chunks.chunk_source(X, y, qid, chunk_rows),
        chunk_rows=chunk_rows,
        cache_size=params["cache_size"],
        n_features=X.shape[1],
        callback=callback,
        **options,
    )


TRAINERS = {
    "LinearSVC": train_linear_svc,
    "LinearSVR": train_linear_svr,
    "structural": train_structural,
}
