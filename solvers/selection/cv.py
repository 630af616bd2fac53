"""`LinearSVCCV` and `LinearSVRCV`: LinearSVC / LinearSVR with C (and ε) chosen by k-fold
cross-validation over a warm-started path (`solvers.selection.search`), folds in parallel
threads over one copy of X, and probabilities calibrated on the held-out decision values.

Conventions follow scikit-learn's `LogisticRegressionCV`, with one C for all classes (``C_`` is a
float; ties go to the smaller C) and ``cv_results_`` laid out like `GridSearchCV`'s.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import compute_class_weight
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import validate_data

from solvers._core.problem import csr_arrays
from solvers.estimators import params as P
from solvers.estimators.linear_svc import LinearSVC, binary_signs
from solvers.estimators.linear_svr import LinearSVR
from solvers.selection import grid
from solvers.selection.calibration import METHODS
from solvers.selection.search import Search, deadline_of, finish, held_out_decisions

_SVC_FIELDS = tuple(LinearSVC._rules)
_SVR_FIELDS = tuple(LinearSVR._rules)
_SEARCH_RULES = {
    "refit": P.boolean(),
    "n_jobs": P.at_least_one_or_none(),
}


def fold_class_weights(class_weight, classes, y_fold) -> np.ndarray:
    """Per-class weights of one fold's training rows, in the order of ``classes``, computed on
    the fold as scikit-learn's search does. A class with no row in the fold (it has fewer rows
    than there are folds) weighs 1: it has nothing there to weigh, and "balanced" is computed
    over the classes present, as a fit on the fold's rows alone would."""
    if class_weight is None:
        return np.ones(len(classes))
    if not isinstance(class_weight, str):  # a dict: the same weights in every fold
        return compute_class_weight(class_weight, classes=classes, y=y_fold)
    weights = np.ones(len(classes))
    present = np.isin(classes, y_fold)
    weights[present] = compute_class_weight(class_weight, classes=classes[present], y=y_fold)
    return weights


def within_refit_bounds(alpha0, weights, fold_weights, y_index) -> np.ndarray:
    """The folds' averaged α of a joint formulation, each row scaled into the refit's bounds.
    A fold's α_i is feasible for C·w_f(y_i), its own class weights ("balanced" counts the
    fold's rows), so their mean is for the largest w_f(y_i), beyond the refit's C·w(y_i)
    wherever a fold weighed the class more (the refit then raised "warm_start is
    infeasible"). Each row's constraints scale with its bound, so scaling the row by
    w(y_i) / max_f w_f(y_i) keeps it feasible. A class weighed 0 in every fold has α = 0 on
    its rows: their scale is 1, not 0/0."""
    top = np.max(fold_weights, axis=0)
    scale = np.minimum(1.0, np.divide(weights, top, out=np.ones_like(top), where=top > 0))
    return alpha0 * scale[y_index][:, None]


def _check_calibration(value, multi_class):
    if value is None or value == "none":
        return None
    if value == "auto":
        return joint_default(multi_class)
    if value not in METHODS:
        raise ValueError(f"calibration must be one of {METHODS}, 'auto' or None, got {value!r}")
    return value


def joint_default(multi_class: str) -> str:
    """Platt per class (normalized) for two classes and one-vs-rest, whose k scores are k
    separate problems; one softmax temperature for Crammer–Singer and Weston–Watkins, whose
    scores are trained to be compared across classes. Measured on held-out halves (log loss,
    Crammer–Singer / Weston–Watkins, C = 0.1): dna 0.225 / 0.235 with the temperature against
    0.261 / 0.268 with per-class Platt, segment 0.355 / 0.283 against 0.411 / 0.412, vowel
    1.615 / 1.409 against 1.474 / 1.425 (`benchmarks/bench_model_selection.py calibration`):
    the temperature wins in 5 of 6 and has one parameter instead of 2k."""
    return "sigmoid" if multi_class == "ovr" else "softmax"


