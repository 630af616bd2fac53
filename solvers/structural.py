"""Generalized shared-slack SVM by dual coordinate ascent (structural SVMs and their reductions).

Problem (Ramanan, "Dual coordinate solvers for large-scale structural SVMs", eq. 1 with the
flexible regularization of section 7 and the bounds of section 6):

    min_w  ½‖(w − w₀) ∘ r‖² + Σ_i C_i max(0, max_{j ∈ N_i} (l_ij − wᵀx_ij))     [s.t. w ≥ 0]

Each example i owns the constraint vectors x_ij (rows of X, grouped by `groups`) with margins l_ij;
they share one slack. The change of variables ŵ = (w − w₀) ∘ r, x̂ = x / r, l̂ = l − w₀ᵀx turns the
prior into the plain problem; w ≥ 0 becomes ŵ ≥ lo = −w₀ ∘ r. Dual (in the C-scaled form):

    max_α  −½‖ŵ‖² + (ŵ − u)ᵀlo + Σ l̂_ij α_ij,  α_ij ≥ 0, Σ_j α_ij ≤ C_i,
    u = Σ α_ij x̂_ij, ŵ = u (or max(u, lo) under the bound).

Algorithm 1 of the paper: random passes over the dual variables with the exact single update
(clip(g/‖x̂‖², −α_ij, C_i − α_i)) and, when the sum constraint is active and g_ij > 0, the pairwise
update with the partner of smallest gradient among the example's non-zero α (corrected forms of
eqs. 25 and 28). LB = F(α) is tracked; the approximate bound UB' (eq. 36, from the gradients of the
last pass) decides when to compute the exact UB = primal(ŵ) (eq. 35) by a pass; the solve stops when
UB − LB ≤ tol · max(1, |UB|). Shrinking (as LIBLINEAR's, not in the paper) skips rows with α = 0
whose constraint held when last visited; only full passes lead to the exact UB.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from solvers import _structural_kernels as K
from solvers.progress import Callback, Monitor, Progress, SolveResult, Status


def as_csr(X, name="X"):
    """CSR with sorted indices and float32/float64 values (no copy when already so)."""
    if not sp.issparse(X):
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"{name} must be a 2-D matrix, got an array of shape {X.shape}")
        X = sp.csr_matrix(X if X.dtype in (np.float32, np.float64) else X.astype(np.float64))
    elif X.format != "csr":
        X = X.tocsr()
    if X.dtype not in (np.float32, np.float64):
        X = X.astype(np.float64)
    if not X.has_sorted_indices:
        X = X.sorted_indices()
    return X


class Reparam:
    """The change of variables for the prior w₀, the scale r and the bound w ≥ 0."""

    def __init__(self, n_features, *, nonneg=False, w0=None, reg_scale=None):
        self.n_features = n_features
        self.w0 = None if w0 is None else _feature_vector(w0, n_features, "w0")
        if reg_scale is None:
            self.r = None
            self.s = np.ones(n_features)
        else:
            self.r = _feature_vector(reg_scale, n_features, "reg_scale")
            if not np.all(self.r > 0):
                raise ValueError("reg_scale must be positive for every feature, got a value <= 0")
            self.s = 1.0 / self.r
        self.bounded = bool(nonneg)
        self.lo = np.zeros(n_features)
        if self.bounded and self.w0 is not None:
            self.lo = -self.w0 * (self.r if self.r is not None else 1.0)

    def margins(self, X, margins):
        """l̂ = l − w₀ᵀx."""
        return margins if self.w0 is None else margins - X @ self.w0

    def to_original(self, w_hat):
        """w = w₀ + ŵ / r, kept ≥ 0 under the bound (rounding may not)."""
        w = w_hat * self.s
        if self.w0 is not None:
            w = w + self.w0
        if self.bounded:
            np.maximum(w, 0.0, out=w)
            w[w_hat <= self.lo] = 0.0  # exactly 0 where the bound is active
        return w

    def weights(self, u):
        """ŵ from u: a separate clipped array under the bound, else u itself."""
        return np.maximum(u, self.lo) if self.bounded else u

    def quad(self, u, w):
        """Σ_k φ_k = −½‖ŵ‖² + (ŵ − u)ᵀlo."""
        q = -0.5 * float(w @ w)
        if self.bounded:
            q += float((w - u) @ self.lo)
        return q


def _feature_vector(v, n_features, name):
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (n_features,):
        raise ValueError(f"{name} must have shape ({n_features},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite")
    return v


def within_tol(ub, lb, tol):
    return ub - lb <= tol * max(1.0, abs(ub))


class _Groups:
    """Rows grouped by example: row → group, and each group's rows (for the partner search)."""

    def __init__(self, groups, n_rows):
        groups = np.asarray(groups)
        if groups.shape != (n_rows,):
            raise ValueError(f"groups must have shape ({n_rows},), got {groups.shape}")
        self.labels, inverse = np.unique(groups, return_inverse=True)
        self.grp = inverse.astype(np.int64).ravel()
        self.n = len(self.labels)
        self.members = np.argsort(self.grp, kind="stable").astype(np.int64)
        self.gptr = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.grp, minlength=self.n), out=self.gptr[1:])

    def caps(self, C):
        cap = np.asarray(C, dtype=np.float64)
        if cap.ndim == 0:
            cap = np.full(self.n, float(cap))
        if cap.shape != (self.n,):
            raise ValueError(
                f"C must be a scalar or have one value per example ({self.n},), got {cap.shape}"
            )
        if not np.all(np.isfinite(cap)) or np.any(cap < 0):
            raise ValueError("C must be finite and >= 0")
        return cap


