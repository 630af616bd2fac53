"""Linear support vector regression by dual coordinate descent (LIBLINEAR's -s 13 and -s 12).

Primal, with f(x) = wᵀx (+ b · w_b when a bias feature of value b is appended):

    min_w ½‖w‖² + Σ_i C_i ℓ(|y_i − f(x_i)| − ε),   ℓ(t) = max(0, t) (L1) or max(0, t)² (L2).

Dual (Ho and Lin, "Large-scale linear support vector regression", JMLR 2012; the per-variable
form of Hsieh et al. 2008 applied to β = α⁺ − α⁻):

    min_β ½ βᵀ(XXᵀ + Λ)β − yᵀβ + ε‖β‖₁,   −U_i ≤ β_i ≤ U_i,   w = Σ β_i x_i,

with U_i = C_i, Λ = 0 for the L1 loss and U_i = ∞, Λ_ii = 1 / (2 C_i) for the L2 loss. Each step
minimizes the one-variable problem exactly (the ε‖·‖₁ term makes it piecewise quadratic). Variables
at a bound whose gradient points outward by more than the last pass's largest violation are
shrunk; the solve stops when the sum of violations of a pass falls below tol times that of the
first pass, confirmed on the full set (LIBLINEAR's rule, so its tol means the same; after a warm
start the reference is the violation sum at beta = 0).
"""

from __future__ import annotations

import numpy as np

from solvers import _svr_kernels as K
from solvers.progress import Callback, Monitor, Progress, SolveResult, Status
from solvers.structural import as_csr

LOSSES = ("epsilon_insensitive", "squared_epsilon_insensitive")


def _per_sample_C(C, n):
    c = np.asarray(C, dtype=np.float64)
    if c.ndim == 0:
        c = np.full(n, float(c))
    if c.shape != (n,):
        raise ValueError(f"C must be a scalar or have shape ({n},), got {c.shape}")
    if not np.all(np.isfinite(c)) or np.any(c < 0):
        raise ValueError("C must be finite and >= 0")
    return c


def svr_objectives(X, y, w_full, beta, *, loss, epsilon, C, bias):
    """(primal, dual) of the module docstring's problems; the dual in minimization form."""
    X = as_csr(X)
    c = _per_sample_C(C, X.shape[0])
    f = K.decision(X.data, X.indices.view(np.uint32), X.indptr, float(bias), w_full)
    t = np.maximum(np.abs(y - f) - epsilon, 0.0)
    reg = 0.5 * float(w_full @ w_full)
    keep = c > 0
    if loss == "epsilon_insensitive":
        primal = reg + float(c @ t)
        lam = np.zeros_like(c)
    else:
        primal = reg + float(c @ (t * t))
        lam = np.where(keep, 0.5 / np.where(keep, c, 1.0), 0.0)
    dual = reg + float(epsilon * np.abs(beta).sum() - y @ beta + 0.5 * (lam * beta) @ beta)
    return primal, dual


