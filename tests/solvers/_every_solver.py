"""Every public solver and estimator, each as a function of X alone on one small problem.

`SOLVERS` maps a name to ``fit(X, **options) -> SolveResult or fitted estimator`` and
`solution(out)` flattens what they return into one vector (weights and intercepts), so that
tests can run all of them on the same matrix in many forms.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

import solvers

N_ROWS, N_FEATURES = 90, 12
C = 0.1  # a small C converges in a few dozen passes: every test here runs each solver often
TIGHT = {"C": C, "tol": 1e-8, "max_iter": 100_000}


def dense_problem(seed=0):
    """(X dense float64 with zeros and an empty row, binary ±1 labels, 3 classes, real targets)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_ROWS, N_FEATURES))
    X[rng.random(X.shape) < 0.55] = 0.0
    X[7] = 0.0  # an empty row
    w = rng.standard_normal(N_FEATURES)
    score = X @ w + 0.3 * rng.standard_normal(N_ROWS)
    y_pm = np.where(score > np.median(score), 1.0, -1.0)
    y3 = np.digitize(score, np.quantile(score, [1 / 3, 2 / 3]))
    return X, y_pm, y3, score


_, Y_PM, Y3, TARGET = dense_problem()
GROUPS = np.arange(N_ROWS) // 3  # three constraint rows per example
MARGINS = 1.0 + 0.1 * (np.arange(N_ROWS) % 5)


def _stream(X, **options):
    """The online structural solver over the first 48 rows of X (in X's own form), in two
    chunks that split an example."""
    if sp.issparse(X):
        X = X.tocsr() if X.format == "coo" else X
    cut, end = 25, 48

    def chunks():
        yield X[:cut], MARGINS[:cut], GROUPS[:cut]
        yield X[cut:end], MARGINS[cut:end], GROUPS[cut:end]

    options = {"C": C, "tol": 1e-7, "max_iter": 200, "passes": 30, **options}
    return solvers.solve_structural_stream(chunks, n_features=N_FEATURES, cache_size=1.0, **options)


SOLVERS = {
    "binary hinge": lambda X, **o: solvers.solve_binary(
        X, Y_PM, loss="hinge", bias=1.0, **{**TIGHT, **o}
    ),
    "binary squared hinge": lambda X, **o: solvers.solve_binary(
        X, Y_PM, loss="squared_hinge", bias=1.0, **{**TIGHT, **o}
    ),
    "binary squared error": lambda X, **o: solvers.solve_binary(
        X, TARGET, loss="squared_error", bias=1.0, **{**TIGHT, **o}
    ),
    "one-vs-rest": lambda X, **o: solvers.solve_ovr(X, Y3, 3, bias=1.0, n_jobs=1, **{**TIGHT, **o}),
    "Crammer-Singer": lambda X, **o: solvers.solve_crammer_singer(
        X, Y3, 3, bias=1.0, **{**TIGHT, **o}
    ),
    "Weston-Watkins": lambda X, **o: solvers.solve_weston_watkins(
        X, Y3, 3, bias=1.0, **{**TIGHT, **o}
    ),
    "SVR": lambda X, **o: solvers.solve_svr(X, TARGET, epsilon=0.1, bias=1.0, **{**TIGHT, **o}),
    "structural": lambda X, **o: solvers.solve_structural(X, MARGINS, GROUPS, **{**TIGHT, **o}),
    "structural stream": _stream,
    "LinearSVC binary": lambda X, **o: solvers.LinearSVC(**{**TIGHT, **o}).fit(X, Y_PM),
    "LinearSVC one-vs-rest": lambda X, **o: solvers.LinearSVC(n_jobs=1, **{**TIGHT, **o}).fit(
        X, Y3
    ),
    "LinearSVC Crammer-Singer": lambda X, **o: solvers.LinearSVC(
        multi_class="crammer_singer", **{**TIGHT, **o}
    ).fit(X, Y3),
    "LinearSVC Weston-Watkins": lambda X, **o: solvers.LinearSVC(
        multi_class="weston_watkins", **{**TIGHT, **o}
    ).fit(X, Y3),
    "LinearSVR": lambda X, **o: solvers.LinearSVR(epsilon=0.1, **{**TIGHT, **o}).fit(X, TARGET),
}


def solution(out) -> np.ndarray:
    """Weights and intercepts of a result or a fitted estimator, as one float64 vector."""
    if hasattr(out, "coef_"):
        parts = (out.coef_, out.intercept_)
    else:
        parts = (out.w, out.bias)
    return np.concatenate([np.ravel(np.asarray(p, dtype=np.float64)) for p in parts])
