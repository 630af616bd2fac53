"""`LinearSVR`: scikit-learn-compatible linear support vector regression.

Parameter names and fitted attributes follow scikit-learn's LinearSVR; the solver is the dual
coordinate descent of `solvers.regression.solve_svr` (LIBLINEAR's -s 13 / -s 12), reached
through the input door (`solvers._core.problem`). Non-convergence is reported in `status_` and
`gap_` (and as a ConvergenceWarning, as scikit-learn users expect). Only scikit-learn's public
API is used.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.validation import check_is_fitted, validate_data

from solvers._core.problem import csr_arrays, fold_weights_into_C
from solvers._core.progress import Status
from solvers.estimators import params as P
from solvers.regression.svr import solve_svr


class LinearSVR(RegressorMixin, BaseEstimator):
    """Linear ε-insensitive support vector regression.

    Parameters
    ----------
    epsilon : float, default=0.0
        Half-width of the insensitive tube.
    tol : float, default=1e-4
        Relative stopping tolerance (sum of dual violations over that of the first pass).
    C : float, default=1.0
        Loss weight (inverse regularization strength).
    loss : {"epsilon_insensitive", "squared_epsilon_insensitive"}, default="epsilon_insensitive"
        L1 or L2 ε-insensitive loss.
    fit_intercept : bool, default=True
        Learn an intercept through a constant feature of value ``intercept_scaling``
        (regularized, as in LIBLINEAR).
    intercept_scaling : float, default=1.0
        Value of that constant feature.
    max_iter : int, default=1000
        Maximum number of passes.
    random_state : int or None, default=0
        Seed of the coordinate order.
    shrinking : bool, default=True
        Skip variables stuck at a bound (re-checked before stopping).
    time_limit : float or None, default=None
        Wall-clock budget in seconds.
    callback : callable or None, default=None
        Receives a `solvers.Progress` per pass; returning False stops the fit.
    warm_start : bool, default=False
        Start from the previous fit's dual variables when the data shape matches, or from a
        `dual_coef_` set before the first fit (a stored iterate: a resumed solve).

    Attributes
    ----------
    coef_ : ndarray of shape (n_features,)
    intercept_ : ndarray of shape (1,)
    n_iter_ : int
    status_ : str
        "converged", "max_iter", "stopped" or "time_limit". After a finish by primal Newton
        (``method_ == "newton"``, the squared loss only), "converged" means ‖∇P(w)‖ ≤
        ε′‖∇P(0)‖ with ε′ = 0.01 · tol (`solvers.regression.svr_newton`).
    method_ : str
        "dcd", or "newton" when the dual passes stalled and primal Newton finished the fit.
    gap_ : float
        Relative violation of the returned model (sum of violations over that of the first
        pass), compared with ``tol``; the last record of ``history_`` carries the same.
    duality_gap_ : float
        (P − D) / max(1, |P|) of the returned model.
    objective_ : float
        Primal objective of the fitted model.
    history_ : list of dict
        One progress record per pass.
    dual_coef_ : ndarray of shape (n_samples,)
        The dual variables β (w = Σ β_i x_i).
    """

    _rules = {
        "epsilon": P.non_negative(),
        "tol": P.positive(),
        "C": P.positive(),
        "loss": P.one_of("epsilon_insensitive", "squared_epsilon_insensitive"),
        "fit_intercept": P.boolean(),
        "intercept_scaling": P.bias_value(),
        "max_iter": P.at_least_one(),
        "random_state": P.random_state(),
        "shrinking": P.boolean(),
        "time_limit": P.positive_or_none(),
        "callback": P.callable_or_none(),
        "warm_start": P.boolean(),
    }

    def __init__(
        self,
        epsilon=0.0,
        tol=1e-4,
        C=1.0,
        loss="epsilon_insensitive",
        fit_intercept=True,
        intercept_scaling=1.0,
        max_iter=1000,
        random_state=0,
        shrinking=True,
        time_limit=None,
        callback=None,
        warm_start=False,
    ):
        self.epsilon = epsilon
        self.tol = tol
        self.C = C
        self.loss = loss
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.max_iter = max_iter
        self.random_state = random_state
        self.shrinking = shrinking
        self.time_limit = time_limit
        self.callback = callback
        self.warm_start = warm_start

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def fit(self, X, y, sample_weight=None):
        """Fit the model.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional
            Multiplies C per sample; samples with weight 0 are ignored.

        Returns
        -------
        self
        """
        P.check_params(self, self._rules)
        X, y = validate_data(
            self,
            X,
            y,
            accept_sparse="csr",
            dtype=[np.float64, np.float32],
            y_numeric=True,
            order="C",
        )
        y = np.asarray(y, dtype=np.float64)
        X = csr_arrays(X)
        warm = None
        if self.warm_start and getattr(self, "dual_coef_", np.empty(0)).shape == y.shape:
            warm = self.dual_coef_
        self._store(self._solve(X, y, sample_weight, alpha0=warm))
        return self

    def _solve(self, X, y, sample_weight, rows=None, alpha0=None):
        """The solver's result at ``self.C`` and ``self.epsilon``: on ``rows`` of X only when
        given (an index array, X not copied), starting from ``alpha0`` when given."""
        C = fold_weights_into_C(float(self.C), X.n_samples, sample_weight)
        bias = float(self.intercept_scaling) if self.fit_intercept else 0.0
        return solve_svr(
            X,
            y,
            loss=self.loss,
            epsilon=float(self.epsilon),
            C=C,
            bias=bias,
            tol=float(self.tol),
            max_iter=int(self.max_iter),
            shrinking=bool(self.shrinking),
            random_state=P.seed_of(self.random_state),
            time_limit=self.time_limit,
            callback=self.callback,
            warm_start=alpha0,
            rows=rows,
        )

    def _store(self, res):
        self.coef_ = res.w
        self.intercept_ = np.array([res.bias if self.fit_intercept else 0.0])
        self.n_iter_ = int(res.n_iter)
        self.status_ = str(res.status)
        self.method_ = res.method
        self.gap_ = float(res.gap)
        self.duality_gap_ = res.duality_gap
        self.objective_ = float(res.primal)
        self.history_ = [p.as_dict() for p in res.history]
        self.dual_coef_ = res.alpha
        if res.status is Status.MAX_ITER:
            warnings.warn(
                f"LinearSVR did not converge in {self.n_iter_} passes (relative violation "
                f"{self.gap_:.3g} > tol {self.tol}); increase max_iter.",
                ConvergenceWarning,
                stacklevel=3,
            )

    def predict(self, X):
        """Predicted values, shape (n_samples,)."""
        check_is_fitted(self)
        X = validate_data(self, X, accept_sparse="csr", dtype=[np.float64, np.float32], reset=False)
        return np.asarray(X @ self.coef_, dtype=np.float64).ravel() + self.intercept_[0]