class LinearSVCCV(LinearSVC):
    """LinearSVC with C chosen by cross-validation along a warm-started path.

    Parameters (beyond LinearSVC's, whose ``C`` is ignored)
    ----------
    Cs : int or list of float, default=10
        A list is searched whole; an int n is a log grid from LIBLINEAR's start value up to
        1024, stopped early once the score has not improved for 3 values (`solvers.selection.grid`).
    cv : int, splitter or iterable of (train, test), default=5
        An int is a seeded stratified k-fold (seed ``random_state``).
    scoring : str, callable or None, default=None (accuracy)
    refit : bool, default=True
        Fit on all rows at ``C_``, warm-started from the folds' solutions at that C.
    calibration : {"auto", "sigmoid", "softmax", "isotonic"} or None, default="auto"
        Probabilities from the held-out decision values at ``C_`` (no extra training).
    n_jobs : int or None
        Total threads of one fit: folds first, then classes inside a fold (None: every core).
    callback : callable or None
        Receives a `solvers.selection.search.SearchProgress` per solver pass (fold, C index,
        the solver's `Progress`) and one as each solve ends (its last pass again, counted in
        ``solves_done``), from the worker threads one at a time; False stops the search.
    time_limit : float or None
        Wall-clock budget in seconds of the whole fit: the path (every fold at every C) and the
        refit together, counted from the call to `fit`. Each solve gets what is left of it; no
        solve starts once it is spent, and the solves then running stop at it (status
        "time_limit"). The search then ends with ``search_status_ == "time_limit"``: the table
        holds the grid points that every fold finished before the deadline (the point it cut
        short is left out, as its scores are those of unfinished solves), ``C_`` is the best of
        them, and the refit at ``C_`` starts from the folds' solutions with what is left of the
        budget, making at least one pass over the rows (so the fit may overrun the budget by
        about one pass of each running solve and one of the refit). Were no grid point finished,
        ``C_`` is the grid's first value, ``best_score_`` NaN and the refit starts from zero.

    Attributes
    ----------
    C_ : float
        The C of the best mean score (ties: the smaller C).
    best_score_, best_params_ : the best mean score and its grid point.
    cv_results_ : dict of arrays
        Per grid point that every fold finished: ``param_C``, ``mean_test_score``,
        ``std_test_score``, ``rank_test_score``, ``mean_fit_time`` and per fold f
        ``split{f}_test_score``, ``_n_iter``, ``_fit_time``, ``_status``, ``_duality_gap``,
        ``_method`` ("dcd", or "newton" where the solve ended by, or ran only, the primal
        Newton method: `solvers.selection.search.WarmStarts` says when a path goes primal;
        there the path's solves stop at LIBLINEAR's own rule, ε′ with 0.1 · tol in place of
        0.01 · tol, `solvers.binary.newton`: they rank the Cs and give the calibration its
        held-out values, and the refit keeps the fit's rule).
    scores_ : ndarray (n_points, n_folds)
    Cs_ : the grid searched (ascending).
    search_status_ : "complete", "stopped" by the callback, or "time_limit" (the path ran out
        of ``time_limit``; see above). ``status_`` is the refit's.
    calibration_ : `solvers.selection.Calibration` or None
    and LinearSVC's fitted attributes, of the refit.
    """

    _classifier = True
    _early_stop = True

    def __init__(self, Cs=10, cv=5, scoring=None, refit=True, calibration="auto", C=1.0,
                 loss="squared_hinge", tol=0.1, max_iter=1000, fit_intercept=True,
                 intercept_scaling=1.0, class_weight=None, random_state=0, shrinking=True,
                 order="permute", time_limit=None, callback=None, warm_start=False,
                 multi_class="ovr", n_jobs=None):  # fmt: skip
        super().__init__(C=C, loss=loss, tol=tol, max_iter=max_iter, fit_intercept=fit_intercept,
                         intercept_scaling=intercept_scaling, class_weight=class_weight,
                         random_state=random_state, shrinking=shrinking, order=order,
                         time_limit=time_limit, callback=callback, warm_start=warm_start,
                         multi_class=multi_class, n_jobs=n_jobs)  # fmt: skip
        self.Cs, self.cv, self.scoring, self.refit = Cs, cv, scoring, refit
        self.calibration = calibration

    def _asks_probabilities(self) -> bool:
        return self.calibration not in (None, "none")

    def _template(self):
        params = {k: getattr(self, k) for k in _SVC_FIELDS}
        return LinearSVC(**{**params, "callback": None, "warm_start": False})

    def fit(self, X, y, sample_weight=None):
        P.check_params(self, {**self._rules, **_SEARCH_RULES})
        deadline = deadline_of(self.time_limit)
        method = _check_calibration(self.calibration, self.multi_class)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                             order="C", accept_large_sparse=True)  # fmt: skip
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        k = len(self.classes_)
        if k < 2:
            raise ValueError(
                "LinearSVCCV needs samples of at least 2 classes in the data, got one class: "
                f"{self.classes_[0]!r}"
            )
        X = csr_arrays(X)
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        fold_list = grid.folds(self.cv, y, True, P.seed_of(self.random_state))
        Cs, self._early_stop = grid.c_grid(self.Cs, X, bias, len(fold_list[0][0]))
        self.Cs_ = Cs
        sw = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)

        primal = k == 2 and self.multi_class == "ovr" and self.loss == "squared_hinge"
        primal = primal and min(len(train) for train, _ in fold_list) > X.n_features

        signs = binary_signs(y_index) if k == 2 else None  # one copy for every solve

        def fit_one(est, train, alpha0, start, newton_after, warm_weights):
            weights = fold_class_weights(est.class_weight, self.classes_, y[train])
            return est._solve(X, y_index, k, sw, weights, rows=train, alpha0=alpha0,
                              primal_start=start, newton_after=newton_after,
                              signs=signs, on_path=True, warm_weights=warm_weights)  # fmt: skip

        def decisions_of(est, result, test):
            est._set_weights(result, k)
            return held_out_decisions(X, test, est.coef_, est.intercept_)

        points = [{"C": float(c)} for c in Cs]
        search = Search(self, X, y_index, points, fold_list, fit_one=fit_one,
                        decisions_of=decisions_of, primal=primal, bias=bias,
                        row_axis=self._row_axis(k), calibrating=method is not None,
                        deadline=deadline, hand_weights=self.multi_class == "ovr")  # fmt: skip
        self._labels = y
        state = search.run()
        best, alpha0 = finish(search, state, calibrate=method)
        if self.refit:
            est = search.template(best, "refit", None, None)
            est.n_jobs = self.n_jobs  # the whole budget: the folds are done
            weights = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
            if alpha0 is not None and self.multi_class != "ovr":
                folds = [fold_class_weights(self.class_weight, self.classes_, y[train])
                         for train, _ in fold_list]  # fmt: skip
                alpha0 = within_refit_bounds(alpha0, weights, folds, y_index)
            start = None
            if primal and search.best is not None:
                start = search.best[3]
            result = est._solve(X, y_index, k, sw, weights, alpha0=alpha0, primal_start=start,
                                signs=signs)  # fmt: skip
            est.callback.end(result)
            self._store(result, k)
        del self._labels
        return self

    def _row_axis(self, k):
        return 1 if self.multi_class == "ovr" and k > 2 else 0

    def _labels_of(self, rows):
        return self._labels[rows]

    def _stand_in(self, result):
        est = self._template()
        est.classes_, est.n_features_in_ = self.classes_, self.n_features_in_
        est._set_weights(result, len(self.classes_))
        return est