def solve_svr(
    X,
    y,
    *,
    loss="epsilon_insensitive",
    epsilon=0.0,
    C=1.0,
    bias=0.0,
    tol=0.1,
    max_iter=1000,
    shrinking=True,
    random_state=0,
    time_limit=None,
    callback: Callback | None = None,
    warm_start=None,
) -> SolveResult:
    """Fit a linear SVR by dual coordinate descent.

    Parameters
    ----------
    X : sparse matrix, shape (n_samples, n_features)
    y : array, shape (n_samples,)
        Real targets.
    loss : {"epsilon_insensitive", "squared_epsilon_insensitive"}
        L1 (LIBLINEAR -s 13) or L2 (-s 12) ε-insensitive loss.
    epsilon : float
        Width ε of the insensitive tube (LIBLINEAR's -p).
    C : float or array of shape (n_samples,)
        Per-sample loss weight; rows with C_i = 0 are dropped (beta 0).
    bias : float
        Value of an implicit constant feature (LIBLINEAR's -B); 0 means none.
    tol : float
        Relative stopping tolerance on the sum of violations (LIBLINEAR's -e).
    max_iter, shrinking, random_state, time_limit, callback
        As for the other solvers; the callback receives a `Progress` per pass with
        gap = (sum of violations) / (that of the first pass) and M = the largest violation.
    warm_start : array of shape (n_samples,) or SolveResult, optional
        Previous beta.

    Returns
    -------
    SolveResult
        w (n_features,), bias (the intercept, bias · w_bias), alpha = beta (n_samples,),
        primal and dual (minimization) objectives.
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}, got {loss!r}")
    if not epsilon >= 0:
        raise ValueError(f"epsilon must be >= 0, got {epsilon!r}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    if not np.isfinite(bias) or bias < 0:
        raise ValueError(f"bias must be a finite value >= 0, got {bias!r}")
    X = as_csr(X)
    n, d = X.shape
    y = np.asarray(y, dtype=np.float64)
    if y.shape != (n,) or not np.all(np.isfinite(y)):
        raise ValueError(f"y must be finite with shape ({n},), got {y.shape}")
    c = _per_sample_C(C, n)
    monitor = Monitor(callback, time_limit)
    keep = c > 0
    if loss == "epsilon_insensitive":
        upper, lam = c.copy(), np.zeros(n)
    else:
        upper = np.where(keep, np.inf, 0.0)
        lam = np.where(keep, 0.5 / np.where(keep, c, 1.0), 0.0)
    ind = X.indices.view(np.uint32)
    qd = K.row_sqnorms(X.data, ind, X.indptr, float(bias))

    beta = np.zeros(n)
    w = np.zeros(d + 1)
    if warm_start is not None:
        beta = np.array(getattr(warm_start, "alpha", warm_start), dtype=np.float64)
        if beta.shape != (n,) or not np.all(np.isfinite(beta)):
            raise ValueError(f"warm_start must be finite with shape ({n},), got {beta.shape}")
        beta = np.clip(beta, -upper, upper)
        w[:d] = X.T @ beta
        w[d] = bias * beta.sum()

    index = np.flatnonzero(keep).astype(np.int64)
    total = len(index)
    active = total
    rng = np.random.default_rng(random_state)
    gmax_old = np.inf
    # LIBLINEAR's reference scale is the first pass's sum of violations; a warm start would make
    # it tiny, so it then uses the violations of beta = 0 (what a cold start's first pass sees).
    gnorm1_init = None
    if warm_start is not None:
        gnorm1_init = float(np.maximum(np.abs(y[index]) - epsilon, 0.0).sum())
    status = Status.MAX_ITER
    it = 0
    while it < int(max_iter):
        it += 1
        index[:active] = rng.permutation(index[:active])
        active, gmax_new, gnorm1 = K.epoch(
            X.data,
            ind,
            X.indptr,
            y,
            float(bias),
            lam,
            upper,
            float(epsilon),
            qd,
            beta,
            w,
            index,
            active,
            gmax_old,
            bool(shrinking),
        )
        if gnorm1_init is None:
            gnorm1_init = gnorm1
        rel = gnorm1 / gnorm1_init if gnorm1_init > 0 else 0.0
        stop = monitor.report(Progress(it, monitor.elapsed(), rel, M=gmax_new, active=int(active)))
        if rel <= tol:
            if active == total:
                status = Status.CONVERGED
                break
            active = total
            gmax_old = np.inf
        else:
            gmax_old = gmax_new
        if stop is not None:
            status = stop
            break
    primal, dual = svr_objectives(X, y, w, beta, loss=loss, epsilon=epsilon, C=c, bias=bias)
    return SolveResult(
        w=w[:d].copy(),
        bias=float(bias * w[d]),
        alpha=beta,
        n_iter=it,
        status=status,
        gap=rel,
        primal=primal,
        dual=dual,
        history=monitor.history,
    )
