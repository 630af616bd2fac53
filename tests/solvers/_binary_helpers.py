"""Independent checks of a binary dual solution, computed with numpy/scipy only."""

from functools import cache

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from tests.conftest import shared_file

SETS = {
    "heart_scale": ("heart_scale", "heart_scale"),
    "breast-cancer": ("breast-cancer", "breast-cancer_scale"),
    "mushrooms": ("mushrooms", "mushrooms"),
    "sofia-demo": ("sofia-demo", "demo.train"),
    "a9a": ("a9a", "a9a.bz2"),
    "w8a": ("w8a", "w8a.bz2"),
    "reuters-money-fx": ("reuters-money-fx", "reuters.trn.bz2"),
}


@cache
def _load(name):
    X, y = load_svmlight_file(str(shared_file(*SETS[name])))
    X = X.tocsr()
    return X, np.where(y == y.max(), 1.0, -1.0)


def load(name):
    """A shared set as (CSR, y in {-1, +1}) (larger label = +1); skips when absent."""
    X, y = _load(name)
    return X.copy(), y.copy()


def synthetic(n=300, d=40, density=0.2, seed=0, zero_rows=0):
    """A small noisy sparse binary problem, optionally with some all-zero rows."""
    rng = np.random.default_rng(seed)
    X = sp.random(n, d, density=density, format="csr", random_state=seed)
    X.data = rng.standard_normal(X.nnz)
    if zero_rows:
        X = X.tolil()
        X[:zero_rows] = 0
        X = X.tocsr()
        X.eliminate_zeros()
    w = rng.standard_normal(d)
    y = np.where(X @ w + 0.5 * rng.standard_normal(n) > 0, 1.0, -1.0)
    return X, y


def augmented(X, bias):
    """X̃ = [X, bias] as an explicit matrix (the solver never builds it)."""
    if bias == 0:
        return sp.csr_matrix(X, dtype=np.float64)
    col = sp.csr_matrix(np.full((X.shape[0], 1), float(bias)))
    return sp.hstack([sp.csr_matrix(X, dtype=np.float64), col], format="csr")


def bounds(loss, C):
    """(lower, upper, D) of the dual for a loss and per-sample C."""
    C = np.asarray(C, dtype=np.float64)
    if loss == "hinge":
        return 0.0, C, np.zeros_like(C)
    lower = -np.inf if loss == "squared_error" else 0.0
    D = np.where(C > 0, 0.5 / np.where(C > 0, C, 1.0), 0.0)
    return lower, np.full_like(C, np.inf), D


def w_tilde_of(result, bias):
    """[w, w_bias] of a result (w alone when there is no bias feature)."""
    return np.append(result.w, result.bias / bias) if bias else np.asarray(result.w)


def primal(X, y, w_tilde, C, loss, bias):
    margin = augmented(X, bias) @ w_tilde
    if loss == "squared_error":
        xi = (y - margin) ** 2
    else:
        slack = np.maximum(0.0, 1.0 - y * margin)
        xi = slack if loss == "hinge" else slack**2
    return 0.5 * w_tilde @ w_tilde + float(np.sum(C * xi))


def dual(alpha, y, w_tilde, C, loss):
    _, _, D = bounds(loss, C)
    return 0.5 * w_tilde @ w_tilde + 0.5 * np.sum(D * alpha**2) - np.sum(np.abs(y) * alpha)


def certify(X, y, result, C, loss, bias):
    """(relative duality gap, max |projected gradient|, ‖w̃ − Σ s α x̃‖∞) from scratch.

    Also asserts α is within its bounds.
    """
    C = np.broadcast_to(np.asarray(C, dtype=np.float64), y.shape).copy()
    alpha = result.alpha
    Xt = augmented(X, bias)
    sign = np.where(y >= 0, 1.0, -1.0)
    w_tilde = Xt.T @ (sign * alpha)
    w_reported = np.append(result.w, result.bias / bias) if bias else result.w
    lower, upper, D = bounds(loss, C)
    assert np.all(alpha >= lower - 1e-12) and np.all(alpha <= upper + 1e-12)
    p = primal(X, y, w_tilde, C, loss, bias)
    f = dual(alpha, y, w_tilde, C, loss)
    G = sign * (Xt @ w_tilde) - np.abs(y) + D * alpha
    PG = np.where(alpha <= lower, np.minimum(G, 0), np.where(alpha >= upper, np.maximum(G, 0), G))
    PG = PG[C > 0]
    return (p + f) / p, float(np.abs(PG).max()), float(np.abs(w_tilde - w_reported).max())
