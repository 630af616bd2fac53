"""Compiled epochs of the binary dual coordinate descent (see `solvers.binary.dcd` for the problem).

The per-sample terms are packed in one float64 array ``rec`` of ``width`` entries per sample, so
that a coordinate step touches one small record instead of several arrays. Classification
(hinge, squared hinge: y_i = ±1) needs 3 entries (24 bytes), regularized least squares 4:

    rec[wi]     α_i
    rec[wi + 1] classification: s_i · U_i (hinge, where D_ii = 0) or s_i · D_ii (squared hinge,
                where U_i = +inf), the label's sign carried by a positive number;
                least squares: y_i (its sign s_i and magnitude |y_i|)
    rec[wi + 2] Q̄_ii = ‖x̃_i‖² + D_ii, or −1 until the first step on sample i computes it
    rec[wi + 3] least squares only: D_ii (U_i = +inf)

The lower bound is one scalar for all samples (0, or −inf for the free α of regularized least
squares). The gradient of the dual in coordinate i is G = s_i w̃ᵀx̃_i − |y_i| + D_ii α_i.

The record travels with its layout as a `Record` (values, width, hinge, lower) and X as
`CSRArrays` (the door's view, bias feature not stored). ``C`` is either one value shared by all
samples (shape (1,)) or C_i per sample (shape (n,)); samples with C_i = 0 take no part.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

from solvers._core.sparse import (
    prefetch,
    prefetch_row,
    prefetch_row_ends,
    row_axpy,
    row_dot,
    row_sq_norm,
    sq_norm,
)

HINGE, SQUARED_HINGE, SQUARED_ERROR = 0, 1, 2


class Record(NamedTuple):
    """The packed per-sample record and its layout (module docstring)."""

    values: np.ndarray  # (width · n_samples,) float64
    width: int  # 3 for classification, 4 for least squares
    hinge: bool  # U_i = C_i, D_ii = 0 (else U_i = inf, D_ii = 1/(2 C_i))
    lower: float  # 0, or -inf for the free α of least squares


@njit(cache=True, nogil=True)
def C_of(C, i):
    """C_i from a shared (shape (1,)) or per-sample C."""
    return C[i] if C.shape[0] > 1 else C[0]


@njit(cache=True, nogil=True, inline="always")
def terms(rec, r, width, hinge):
    """(s_i, |y_i|, U_i, D_ii) of the record at offset ``r``."""
    v = rec[r + 1]
    sign = 1.0 if v >= 0.0 else -1.0
    if width == 3:
        if hinge:
            return sign, 1.0, abs(v), 0.0
        return sign, 1.0, np.inf, abs(v)
    return sign, abs(v), np.inf, rec[r + 3]


@njit(cache=True, nogil=True)
def fill_record(rec, y, C, hinge, width):
    """Fill the record ``rec`` (width · n entries) at α = 0, without temporaries.

    Q̄_ii is left pending (−1): the first coordinate step on sample i computes it from the row it
    has just read for the gradient, which spares a pass over the data here.
    """
    for i in range(y.shape[0]):
        c = C_of(C, i)
        diag = 0.5 / c if c > 0.0 else 0.0
        r = width * i
        rec[r] = 0.0
        rec[r + 2] = -1.0
        if width == 3:
            sign = 1.0 if y[i] >= 0.0 else -1.0
            rec[r + 1] = sign * (c if hinge else diag)
        else:
            rec[r + 1] = y[i]
            rec[r + 3] = diag


@njit(cache=True, nogil=True)
def record_weights(X, bias, record):
    """w̃ = Σ_i s_i α_i x̃_i from the α in the record (the start of a warm-started solve), without
    an n-length temporary of the signed α."""
    w = np.zeros(X[3] + 1)
    add_record_rows(X, bias, record, 0, X[2].shape[0] - 1, w)
    return w


@njit(cache=True, nogil=True)
def add_record_rows(X, bias, record, first, stop, out):
    """out += Σ_{first ≤ i < stop} s_i α_i x̃_i from the record: one thread's share of
    `record_weights` (the parallel solver's rebuilds of w̃ split the rows so)."""
    data, indices, indptr, n_features = X
    rec, width = record.values, record.width
    for i in range(first, stop):
        r = width * i
        if rec[r] != 0.0:
            sign = 1.0 if rec[r + 1] >= 0.0 else -1.0
            row_axpy(sign * rec[r], data, indices, indptr[i], indptr[i + 1], out, n_features, bias)


@njit(cache=True, nogil=True)
def gather_alpha(rec, width):
    """Move every α_i (``rec[width · i]``) to ``rec[i]``; ascending order never overwrites an
    unread α."""
    for i in range(rec.shape[0] // width):
        rec[i] = rec[width * i]


@njit(cache=True, nogil=True)
def shuffle_prefix(index, size, seed):
    """Shuffle ``index[:size]`` in place (Fisher–Yates) from a 64-bit seed.

    The driver draws ``seed`` from the solve's own generator; the stream here is splitmix64,
    and a bounded draw uses the high half of a 64-bit product (Lemire's method, tiny bias).
    """
    state = np.uint64(seed)
    for j in range(size - 1, 0, -1):
        state += np.uint64(0x9E3779B97F4A7C15)
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        k = ((z >> np.uint64(32)) * np.uint64(j + 1)) >> np.uint64(32)
        index[j], index[k] = index[k], index[j]


@njit(cache=True, nogil=True)
def dcd_epoch(X, bias, record, w, index, active_size, shrink_bounds, long_rows):
    """One pass of coordinate steps over ``index[:active_size]`` (Algorithm 3's inner loop).

    A coordinate at a bound whose gradient points outward beyond the previous pass's extreme
    projected gradient (``shrink_bounds`` = (M_bar, m_bar); ±inf disables shrinking) is swapped
    behind the active part of ``index``. Updates the record (α), ``w`` and ``index`` in place.

    The row and record two positions ahead in the order are prefetched: their loads are the
    pass's bottleneck once the data outgrow a core's cache. ``long_rows`` (rows of many cache
    lines) prefetches whole rows instead of their first and last lines. The entries of w a row
    reads are not prefetched: even when w is far larger than a core's cache, the hints cost more
    than they hide (one per non-zero, against loads the core already issues out of order).

    Returns (active_size, M, m): the new active size and the largest and smallest projected
    gradient seen (−inf / +inf when no coordinate stayed active).
    """
    data, indices, indptr, n_features = X
    rec, width, hinge, lower = record
    M_bar, m_bar = shrink_bounds
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
        sign, yabs, Ui, Dii = terms(rec, r, width, hinge)
        G = sign * row_dot(data, indices, start, end, w, n_features, bias) - yabs + Dii * ai
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
            if qd < 0.0:  # first step on this sample: the row is still in the cache
                qd = row_sq_norm(data, start, end, bias * bias) + Dii
                rec[r + 2] = qd
            if qd > 0.0:
                new = min(max(ai - G / qd, lower), Ui)
            else:
                # x̃_i = 0 and D_ii = 0 (hinge without bias): the dual is linear in α_i, so the
                # minimum sits at the bound the gradient points to (the paper's 1/Q_ii = inf).
                new = Ui if G < 0.0 else lower
            rec[r] = new
            row_axpy((new - ai) * sign, data, indices, start, end, w, n_features, bias)
        s += 1
    return active_size, M, m


@njit(cache=True, nogil=True, inline="always")
def projected(G, a, lower, upper):
    """The gradient G of a coordinate at a, projected on its box [lower, upper]."""
    if a <= lower:
        return min(G, 0.0)
    if a >= upper:
        return max(G, 0.0)
    return G


@njit(cache=True, nogil=True)
def projected_gradient_range(X, bias, record, w, C):
    """Largest and smallest projected gradient over the samples with C_i > 0 at the current α."""
    data, indices, indptr, n_features = X
    rec, width, hinge, lower = record
    M = -np.inf
    m = np.inf
    for i in range(indptr.shape[0] - 1):
        if C_of(C, i) <= 0.0:
            continue
        r = width * i
        ai = rec[r]
        sign, yabs, Ui, Dii = terms(rec, r, width, hinge)
        wx = row_dot(data, indices, indptr[i], indptr[i + 1], w, n_features, bias)
        G = sign * wx - yabs + Dii * ai
        PG = projected(G, ai, lower, Ui)
        M = max(M, PG)
        m = min(m, PG)
    return M, m


@njit(cache=True, nogil=True)
def objectives(X, bias, record, C, w, loss):
    """Primal P(w̃) = ½‖w̃‖² + Σ C_i ξ_i and dual f(α) = ½‖w̃‖² + ½ Σ D_ii α_i² − Σ |y_i| α_i.

    Only the samples with C_i > 0 count. ξ_i is max(0, 1 − y_i w̃ᵀx̃_i) for the hinge loss, its
    square for the squared hinge and (y_i − w̃ᵀx̃_i)² for squared error.
    """
    loss_sum, quad, lin = objective_sums(X, bias, record, C, w, loss, 0, X[2].shape[0] - 1)
    return objectives_from_sums(w, loss_sum, quad, lin)


@njit(cache=True, nogil=True)
def objectives_from_sums(w, loss_sum, quad, lin):
    """(primal, dual) from the sums of `objective_sums` over all samples."""
    half_norm = 0.5 * sq_norm(w)
    return half_norm + loss_sum, half_norm + 0.5 * quad - lin


@njit(cache=True, nogil=True)
def objective_sums(X, bias, record, C, w, loss, first, stop):
    """(Σ C_i ξ_i, Σ D_ii α_i², Σ |y_i| α_i) over the samples first ≤ i < stop with C_i > 0:
    the per-sample part of `objectives`, which threads can split by ranges of rows."""
    data, indices, indptr, n_features = X
    rec, width, hinge = record.values, record.width, record.hinge
    loss_sum = 0.0
    quad = 0.0
    lin = 0.0
    # Signed sample numbers: an unsigned loop here made this pass twice as slow as a pass of
    # products x̃_i·w̃ alone (2M rows of 40 non-zeros).
    for i in range(first, stop):
        c = C_of(C, i)
        if c <= 0.0:
            continue
        r = width * i
        a = rec[r]
        sign, yabs, _, Dii = terms(rec, r, width, hinge)
        wx = row_dot(data, indices, indptr[i], indptr[i + 1], w, n_features, bias)
        loss_sum += c * slack(loss, sign, yabs, wx)
        quad += Dii * a * a
        lin += yabs * a
    return loss_sum, quad, lin


@njit(cache=True, nogil=True, inline="always")
def slack(loss, sign, yabs, wx):
    """ξ_i of a sample with label s_i|y_i| and product x̃_i·w̃ = wx (`objectives`)."""
    if loss == SQUARED_ERROR:
        e = sign * yabs - wx
        return e * e
    e = max(0.0, 1.0 - sign * wx)
    return e if loss == HINGE else e * e


@njit(cache=True, nogil=True)
def ray_terms(record, C):
    """The terms of f along the ray of α (`solvers._core.warm_start`) over the samples with
    C_i > 0: (Σ |y_i| α_i, Σ D_ii α_i², the largest r with rα_i ≤ U_i for every i)."""
    rec, width = record.values, record.width
    quad = 0.0
    lin = 0.0
    r_max = np.inf
    for i in range(rec.shape[0] // width):
        if C_of(C, i) <= 0.0:
            continue
        r = width * i
        a = rec[r]
        _, yabs, upper, Dii = terms(rec, r, width, record.hinge)
        quad += Dii * a * a
        lin += yabs * a
        if a > 0.0 and upper < np.inf:
            r_max = min(r_max, upper / a)
    return lin, quad, r_max


@njit(cache=True, nogil=True)
def dual_objective(record, C, w):
    """The dual f(α) of `objectives` alone: ½‖w̃‖² + ½ Σ D_ii α_i² − Σ |y_i| α_i over the
    samples with C_i > 0, from the record and w̃ only (no pass over X)."""
    lin, quad, _ = ray_terms(record, C)
    return 0.5 * sq_norm(w) + 0.5 * quad - lin