def _check_warm_start(warm_start, n_rows, groups, cap):
    alpha = getattr(warm_start, "alpha", warm_start)
    alpha = np.array(alpha, dtype=np.float64)
    if alpha.shape != (n_rows,):
        raise ValueError(f"warm_start must have one alpha per row ({n_rows},), got {alpha.shape}")
    if not np.all(np.isfinite(alpha)) or np.any(alpha < 0):
        raise ValueError("warm_start alpha must be finite and >= 0")
    alpha[cap[groups.grp] == 0] = 0.0
    sums = np.bincount(groups.grp, weights=alpha, minlength=groups.n)
    if np.any(sums > cap * (1 + 1e-6) + 1e-12):
        raise ValueError("warm_start alpha exceeds C for some example (Σ_j alpha_ij <= C_i)")
    over = sums > cap
    if np.any(over):  # rounding only: scale those groups back onto the constraint
        alpha *= np.where(over, cap / np.where(over, sums, 1.0), 1.0)[groups.grp]
    return alpha


# A full pass at least this often: rows shrunk early may be violated again as w moves on.
_FULL_PASS_EVERY = 10


def _next_active(rows, active, alpha, gseen, full, met, since_full):
    """Shrinking: skip rows with alpha = 0 whose constraint held (g < 0) when last visited.

    When the gap measured on the shrunk set meets the tolerance (or every `_FULL_PASS_EVERY`
    passes) the next pass is a full one: only a full pass gives UB' over all the data, and the
    exact UB is computed only after one.
    """
    if not full and (met or since_full >= _FULL_PASS_EVERY):
        return rows, True
    keep = (alpha[active] > 0) | (gseen[active] >= 0)
    return active[keep], False


