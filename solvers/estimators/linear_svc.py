"""`LinearSVC`: scikit-learn-compatible linear SVM classification over Margin's dual solvers.

Two classes with ``multi_class="ovr"`` train one binary problem (`solvers.binary.solve_binary`,
LIBLINEAR's -s 1 / -s 3); more classes train k one-vs-rest problems
(`solvers.multiclass.solve_ovr`). ``multi_class="crammer_singer"`` and ``"weston_watkins"`` train
one joint multi-class problem by the sequential dual method. Class weights and sample weights are
folded into per-sample C values as LIBLINEAR's -wi does. X goes through the input door once
(`solvers._core.problem`) and reaches the solver as its validated view. Non-convergence is
reported in `status_` and `gap_` (and as a ConvergenceWarning, as scikit-learn users expect).
Only scikit-learn's public API is used.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils import compute_class_weight
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from solvers._core.problem import csr_arrays, fold_weights_into_C
from solvers._core.progress import Status
from solvers.binary.newton import PATH_NEWTON_TOL
from solvers.estimators import params as P

MULTI_CLASS = ("ovr", "crammer_singer", "weston_watkins")


PROBABILITY_FOLDS = 5  # the internal stratified k-fold of probability=True


def binary_signs(y_index: np.ndarray) -> np.ndarray:
    """Class indices 0/1 as the labels -1/+1 of the binary solver."""
    return np.where(y_index == 1, 1.0, -1.0)


def _calibrated(estimator) -> bool:
    """Whether the estimator's parameters ask for probabilities (`_asks_probabilities`)."""
    return estimator._asks_probabilities()


