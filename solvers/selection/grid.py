"""The grid of C values, the folds and the scores of a search.

Grid rule for ``Cs=n`` (an int): n values spaced evenly in log scale from LIBLINEAR's start
value (its ``calc_start_C``: the power of two at or below 1 / (2 · l · max_i ‖x̃_i‖²), a C at
which the solution is still almost w = 0, as every α_i is tiny) up to ``C_MAX``; the path stops
early once the mean score has not improved on its best for ``PATIENCE`` consecutive values after it
first rose above the first value's score (on larger C the models only overfit more and the
solves get slower). An explicit list is searched whole, sorted ascending.

Scores are computed from the held-out decision values the path already has (no predict
call): the scikit-learn scorer names listed in ``FAST_SCORES``. Any other scorer name or a
callable ``scorer(estimator, X, y)`` is called on a fitted stand-in estimator, as scikit-learn's
cross-validation would.
"""

from __future__ import annotations

import numpy as np
from sklearn import metrics
from sklearn.model_selection import check_cv

from solvers._core.sparse import row_sq_norms

C_MAX = 1024.0
PATIENCE = 3


def start_C(X, bias: float, n_train: int) -> float:
    """LIBLINEAR's start of the C path: the power of two at or below 1/(2 l max ‖x̃_i‖²)."""
    largest = float(row_sq_norms(X.data, X.indptr, float(bias)).max(initial=0.0))
    if largest <= 0.0 or n_train <= 0:
        return 1.0
    return float(2.0 ** np.floor(np.log2(1.0 / (2.0 * n_train * largest))))


def c_grid(Cs, X, bias: float, n_train: int) -> tuple[np.ndarray, bool]:
    """(the C values ascending, whether the early-stopping rule applies)."""
    if isinstance(Cs, int | np.integer) and not isinstance(Cs, bool):
        if Cs < 1:
            raise ValueError(f"Cs must be a positive int or a list of positive floats, got {Cs}")
        low = min(start_C(X, bias, n_train), C_MAX)
        return np.geomspace(low, C_MAX, int(Cs)) if Cs > 1 else np.array([low]), True
    values = np.asarray(Cs, dtype=np.float64).ravel()
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"Cs must be a positive int or a list of positive floats, got {Cs!r}")
    return np.unique(values), False


def should_stop(mean_scores: list[float]) -> bool:
    """The early-stopping rule of an int ``Cs`` (module docstring)."""
    best = int(np.argmax(mean_scores))
    risen = mean_scores[best] > mean_scores[0]
    return risen and len(mean_scores) - 1 - best >= PATIENCE


def folds(cv, y, classifier: bool, random_state) -> list[tuple[np.ndarray, np.ndarray]]:
    """(train, test) index arrays: an int k is a seeded stratified k-fold for classifiers (a
    seeded shuffled k-fold for regressors); anything `check_cv` accepts otherwise."""
    from sklearn.model_selection import KFold, StratifiedKFold

    if isinstance(cv, int | np.integer) and not isinstance(cv, bool):
        if cv < 2:
            raise ValueError(f"cv must be at least 2 folds, got {cv}")
        kind = StratifiedKFold if classifier else KFold
        cv = kind(int(cv), shuffle=True, random_state=random_state)
    splitter = check_cv(cv, y, classifier=classifier)
    out = []
    for train, test in splitter.split(np.zeros((len(y), 1)), y):
        out.append((np.asarray(train, dtype=np.int64), np.asarray(test, dtype=np.int64)))
    return out


def _predicted(decisions):
    return (decisions > 0).astype(np.intp) if decisions.ndim == 1 else decisions.argmax(axis=1)


FAST_SCORES = {
    "accuracy": lambda y, f: float(np.mean(_predicted(f) == y)),
    "balanced_accuracy": lambda y, f: float(metrics.balanced_accuracy_score(y, _predicted(f))),
    "f1_macro": lambda y, f: float(metrics.f1_score(y, _predicted(f), average="macro")),
    "roc_auc": lambda y, f: float(metrics.roc_auc_score(y, f)),
    "neg_mean_squared_error": lambda y, f: -float(np.mean((f - y) ** 2)),
    "neg_mean_absolute_error": lambda y, f: -float(np.mean(np.abs(f - y))),
    "r2": lambda y, f: float(metrics.r2_score(y, f)),
}


def check_scoring(scoring, classifier: bool):
    """A fast score name, or a scikit-learn scorer (called on a stand-in estimator)."""
    if scoring is None:
        return "accuracy" if classifier else "neg_mean_squared_error"
    if scoring == "roc_auc" or scoring in FAST_SCORES:
        return scoring
    if callable(scoring):
        return scoring
    return metrics.get_scorer(scoring)  # raises a clear ValueError for an unknown name
