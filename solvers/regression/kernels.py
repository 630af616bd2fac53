"""Compiled pass of the dual coordinate descent SVR (see `solvers.regression.svr`).

w has n_features + 1 entries: the last one is the weight of the implicit bias feature (value
`bias`, 0 when there is none), so X is never copied to append a column. X is the door's
`CSRArrays`; the per-sample terms travel together as `Terms`.
"""

from typing import NamedTuple

import numpy as np
from numba import njit


class Terms(NamedTuple):
    """The per-sample constants of the dual: targets, Λ_ii, bounds U_i, ‖x̃_i‖², and ε."""

    y: np.ndarray
    lam: np.ndarray
    upper: np.ndarray
    sq_norm: np.ndarray
    epsilon: float


@njit(cache=True, nogil=True, inline="always")
def _violation(b, u, gp, gn, gmax_old):
    """(violation of β_i, whether it may be shrunk) from the gradients g ± ε of the coordinate."""
    if b == 0.0:
        if gp < 0.0:
            return -gp, False
        if gn > 0.0:
            return gn, False
        return 0.0, gp > gmax_old and gn < -gmax_old
    if b >= u:
        if gp > 0.0:
            return gp, False
        return 0.0, gp < -gmax_old
    if b <= -u:
        if gn < 0.0:
            return -gn, False
        return 0.0, gn > gmax_old
    if b > 0.0:
        return abs(gp), False
    return abs(gn), False


@njit(cache=True, nogil=True, inline="always")
def _gradient(X, bias, terms, w, beta, i):
    """g = w̃ᵀx̃_i − y_i + Λ_ii β_i."""
    data, ind, ptr, nf = X
    wx = bias * w[nf]
    for p in range(ptr[i], ptr[i + 1]):
        wx += data[p] * w[ind[p]]
    return wx - terms.y[i] + terms.lam[i] * beta[i]


@njit(cache=True, nogil=True)
def epoch(X, bias, terms, beta, w, index, active, gmax_old, shrink):
    """One pass over index[:active]; shrinks bound variables LIBLINEAR's way.

    Returns (new active size, largest violation, sum of violations).
    """
    data, ind, ptr, nf = X
    eps = terms.epsilon
    gmax_new = 0.0
    gnorm1 = 0.0
    s = 0
    while s < active:
        i = index[s]
        b = beta[i]
        u = terms.upper[i]
        g = _gradient(X, bias, terms, w, beta, i)
        h = terms.sq_norm[i] + terms.lam[i]
        gp = g + eps
        gn = g - eps
        viol, shrunk = _violation(b, u, gp, gn, gmax_old)
        if shrunk and shrink:
            active -= 1
            index[s] = index[active]
            index[active] = i
            continue
        if viol > gmax_new:
            gmax_new = viol
        gnorm1 += viol
        s += 1
        if h <= 0.0:
            # x_i = 0 and L1 loss: the objective is linear in beta_i; go to the better bound.
            if gp < 0.0:
                d = u - b
            elif gn > 0.0:
                d = -u - b
            else:
                d = -b
        elif gp < h * b:
            d = -gp / h
        elif gn > h * b:
            d = -gn / h
        else:
            d = -b
        if abs(d) < 1e-12:
            continue
        nb = min(max(b + d, -u), u)
        d = nb - b
        beta[i] = nb
        if d != 0.0:
            for p in range(ptr[i], ptr[i + 1]):
                w[ind[p]] += d * data[p]
            w[nf] += d * bias
    return active, gmax_new, gnorm1


@njit(cache=True, nogil=True)
def violations(X, bias, terms, beta, w, index):
    """(largest, sum of) the violations of the coordinates in ``index`` at the current β, read
    only: the measure a full pass starts from."""
    largest = 0.0
    total = 0.0
    for s in range(index.shape[0]):
        i = index[s]
        g = _gradient(X, bias, terms, w, beta, i)
        viol, _ = _violation(beta[i], terms.upper[i], g + terms.epsilon, g - terms.epsilon, np.inf)
        largest = max(largest, viol)
        total += viol
    return largest, total