class LinearSVRCV(LinearSVR):
    """LinearSVR with C and ε chosen together by cross-validation (as LIBLINEAR's -s 11 -C
    searches C and p): for each ε a warm-started path over C.

    Parameters (beyond LinearSVR's, whose ``C`` and ``epsilon`` are ignored)
    ----------
    Cs : int or list of float, default=10
        As for `LinearSVCCV` (the whole grid is searched: no early stop).
    epsilons : int or list of float, default=(0.0,)
        An int n: LIBLINEAR's grid of ε, max|y|·j/n for j = 0..n−1.
    cv : int, splitter or iterable, default=5 (a seeded shuffled k-fold)
    scoring : default "neg_mean_squared_error"
    refit, n_jobs : as for `LinearSVCCV`.
    time_limit : float or None
        The whole fit's budget (the path over every (C, ε) and the refit), as for `LinearSVCCV`.
    """

    _classifier = False
    _early_stop = False

    def __init__(self, Cs=10, epsilons=(0.0,), cv=5, scoring=None, refit=True, n_jobs=None,
                 epsilon=0.0, tol=1e-4, C=1.0, loss="epsilon_insensitive", fit_intercept=True,
                 intercept_scaling=1.0, max_iter=1000, random_state=0, shrinking=True,
                 time_limit=None, callback=None, warm_start=False):  # fmt: skip
        super().__init__(epsilon=epsilon, tol=tol, C=C, loss=loss, fit_intercept=fit_intercept,
                         intercept_scaling=intercept_scaling, max_iter=max_iter,
                         random_state=random_state, shrinking=shrinking, time_limit=time_limit,
                         callback=callback, warm_start=warm_start)  # fmt: skip
        self.Cs, self.epsilons, self.cv, self.scoring = Cs, epsilons, cv, scoring
        self.refit, self.n_jobs = refit, n_jobs

    def _template(self):
        params = {k: getattr(self, k) for k in _SVR_FIELDS}
        return LinearSVR(**{**params, "callback": None, "warm_start": False})

    def _epsilons(self, y):
        if isinstance(self.epsilons, int | np.integer) and not isinstance(self.epsilons, bool):
            n = int(self.epsilons)
            if n < 1:
                raise ValueError(f"epsilons must be a positive int or a list, got {n}")
            return np.abs(y).max(initial=0.0) * np.arange(n) / n
        values = np.unique(np.asarray(self.epsilons, dtype=np.float64).ravel())
        if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values < 0):
            raise ValueError(f"epsilons must be non-negative floats, got {self.epsilons!r}")
        return values

    def fit(self, X, y, sample_weight=None):
        P.check_params(self, {**self._rules, **_SEARCH_RULES})
        deadline = deadline_of(self.time_limit)
        X, y = validate_data(self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32],
                             y_numeric=True, order="C")  # fmt: skip
        y = np.asarray(y, dtype=np.float64)
        X = csr_arrays(X)
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        fold_list = grid.folds(self.cv, y, False, P.seed_of(self.random_state))
        Cs, _ = grid.c_grid(self.Cs, X, bias, len(fold_list[0][0]))
        self.Cs_, self.epsilons_ = Cs, self._epsilons(y)
        sw = None if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        points = [{"C": float(c), "epsilon": float(e), "restart": j == 0}
                  for e in self.epsilons_ for j, c in enumerate(Cs)]  # fmt: skip

        def fit_one(est, train, alpha0, start, newton_after, warm_weights):
            return est._solve(X, y, sw, rows=train, alpha0=alpha0)

        def decisions_of(est, result, test):
            coef = np.asarray(result.w, dtype=np.float64)[None, :]
            return held_out_decisions(X, test, coef, np.array([result.bias]))

        search = Search(self, X, y, points, fold_list, fit_one=fit_one, decisions_of=decisions_of,
                        deadline=deadline)
        self._labels = y
        state = search.run()
        best, alpha0 = finish(search, state, calibrate=None)
        self.epsilon_ = float(best["epsilon"])
        if self.refit:
            est = search.template(best, "refit", None, None)
            result = est._solve(X, y, sw, alpha0=alpha0)
            est.callback.end(result)
            self._store(result)
        del self._labels
        return self

    def _labels_of(self, rows):
        return self._labels[rows]

    def _stand_in(self, result):
        est = self._template()
        est.n_features_in_ = self.n_features_in_
        est.coef_ = np.asarray(result.w, dtype=np.float64)
        est.intercept_ = np.array([result.bias])
        return est
