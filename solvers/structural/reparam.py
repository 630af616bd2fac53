"""The change of variables of the shared-slack problem for a prior w₀, a per-feature scale r and
the bound w ≥ 0 (Ramanan, section 7): ŵ = (w − w₀) ∘ r, x̂ = x / r, l̂ = l − w₀ᵀx, so that the
solvers only ever see the plain problem, with the bound ŵ ≥ lo = −w₀ ∘ r."""

from __future__ import annotations

import numpy as np

from solvers._core.sparse import dot, sq_norm


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
        """l̂ = l − w₀ᵀx (X a scipy matrix or the door's `CSRArrays`)."""
        if self.w0 is None:
            return margins
        X = X.to_scipy() if hasattr(X, "to_scipy") else X
        return margins - X @ self.w0

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
        q = -0.5 * sq_norm(w)
        if self.bounded:
            q += dot(w - u, self.lo)
        return q


def _feature_vector(v, n_features, name):
    v = np.asarray(v, dtype=np.float64)
    if v.shape != (n_features,):
        raise ValueError(f"{name} must have shape ({n_features},), got {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite")
    return v


def within_tol(ub, lb, tol):
    """The structural solvers' stopping rule: UB − LB ≤ tol · max(1, |UB|)."""
    return ub - lb <= tol * max(1.0, abs(ub))
