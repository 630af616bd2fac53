"""Compiled pieces of the parallel binary dual coordinate descent (`solvers.binary.parallel`).

`block_epoch` is one thread's pass over its block of samples: the coordinate steps of
`solvers.binary.kernels.dcd_epoch` on the local model of CoCoA+ — the gradient reads the thread's
own vector u = w̃ + σ′Δw̃_b (Δw̃_b its block's change this round) and the curvature is
σ′‖x̃_i‖² + D_ii — and it saves each α_i it changes so that a rejected round can be undone. `merge`
folds the threads' vectors back into w̃.
"""

import numpy as np
from numba import njit

from solvers._core.atomic import atomic_add
from solvers._core.sparse import (
    prefetch,
    prefetch_row,
    prefetch_row_ends,
    row_dot,
    row_sq_norm,
)
from solvers.binary.kernels import C_of, projected, slack, terms


@njit(cache=True, nogil=True)
def block_epoch(X, bias, record, u, index, active_size, shrink_bounds, sigma, saved, first,
                long_rows):  # fmt: skip
    """One local pass over ``index[:active_size]`` (one block's samples), updating α in the
    record, ``u`` and ``index`` (shrinking) in place; ``saved[i - first]`` gets α_i before the
    pass for every sample visited, unless ``saved`` is empty (the shared rounds never undo a
    pass, and the store would cost a cache line per step). ``long_rows`` as in `dcd_epoch`.
    Returns (active_size, M, m) as `dcd_epoch` does."""
    data, indices, indptr, n_features = X
    rec, width, hinge, lower = record
    M_bar, m_bar = shrink_bounds
    keep = saved.shape[0] > 0
    M = -np.inf
    m = np.inf
    s = 0
    while s < active_size:
        if s + 2 < active_size:
            ahead = index[s + 2]
            if long_rows:
                prefetch_row(data, indices, indptr, ahead)
            else:
                prefetch_row_ends(data, indices, indptr, ahead)
            prefetch(rec, width * ahead)
        i = index[s]
        r = width * i
        start = indptr[i]
        end = indptr[i + 1]
        ai = rec[r]
        if keep:
            saved[i - first] = ai
        sign, yabs, Ui, Dii = terms(rec, r, width, hinge)
        G = sign * row_dot(data, indices, start, end, u, n_features, bias) - yabs + Dii * ai
        PG = 0.0
        if ai <= lower:
            if G > M_bar:
                active_size -= 1
                index[s], index[active_size] = index[active_size], index[s]
                continue
            if G < 0.0:
                PG = G
        elif ai >= Ui:
            if G < m_bar:
                active_size -= 1
                index[s], index[active_size] = index[active_size], index[s]
                continue
            if G > 0.0:
                PG = G
        else:
            PG = G
        if PG > M:
            M = PG
        if PG < m:
            m = PG
        if abs(PG) > 1e-12:
            qd = rec[r + 2]
            if qd < 0.0:
                qd = row_sq_norm(data, start, end, bias * bias) + Dii
                rec[r + 2] = qd
            local = sigma * (qd - Dii) + Dii
            if local > 0.0:
                new = min(max(ai - G / local, lower), Ui)
            else:
                new = Ui if G < 0.0 else lower
            rec[r] = new
            coef = (new - ai) * sign * sigma
            shared_axpy(coef, data, indices, start, end, u, n_features, bias)
        s += 1
    return active_size, M, m


@njit(cache=True, nogil=True)
def shared_axpy(coef, data, indices, start, end, w, n_features, bias):
    """w += coef · x̃_i where other threads update w too. The bias entry, which every row updates
    (two threads would often lose one of two additions there), is added atomically, and not at
    all when the bias is 0 (a write of nothing that would still bounce its cache line between
    the cores); a rare lost addition elsewhere is repaired by the rebuild of w̃ from α."""
    for k in range(np.uint64(start), np.uint64(end)):
        w[indices[k]] += coef * data[k]
    if bias != 0.0:
        atomic_add(w, n_features, coef * bias)


@njit(cache=True, nogil=True)
def gather_share(index, pieces, b, n_shares, out):
    """out ← share b of n_shares of every piece index[pieces[p] : pieces[p + 1]], in turn (the
    shares of a piece of size n are its [⌊b·n/K⌋, ⌊(b + 1)·n/K⌋) parts)."""
    at = 0
    for p in range(pieces.shape[0] - 1):
        first = pieces[p]
        size = pieces[p + 1] - first
        for k in range(first + (b * size) // n_shares, first + ((b + 1) * size) // n_shares):
            out[at] = index[k]
            at += 1


@njit(cache=True, nogil=True)
def restore_alpha(rec, width, index, active_size, saved, first):
    """Undo a block's pass: α_i ← saved[i − first] for the samples it visited."""
    for s in range(active_size):
        i = index[s]
        rec[width * i] = saved[i - first]


@njit(cache=True, nogil=True)
def merge(w, U, sigma, total):
    """total = Σ_b Δw̃_b with Δw̃_b = (U[b] − w̃)/σ′; returns (‖total‖², Σ_b ‖Δw̃_b‖²)."""
    together = 0.0
    apart = 0.0
    for j in range(w.shape[0]):
        acc = 0.0
        for b in range(U.shape[0]):
            delta = (U[b, j] - w[j]) / sigma
            acc += delta
            apart += delta * delta
        total[j] = acc
        together += acc * acc
    return together, apart


@njit(cache=True, nogil=True)
def add_into(w, total):
    for j in range(w.shape[0]):
        w[j] += total[j]


@njit(cache=True, nogil=True)
def block_check(X, bias, record, C, w, loss, index):
    """Over the samples in ``index`` at w̃: the largest and smallest projected gradient, and the
    sums of `solvers.binary.kernels.objective_sums` (Σ C_i ξ_i, Σ D_ii α_i², Σ |y_i| α_i), from
    one product x̃_i·w̃ per sample: the final check and the objectives in one read of the rows."""
    data, indices, indptr, n_features = X
    rec, width, hinge, lower = record
    M = -np.inf
    m = np.inf
    loss_sum = 0.0
    quad = 0.0
    lin = 0.0
    for s in range(index.shape[0]):
        i = index[s]
        r = width * i
        ai = rec[r]
        sign, yabs, Ui, Dii = terms(rec, r, width, hinge)
        wx = row_dot(data, indices, indptr[i], indptr[i + 1], w, n_features, bias)
        G = sign * wx + Dii * ai - yabs
        PG = projected(G, ai, lower, Ui)
        M = max(M, PG)
        m = min(m, PG)
        loss_sum += C_of(C, i) * slack(loss, sign, yabs, wx)
        quad += Dii * ai * ai
        lin += yabs * ai
    return M, m, loss_sum, quad, lin