class LinearSVC(ClassifierMixin, BaseEstimator):
    """Linear support vector classification by dual coordinate descent.

    Parameters
    ----------
    C : float, default=1.0
        Penalty of the loss (inverse regularization strength).
    loss : {"squared_hinge", "hinge", "squared_error"}, default="squared_hinge"
        L2 loss, L1 loss, or least squares on ±1 targets (binary and one-vs-rest only; the
        joint multi-class formulations have their own loss).
    tol : float, default=0.1
        Absolute tolerance on the dual's projected gradient (max violation for multi-class).
    max_iter : int, default=1000
        Maximum number of outer iterations (passes over the data).
    fit_intercept : bool, default=True
        Learn an intercept through a constant feature of value ``intercept_scaling``
        (regularized, as in LIBLINEAR's -B).
    intercept_scaling : float, default=1.0
        Value of that constant feature.
    class_weight : dict, "balanced" or None, default=None
        Multiplies C for the samples of each class (LIBLINEAR's -wi; for one-vs-rest, class j's
        problem weighs its positives by weight_j and its negatives by 1).
    random_state : int, RandomState or None, default=0
        Seed of the coordinate order.
    shrinking : bool, default=True
        Skip variables stuck at a bound (the full set is re-checked before stopping).
    order : {"permute", "cyclic", "random"}, default="permute"
        Order of the coordinate steps (binary and one-vs-rest).
    time_limit : float or None, default=None
        Wall-clock budget in seconds of the fit; with ``probability=True``, of the internal
        folds and the final fit together (as `solvers.LinearSVCCV`'s).
    callback : callable or None, default=None
        Receives a `solvers.Progress` per outer iteration; returning False stops the fit.
    warm_start : bool, default=False
        Start from the previous fit's dual variables when the problem's shape matches, or from
        a `dual_coef_` set before the first fit (a stored iterate: a resumed solve).
    multi_class : {"ovr", "crammer_singer", "weston_watkins"}, default="ovr"
    n_jobs : int or None, default=None
        The fit's whole thread budget (None: every core): one-vs-rest spends it on classes
        first, then inside each binary problem; two classes use it inside their one problem
        (`solvers.binary.parallel`). Problems too small to gain use fewer threads.
    probability : bool, default=False
        Also fit `predict_proba`: a calibration (``calibration``) on the held-out decision
        values of an internal stratified 5-fold at this C (`solvers.selection`); the final fit
        starts from the folds' solutions. The callback then receives
        `solvers.selection.search.SearchProgress` records.
    calibration : {"auto", "sigmoid", "softmax", "isotonic"}, default="auto"
        With ``probability=True``, the map from those decision values to probabilities, as
        `solvers.LinearSVCCV`'s: "auto" is Platt per class for two classes and one-vs-rest, one
        softmax temperature for Crammer–Singer and Weston–Watkins.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    coef_ : ndarray of shape (1, n_features) for two classes, else (n_classes, n_features)
    intercept_ : ndarray of shape (1,) or (n_classes,)
        ``intercept_scaling · w_bias`` (0 without an intercept).
    dual_coef_ : ndarray
        Two classes, one-vs-rest: α of shape (n_samples,), with w = Σ α_i y_i x̃_i and
        y_i = +1 for ``classes_[1]``. More classes: (n_classes, n_samples). Crammer–Singer and
        Weston–Watkins: (n_samples, n_classes).
    n_iter_ : int
    status_ : str
        "converged", "max_iter", "stopped" or "time_limit", of the returned model. After a
        finish by primal Newton (``method_ == "newton"``), "converged" means its rule held:
        ‖∇P(w)‖ ≤ ε′‖∇P(0)‖ with ε′ = 0.01 · tol · max(1, min(n₊, n₋)) / n
        (`solvers.binary.newton`), and ``duality_gap_`` certifies the pair (w, α(w)).
    method_ : str or None
        "dcd", or "newton" when the squared hinge's dual passes stalled and the primal
        truncated Newton method finished the fit; None for the other formulations.
    gap_ : float
        The solver's stopping measure on the returned model (the last record of
        ``history_`` carries the same): the projected-gradient range M − m (``pg_range``) for
        two classes and one-vs-rest, the largest violation (``max_violation``) for
        Crammer–Singer and Weston–Watkins, ‖∇P‖/‖∇P(0)‖ after a Newton finish; compared with
        ``tol`` (with ε′ after a Newton finish).
    duality_gap_ : float
        (P − D) / max(1, |P|) of the returned model: the primal objective's relative distance
        from the optimum is at most this.
    objective_ : float
        Primal objective of the fitted model (bias weight included).
    history_ : list of dict
        One progress record per outer iteration.
    calibration_ : solvers.selection.Calibration or None
        The map from decision values to probabilities (``probability=True``).
    """

    _rules = {
        "C": P.positive(),
        "loss": P.one_of("squared_hinge", "hinge", "squared_error"),
        "tol": P.positive(),
        "max_iter": P.at_least_one(),
        "fit_intercept": P.boolean(),
        "intercept_scaling": P.bias_value(),
        "class_weight": P.class_weight(),
        "random_state": P.random_state(),
        "shrinking": P.boolean(),
        "order": P.one_of("permute", "cyclic", "random"),
        "time_limit": P.positive_or_none(),
        "callback": P.callable_or_none(),
        "warm_start": P.boolean(),
        "multi_class": P.one_of(*MULTI_CLASS),
        "n_jobs": P.at_least_one_or_none(),
        "probability": P.boolean(),
        "calibration": P.calibration(),
    }

    def __init__(
        self,
        C=1.0,
        loss="squared_hinge",
        tol=0.1,
        max_iter=1000,
        fit_intercept=True,
        intercept_scaling=1.0,
        class_weight=None,
        random_state=0,
        shrinking=True,
        order="permute",
        time_limit=None,
        callback=None,
        warm_start=False,
        multi_class="ovr",
        n_jobs=None,
        probability=False,
        calibration="auto",
    ):
        self.C = C
        self.loss = loss
        self.tol = tol
        self.max_iter = max_iter
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.class_weight = class_weight
        self.random_state = random_state
        self.shrinking = shrinking
        self.order = order
        self.time_limit = time_limit
        self.callback = callback
        self.warm_start = warm_start
        self.multi_class = multi_class
        self.n_jobs = n_jobs
        self.probability = probability
        self.calibration = calibration

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit the model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            float32 data stays float32; sparse input is used as CSR without a copy.
        y : array-like of shape (n_samples,)
            Class labels (any integers or strings).
        sample_weight : array-like of shape (n_samples,), default=None
            Multiplies C per sample; samples of weight 0 are ignored.

        Returns
        -------
        self
        """
        P.check_params(self, self._rules)
        X, y = validate_data(
            self, X, y, accept_sparse="csr", dtype=[np.float64, np.float32], order="C",
            accept_large_sparse=True,
        )  # fmt: skip
        check_classification_targets(y)
        self.classes_, y_index = np.unique(y, return_inverse=True)
        n_classes = len(self.classes_)
        if n_classes < 2:
            raise ValueError(
                "LinearSVC needs samples of at least 2 classes in the data, got one class: "
                f"{self.classes_[0]!r}"
            )
        if self.loss == "squared_error" and (n_classes > 2 or self.multi_class != "ovr"):
            raise ValueError(
                "loss='squared_error' is available for two classes with multi_class='ovr'; "
                f"got {n_classes} classes and multi_class={self.multi_class!r}"
            )
        if getattr(self, "probability", False):
            return self._fit_calibrated(X, y, sample_weight)
        self.calibration_ = None
        X = csr_arrays(X)
        class_weight = compute_class_weight(self.class_weight, classes=self.classes_, y=y)
        result = self._solve(X, y_index, n_classes, sample_weight, class_weight)
        self._store(result, n_classes)
        return self

    def decision_function(self, X):
        """Scores x̃ᵀw: shape (n_samples,) for two classes, else (n_samples, n_classes)."""
        check_is_fitted(self)
        X = validate_data(
            self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False,
            accept_large_sparse=True,
        )  # fmt: skip
        scores = np.asarray(X @ self.coef_.T, dtype=np.float64) + self.intercept_
        return scores.ravel() if scores.shape[1] == 1 else scores

    @available_if(_calibrated)
    def predict_proba(self, X):
        """Calibrated class probabilities, shape (n_samples, n_classes), columns in the order of
        ``classes_`` (rows sum to 1); needs a fit with ``probability=True``."""
        check_is_fitted(self)
        if getattr(self, "calibration_", None) is None:
            raise AttributeError(
                "predict_proba needs calibrated probabilities: fit with probability=True"
            )
        return self.calibration_.probabilities(self.decision_function(X))

    def _asks_probabilities(self) -> bool:
        """``probability``: a LinearSVC's ``calibration`` only says how."""
        return bool(self.probability)

    def _fit_calibrated(self, X, y, sample_weight):
        from solvers.selection.cv import LinearSVCCV

        if self.calibration in (None, "none"):
            raise ValueError("probability=True needs a calibration method, got 'none'")
        params = {k: v for k, v in self.get_params().items() if k not in ("probability", "C")}
        search = LinearSVCCV(Cs=[self.C], cv=PROBABILITY_FOLDS, **params).fit(X, y, sample_weight)
        for name in ("coef_", "intercept_", "dual_coef_", "n_iter_", "status_", "gap_",
                     "duality_gap_", "objective_", "history_", "calibration_"):  # fmt: skip
            setattr(self, name, getattr(search, name))
        self._fitted_multi_class = self.multi_class
        return self

    def predict(self, X):
        """Class labels, shape (n_samples,)."""
        scores = self.decision_function(X)
        best = (scores > 0).astype(np.intp) if scores.ndim == 1 else scores.argmax(axis=1)
        return self.classes_[best]

    def _common(self):
        seed = P.seed_of(self.random_state)
        return {
            "bias": float(self.intercept_scaling) if self.fit_intercept else 0.0,
            "tol": float(self.tol),
            "max_iter": int(self.max_iter),
            "shrinking": bool(self.shrinking),
            "random_state": seed,
            "time_limit": self.time_limit,
            "callback": self.callback,
        }

    def _previous_alpha(self, shape):
        # no previous fit: a dual_coef_ the caller set is taken as the starting point
        if not self.warm_start or getattr(self, "_fitted_multi_class", self.multi_class) != (
            self.multi_class
        ):
            return None
        alpha = getattr(self, "dual_coef_", None)
        return alpha if alpha is not None and alpha.shape == shape else None

    def _solve(self, X, y_index, n_classes, sample_weight, class_weight, rows=None, alpha0=None,
               primal_start=None, newton_after=None, signs=None, on_path=False,
               warm_weights=None):  # fmt: skip
        """The solver's result at ``self.C``: on ``rows`` of X only when given (an index array,
        X not copied), starting from ``alpha0`` when given (else from the previous fit's α when
        ``warm_start`` says so), or for two classes and an L2 loss from the weights
        ``primal_start`` by the primal Newton method; ``newton_after`` caps the dual passes
        before the Newton finish (binary and one-vs-rest, `solvers.binary.solve_binary`).
        ``signs``, for two classes, is y as ±1 (`binary_signs`) when the caller keeps it across
        solves. ``on_path``: a solve of a path over C, used for its held-out values: ``alpha0``
        is the previous C's solution on the same rows, the dual passes begin on its support
        (``start_on_support`` of `solve_ovr`, and of `solve_binary` on one thread), and a Newton
        finish stops at LIBLINEAR's own rule (``newton_tol`` = 0.1 · tol,
        `solvers.binary.newton`). ``warm_weights``: the weights ``alpha0`` holds, for two
        classes or one-vs-rest (the solvers' ``warm_weights``)."""
        n = X.n_samples
        subset = {} if rows is None else {"rows": rows}
        m = n if rows is None else len(rows)
        uniform = np.all(class_weight == 1.0)
        per_class = None if uniform else class_weight[y_index]
        common = self._common()
        newton_tol = PATH_NEWTON_TOL * self.tol if on_path else None
        if self.multi_class == "ovr" and n_classes == 2:
            from solvers.binary import solve_binary

            y_pm = binary_signs(y_index) if signs is None else signs
            C = fold_weights_into_C(self.C, n, sample_weight, per_class)
            return solve_binary(
                X,
                y_pm,
                loss=self.loss,
                C=C,
                order=self.order,
                warm_start=self._previous_alpha((m,)) if alpha0 is None else alpha0,
                warm_weights=None if alpha0 is None else warm_weights,
                primal_start=primal_start,
                newton_after=newton_after,
                newton_tol=newton_tol,
                start_on_support=on_path and alpha0 is not None,
                n_jobs=self.n_jobs,
                **subset,
                **common,
            )
        if self.multi_class == "ovr":
            from solvers.multiclass.ovr import solve_ovr

            C = self._ovr_C(n, n_classes, y_index, sample_weight, class_weight, uniform)
            return solve_ovr(
                X,
                y_index,
                n_classes,
                loss=self.loss,
                C=C,
                order=self.order,
                n_jobs=self.n_jobs,
                warm_start=self._previous_alpha((n_classes, m)) if alpha0 is None else alpha0,
                warm_weights=None if alpha0 is None else warm_weights,
                newton_after=newton_after,
                newton_tol=newton_tol,
                start_on_support=on_path and alpha0 is not None,
                **subset,
                **common,
            )
        if self.multi_class == "crammer_singer":
            from solvers.multiclass.crammer_singer import solve_crammer_singer as solve
        else:
            from solvers.multiclass.weston_watkins import solve_weston_watkins as solve
        C = fold_weights_into_C(self.C, n, sample_weight, per_class)
        warm = self._previous_alpha((m, n_classes)) if alpha0 is None else alpha0
        return solve(X, y_index, n_classes, C=C, warm_start=warm, **subset, **common)

    def _ovr_C(self, n, n_classes, y_index, sample_weight, class_weight, uniform):
        """C for one-vs-rest: (k, n) with class weights (positives C·w_j, negatives C)."""
        base = fold_weights_into_C(self.C, n, sample_weight)
        if uniform:
            return base
        C = np.empty((n_classes, n))
        C[:] = base
        for j in range(n_classes):
            C[j, y_index == j] *= class_weight[j]
        return C

    def _set_weights(self, result, n_classes):
        """``coef_`` and ``intercept_`` of a solver's result (nothing else, no warning)."""
        w = np.asarray(result.w, dtype=np.float64)
        bias = np.atleast_1d(np.asarray(result.bias, dtype=np.float64))
        if w.ndim == 2 and n_classes == 2:
            # joint formulations with two classes: the difference of the class scores
            w, bias = w[1:2] - w[0:1], bias[1:2] - bias[0:1]
        self.coef_ = np.atleast_2d(w)
        self.intercept_ = bias if bias.shape[0] == self.coef_.shape[0] else np.zeros(1)

    def _store(self, result, n_classes):
        self._set_weights(result, n_classes)
        self.dual_coef_ = result.alpha
        self.n_iter_ = int(result.n_iter)
        self.status_ = Status(result.status).value
        self.method_ = result.method
        self.gap_ = float(result.gap)
        self.duality_gap_ = result.duality_gap
        self.objective_ = None if result.primal is None else float(result.primal)
        self.history_ = [p.as_dict() for p in result.history]
        self._fitted_multi_class = self.multi_class
        if result.status in (Status.MAX_ITER, Status.TIME_LIMIT):
            warnings.warn(
                f"LinearSVC did not converge ({self.status_}: gap_ {self.gap_:.3g} > tol "
                f"{self.tol:g} after {self.n_iter_} iterations; the model's objective is within "
                f"a relative {self.duality_gap_:.2g} of the optimum); increase max_iter or "
                "time_limit, loosen tol, or scale the data.",
                ConvergenceWarning,
                stacklevel=3,
            )
