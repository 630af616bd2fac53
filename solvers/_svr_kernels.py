"""Compiled epoch of the dual coordinate descent SVR (see `solvers.svr`).

w has n_features + 1 entries: the last one is the weight of the implicit bias feature (value
`bias`, 0 when there is none), so X is never copied to append a column.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def row_sqnorms(data, ind, ptr, bias):
    n = ptr.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        acc = bias * bias
        for p in range(ptr[i], ptr[i + 1]):
            acc += data[p] * data[p]
        out[i] = acc
    return out


@njit(cache=True, nogil=True)
def decision(data, ind, ptr, bias, w):
    """X w (+ bias · w_bias) for every row."""
    n = ptr.shape[0] - 1
    nf = w.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        acc = bias * w[nf]
        for p in range(ptr[i], ptr[i + 1]):
            acc += data[p] * w[ind[p]]
        out[i] = acc
    return out


@njit(cache=True, nogil=True)
def epoch(data, ind, ptr, y, bias, lam, upper, eps, qd, beta, w, index, active, gmax_old, shrink):
    """One pass over index[:active]; shrinks bound variables LIBLINEAR's way.

    Returns (new active size, largest violation, sum of violations).
    """
    nf = w.shape[0] - 1
    gmax_new = 0.0
    gnorm1 = 0.0
    s = 0
    while s < active:
        i = index[s]
        wx = bias * w[nf]
        for p in range(ptr[i], ptr[i + 1]):
            wx += data[p] * w[ind[p]]
        b = beta[i]
        u = upper[i]
        g = wx - y[i] + lam[i] * b
        h = qd[i] + lam[i]
        gp = g + eps
        gn = g - eps
        viol = 0.0
        shrunk = False
        if b == 0.0:
            if gp < 0.0:
                viol = -gp
            elif gn > 0.0:
                viol = gn
            elif gp > gmax_old and gn < -gmax_old:
                shrunk = True
        elif b >= u:
            if gp > 0.0:
                viol = gp
            elif gp < -gmax_old:
                shrunk = True
        elif b <= -u:
            if gn < 0.0:
                viol = -gn
            elif gn > gmax_old:
                shrunk = True
        elif b > 0.0:
            viol = abs(gp)
        else:
            viol = abs(gn)
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
