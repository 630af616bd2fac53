"""Estimator name -> how to train it on a stored dataset and turn the result into model weights.

Each trainer gets the validated params, the data and a progress callback, and returns a
`Trained` record; the solvers are imported here, inside the worker, never in the API process
(which may load only their light progress records, through `finite_or_none`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from solvers._core.progress import finite_or_none


@dataclass
class Trained:
    kind: str  # "classifier" | "regressor"
    classes: list[int | float | str] | None  # str: class names of text labels (runner)
    coef: np.ndarray  # (n_outputs, n_features)
    intercept: np.ndarray  # (n_outputs,)
    status: str  # the solver's status: converged, max_iter, stopped, time_limit
    gap: float | None
    n_iter: int
    predict: Callable[[Any], np.ndarray]  # labels (classifier) or values (regressor) of X
    dual: np.ndarray | None = None  # the dual variables (resumable estimators: a checkpoint)
    calibration: dict | None = None  # solvers.selection.Calibration.to_dict()
    selection: dict | None = None  # the search's table and choice (`selection_summary`)
    duality_gap: float | None = None  # relative, of the returned weights, where measured


def _labels(value: Any) -> list[int | float]:
    """The classes as the dataset's labels are: integers stay integers (`-1`, not `-1.0`)."""
    return label_values(np.asarray(value).ravel().tolist())


def label_values(values) -> list[int | float | str]:
    """Each label as an int when it is integral (as the dataset summary keeps them), else a
    float; predictions then return labels of the dataset's own type. Text labels (class
    names) stay text."""
    out = []
    for v in values:
        if isinstance(v, str):
            out.append(v)
            continue
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

    options = {**params, "class_weight": _class_weight(params.get("class_weight"))}
    search, calibration = options.pop("search", None), options.pop("calibration", "auto")
    if search is not None:
        return _train_search(options, search, calibration, X, y, callback, n_jobs)
    if options.get("probability"):
        if calibration == "none":
            options["probability"] = False
        else:
            options["calibration"] = calibration
    est = LinearSVC(**options, callback=callback, n_jobs=n_jobs, warm_start=init_dual is not None)
    if init_dual is not None:
        est.dual_coef_ = init_dual
    est.fit(X, y)
    trained = _from_estimator(est, "classifier", _labels(est.classes_))
    trained.calibration = _calibration_of(est)
    return trained


def _train_search(options, search: dict, calibration, X, y, callback, n_jobs) -> Trained:
    from solvers import LinearSVCCV

    options.pop("C", None)
    options.pop("probability", None)
    est = LinearSVCCV(
        Cs=_grid(search.get("Cs")), cv=int(search.get("cv", 5)),
        scoring=search.get("scoring", "accuracy"),
        calibration=None if calibration == "none" else calibration,
        callback=callback, n_jobs=n_jobs, **options,
    )  # fmt: skip
    est.fit(X, y)
    trained = _from_estimator(est, "classifier", _labels(est.classes_))
    trained.calibration = _calibration_of(est)
    trained.selection = selection_summary(est)
    if est.search_status_ == "time_limit":  # the path ran out: C was chosen among fewer values
        trained.status = "time_limit"
    return trained


def _grid(Cs):
    if Cs is None:
        return 10
    if isinstance(Cs, list):
        return [float(c) for c in Cs]
    if Cs.get("min") is not None and Cs.get("max") is not None:
        low, high = sorted((float(Cs["min"]), float(Cs["max"])))
        return np.geomspace(low, high, int(Cs.get("num", 10))).tolist()
    return int(Cs.get("num", 10))


def _calibration_of(est) -> dict | None:
    calibration = getattr(est, "calibration_", None)
    return None if calibration is None else calibration.to_dict()


def selection_summary(est) -> dict:
    """The search's choice and its table as JSON: one row per C that every fold finished;
    ``search_status`` "complete", or "time_limit" where the job's bound ended the path first."""
    table = est.cv_results_
    n_folds = sum(1 for key in table if key.endswith("_test_score") and key.startswith("split"))
    rows = []
    for i, C in enumerate(table["param_C"]):
        rows.append({
            "C": float(C),
            "mean_score": float(table["mean_test_score"][i]),
            "std_score": float(table["std_test_score"][i]),
            "fold_scores": [float(table[f"split{f}_test_score"][i]) for f in range(n_folds)],
            "n_iter": [int(table[f"split{f}_n_iter"][i]) for f in range(n_folds)],
            "fit_time_s": [float(table[f"split{f}_fit_time"][i]) for f in range(n_folds)],
            "status": [str(table[f"split{f}_status"][i]) for f in range(n_folds)],
            # NaN where a fold's objectives overflowed (C 1e300 on values 1e99): null in JSON,
            # which PostgreSQL's json refuses NaN in (the job failed as it stored its model)
            "duality_gap": [
                finite_or_none(table[f"split{f}_duality_gap"][i]) for f in range(n_folds)
            ],
        })  # fmt: skip
    return {
        "C": float(est.C_),
        "search_status": est.search_status_,
        "best_score": finite_or_none(est.best_score_),  # NaN when no C finished
        "scoring": est.scoring or "accuracy",
        "cv": n_folds,
        "table": rows,
    }


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


def resumable(trainer, params: dict) -> bool:
    """Whether a job trains in checkpointed segments: a resumable trainer on one solve (a search
    or an internal calibration fold runs many solves, and has no single dual point to resume)."""
    many_solves = params.get("search") is not None or bool(params.get("probability"))
    return getattr(trainer, "resumable", False) and not many_solves


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
        duality_gap=finite_or_none(getattr(est, "duality_gap_", None)),
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
        duality_gap=finite_or_none(getattr(result, "duality_gap", None)),
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
