"""Probabilities from decision values: Platt scaling, a softmax temperature, isotonic regression.

Platt scaling models P(y = 1 | f) = 1 / (1 + exp(A·f + B)) and fits (A, B) by maximum
likelihood on held-out decision values f_i with the regularized targets t_i = (N₊ + 1)/(N₊ + 2)
for positives and 1/(N₋ + 2) for negatives. We minimize that negative log-likelihood by the
algorithm of Lin, Lin and Weng, "A note on Platt's probabilistic outputs for support vector
machines" (Machine Learning 68, 2007): Newton's method on (A, B) with a small ridge σ added to
the Hessian, a backtracking line search on the sufficient-decrease condition, the log-loss
terms written in the form that cannot overflow, and LIBSVM's stopping rule (both gradient
entries below 1e-5, at most 100 iterations, step below 1e-10 gives up).

For k > 2 classes with one-vs-rest scores, each class gets its own (A_j, B_j) on "class j vs
the rest" and the k probabilities are normalized to sum to 1. A softmax temperature,
p_j ∝ exp(f_j / T) with the one T of least log loss, is the alternative for the joint
formulations (Crammer–Singer, Weston–Watkins), whose scores are compared across classes by
design. Isotonic regression (scikit-learn's `IsotonicRegression`) fits a monotone step map per
class instead of a sigmoid.

A `Calibration` is data: ``method`` and plain-list parameters (`to_dict` / `from_dict`), so a
stored model carries it in JSON.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

METHODS = ("sigmoid", "softmax", "isotonic")


def platt(decisions, positive, *, max_iter: int = 100, eps: float = 1e-5):
    """(A, B) of P(y=1|f) = 1/(1 + exp(A f + B)) fitted to ``decisions`` and the boolean
    ``positive`` labels (Lin, Lin and Weng 2007, Algorithm 1)."""
    f = np.asarray(decisions, dtype=np.float64)
    pos = np.asarray(positive, dtype=bool)
    n_pos = float(np.count_nonzero(pos))
    n_neg = float(pos.size - n_pos)
    t = np.where(pos, (n_pos + 1.0) / (n_pos + 2.0), 1.0 / (n_neg + 2.0))
    A, B = 0.0, float(np.log((n_neg + 1.0) / (n_pos + 1.0)))
    sigma, min_step = 1e-12, 1e-10
    value = _platt_objective(f, t, A, B)
    for _ in range(max_iter):
        p, q = _sigmoid_pair(f * A + B)
        d2 = p * q
        # sums of products, not np.dot: BLAS waits for a free core before a dot product, and
        # with the search's other threads busy a call took about 1 ms instead of 20 µs here
        f_d2 = f * d2
        h11 = sigma + float((f * f_d2).sum())
        h22 = sigma + float(d2.sum())
        h21 = float(f_d2.sum())
        d1 = t - p
        g1, g2 = float((f * d1).sum()), float(d1.sum())
        if abs(g1) < eps and abs(g2) < eps:
            break
        det = h11 * h22 - h21 * h21
        dA = -(h22 * g1 - h21 * g2) / det
        dB = -(-h21 * g1 + h11 * g2) / det
        descent = g1 * dA + g2 * dB
        step = 1.0
        while step >= min_step:
            trial = _platt_objective(f, t, A + step * dA, B + step * dB)
            if trial < value + 1e-4 * step * descent:
                A, B, value = A + step * dA, B + step * dB, trial
                break
            step /= 2.0
        else:
            break  # the line search failed: (A, B) is as good as it gets
    return A, B


def _platt_objective(f, t, A, B) -> float:
    z = f * A + B
    # t·z + log(1 + e^{−z}) written for either sign of z without overflow
    return float(np.sum(np.where(z >= 0, t * z + np.log1p(np.exp(-np.abs(z))),
                                 (t - 1.0) * z + np.log1p(np.exp(-np.abs(z))))))  # fmt: skip


def _sigmoid_pair(z):
    """p = 1/(1 + e^z) and q = 1 − p, computed without overflow."""
    e = np.exp(-np.abs(z))
    p = np.where(z >= 0, e / (1.0 + e), 1.0 / (1.0 + e))
    return p, 1.0 - p


def softmax_temperature(decisions, y_index, *, max_iter: int = 100) -> float:
    """The T > 0 of least log loss of softmax(f / T) by Newton on β = 1/T (the negative
    log-likelihood is convex in β)."""
    f = np.asarray(decisions, dtype=np.float64)
    true = f[np.arange(f.shape[0]), np.asarray(y_index)]
    beta = 1.0
    for _ in range(max_iter):
        p = _softmax(beta * f)
        mean = np.sum(p * f, axis=1)
        grad = float(np.sum(mean - true))
        hess = float(np.sum(np.sum(p * f * f, axis=1) - mean * mean)) + 1e-12
        new = beta - grad / hess
        if new <= 0.0:
            new = beta / 2.0  # stay in β > 0, where the model is a temperature
        if abs(new - beta) <= 1e-10 * max(1.0, beta):
            beta = new
            break
        beta = new
    return 1.0 / beta


def _softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


@dataclass
class Calibration:
    """Fitted map from decision values to class probabilities (columns in class order).

    method "sigmoid": ``params = {"A": [...], "B": [...]}`` (one pair for two classes, on the
    binary score; else one per class, normalized); "softmax": ``{"temperature": T}``;
    "isotonic": ``{"x": [[...]], "y": [[...]]}`` (per output, the breakpoints of the monotone
    piecewise-linear map, clipped outside).
    """

    method: str
    params: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"method": self.method, **self.params}

    @classmethod
    def from_dict(cls, data: dict) -> Calibration:
        data = dict(data)
        method = data.pop("method")
        if method not in METHODS:
            raise ValueError(f"calibration method must be one of {METHODS}, got {method!r}")
        return cls(method, data)

    def probabilities(self, decisions) -> np.ndarray:
        """(n, k) probabilities, rows summing to 1, from (n,) binary or (n, k) scores."""
        f = np.asarray(decisions, dtype=np.float64)
        if self.method == "softmax":
            if f.ndim == 1:  # a binary score, as the pair it was fitted on
                f = np.column_stack([-f / 2.0, f / 2.0])
            return _softmax(f / self.params["temperature"])
        binary = f.ndim == 1
        columns = f[:, None] if binary else f
        if self.method == "sigmoid":
            A, B = np.asarray(self.params["A"]), np.asarray(self.params["B"])
            p, _ = _sigmoid_pair(columns * A + B)
        else:
            p = np.column_stack([
                np.interp(columns[:, j], self.params["x"][j], self.params["y"][j])
                for j in range(columns.shape[1])
            ])  # fmt: skip
        if binary:
            return np.column_stack([1.0 - p[:, 0], p[:, 0]])
        return _normalized(p)


def _normalized(p):
    total = p.sum(axis=1, keepdims=True)
    uniform = total[:, 0] <= 0.0
    p = np.where(total > 0.0, p / np.where(total > 0.0, total, 1.0), 1.0 / p.shape[1])
    p[uniform] = 1.0 / p.shape[1]
    return p


def fit_calibration(decisions, y_index, method: str) -> Calibration:
    """Fit ``method`` on held-out ``decisions`` ((n,) for two classes with y_index in {0, 1},
    else (n, k)) and the true class indices."""
    f = np.asarray(decisions, dtype=np.float64)
    y_index = np.asarray(y_index)
    if method not in METHODS:
        raise ValueError(f"calibration must be one of {METHODS} or None, got {method!r}")
    if method == "softmax":
        if f.ndim == 1:
            f = np.column_stack([-f / 2.0, f / 2.0])
        return Calibration("softmax", {"temperature": softmax_temperature(f, y_index)})
    columns = [(f, y_index == 1)] if f.ndim == 1 else [
        (f[:, j], y_index == j) for j in range(f.shape[1])
    ]  # fmt: skip
    if method == "sigmoid":
        pairs = [platt(col, pos) for col, pos in columns]
        return Calibration("sigmoid", {"A": [a for a, _ in pairs], "B": [b for _, b in pairs]})
    from sklearn.isotonic import IsotonicRegression

    xs, ys = [], []
    for col, pos in columns:
        iso = IsotonicRegression(out_of_bounds="clip", y_min=0.0, y_max=1.0)
        iso.fit(col, pos.astype(np.float64))
        xs.append(iso.X_thresholds_.tolist())
        ys.append(iso.y_thresholds_.tolist())
    return Calibration("isotonic", {"x": xs, "y": ys})