def fit_structural(
    X,
    margins,
    groups,
    *,
    C=1.0,
    tol=1e-3,
    max_iter=1000,
    nonneg=False,
    w0=None,
    reg_scale=None,
    random_state=0,
    callback: Callback | None = None,
    warm_start=None,
    time_limit=None,
    pairwise=True,
    shrinking=True,
) -> SolveResult:
    """Solve the shared-slack SVM (module docstring) by dual coordinate ascent.

    Parameters
    ----------
    X : sparse matrix, shape (n_rows, n_features)
        Row r is the constraint vector x_ij of example ``groups[r]``.
    margins : array, shape (n_rows,)
        The margin l_ij of each row.
    groups : array, shape (n_rows,)
        Example label of each row (any hashable sortable values, rows in any order).
    C : float or array of shape (n_groups,)
        Loss weight per example (in the order of ``np.unique(groups)``); 0 drops the example.
    tol : float
        Stop when UB − LB ≤ tol · max(1, |UB|).
    max_iter : int
        Maximum number of passes.
    nonneg : bool
        Constrain the returned w to be ≥ 0.
    w0, reg_scale : arrays of shape (n_features,), optional
        Prior mean and positive per-feature scale r of the regularizer ½‖(w − w0) ∘ r‖².
    random_state : int
        Seed of the pass order.
    callback : callable, optional
        Receives a `Progress` per pass; returning False stops the solve.
    warm_start : array of shape (n_rows,) or SolveResult, optional
        Previous alpha (w is rebuilt from it).
    time_limit : float, optional
        Wall-clock budget in seconds.
    pairwise : bool
        Use the pairwise update on active examples (turning it off shows why it is needed).
    shrinking : bool
        Skip rows with alpha = 0 whose constraint held on their last visit, until the gap on the
        remaining rows meets tol; a full pass (and the exact UB) then decides.

    Returns
    -------
    SolveResult
        w (n_features,), alpha (n_rows,) with Σ_j alpha_ij ≤ C_i, lower_bound (F(α)),
        upper_bound (primal of w, exact), gap = UB − LB, history of `Progress` per pass.
    """
    X = as_csr(X)
    n_rows, n_features = X.shape
    margins = np.asarray(margins, dtype=np.float64)
    if margins.shape != (n_rows,) or not np.all(np.isfinite(margins)):
        raise ValueError(f"margins must be finite with shape ({n_rows},), got {margins.shape}")
    if not tol > 0:
        raise ValueError(f"tol must be > 0, got {tol!r}")
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter!r}")
    monitor = Monitor(callback, time_limit)
    groups = _Groups(groups, n_rows)
    cap = groups.caps(C)
    rp = Reparam(n_features, nonneg=nonneg, w0=w0, reg_scale=reg_scale)
    lm = np.ascontiguousarray(rp.margins(X, margins), dtype=np.float64)
    ind = X.indices.view(np.uint32)
    args = (X.data, ind, X.indptr, rp.s)

    if warm_start is None:
        alpha = np.zeros(n_rows)
        u = np.zeros(n_features)
    else:
        alpha = _check_warm_start(warm_start, n_rows, groups, cap)
        u = K.scatter_alpha(*args, alpha, n_features)
    w = rp.weights(u)
    asum = np.bincount(groups.grp, weights=alpha, minlength=groups.n).astype(np.float64)
    sqn = K.row_sqnorms(*args)
    rows = np.flatnonzero(cap[groups.grp] > 0).astype(np.int64)
    rng = np.random.default_rng(random_state)

    def exact_ub():
        return 0.5 * float(w @ w) + K.group_loss(*args, lm, w, groups.grp, cap, groups.n)

    gseen = np.zeros(n_rows)
    active, full, since_full = rows, True, 0
    status, ub, ub_approx, lb = Status.MAX_ITER, None, None, 0.0
    it = 0
    for it in range(1, int(max_iter) + 1):
        gmax = np.zeros(groups.n)
        K.epoch(*args, lm, cap, groups.grp, groups.gptr, groups.members, sqn,
                rng.permutation(active), alpha, asum, u, w, rp.lo, rp.bounded, bool(pairwise),
                gmax, gseen)  # fmt: skip
        asum = np.bincount(groups.grp, weights=alpha, minlength=groups.n)
        lb = rp.quad(u, w) + float(lm @ alpha)
        ub_approx = 0.5 * float(w @ w) + float(cap @ gmax)
        met = within_tol(ub_approx, lb, tol)
        ub = exact_ub() if met and full else None
        gap = (ub if ub is not None else ub_approx) - lb
        stop = monitor.report(
            Progress(
                it,
                monitor.elapsed(),
                gap,
                active=len(active),
                primal=ub,
                dual=lb,
                lower_bound=lb,
                upper_bound=ub,
                approx_upper_bound=ub_approx if full else None,
            )  # fmt: skip
        )
        if ub is not None and within_tol(ub, lb, tol):
            status = Status.CONVERGED
            break
        if stop is not None:
            status = stop
            break
        since_full = 0 if full else since_full + 1
        if shrinking:
            active, full = _next_active(rows, active, alpha, gseen, full, met, since_full)
    if ub is None:
        ub = exact_ub()
    return SolveResult(
        w=rp.to_original(w),
        bias=0.0,
        alpha=alpha,
        n_iter=it,
        status=status,
        gap=ub - lb,
        primal=ub,
        dual=lb,
        history=monitor.history,
        lower_bound=lb,
        upper_bound=ub,
        extra={"approx_upper_bound": ub_approx, "n_groups": groups.n, "u": u},
    )
