"""Compiled pass of the sequential dual method for the Weston–Watkins formulation.

Symbols as in `solvers.multiclass.weston_watkins`: alpha (n, k) row-major with
α_i^{y_i} = −Σ_{m≠y_i} α_i^m, W (n_features, k) feature-major with w_m = −Σ_i α_i^m x̃_i, wb (k,)
the bias-feature weights, A_i = ‖x̃_i‖², C_i the per-sample bound; ``problem`` is a
`solvers.multiclass.problem.MulticlassProblem`.
"""

import numpy as np
from numba import njit

from solvers._core.sparse import prefetch_row
from solvers.multiclass.kernels import argsort_ascending, row_scores

_TINY = 1e-12


@njit(cache=True, nogil=True)
def solve_sub_problem(A, g, a, C, n, knots, out):
    """Exact solution of sub-problem (21) over n variables; writes the new values to ``out[:n]``.

    min ½A‖δ‖² + ½A(1ᵀδ)² + gᵀδ over 0 ≤ a + δ ≤ C. For a fixed shared sum t = 1ᵀδ the problem
    separates: a_r + δ_r = clip(c_r − t, 0, C) with c_r = a_r − g_r/A. The consistent t is the root
    of φ(t) = Σ_r clip(c_r − t, 0, C) − Σ_r a_r − t, strictly decreasing and piecewise linear with
    knots at c_r − C (variable r leaves C) and c_r (it reaches 0); sorting the knots makes the
    search exact and O(n log n).
    """
    a_sum = 0.0
    for r in range(n):
        c = a[r] - g[r] / A
        out[r] = c
        knots[2 * r] = c - C
        knots[2 * r + 1] = c
        a_sum += a[r]
    rank = argsort_ascending(knots, 2 * n)
    # Below the first knot every variable sits at C; walk the knots upwards keeping φ's linear form
    # φ(t) = free_c_sum − n_free·t + C·n_upper − a_sum − t on the current segment.
    n_upper = n
    n_free = 0
    free_c_sum = 0.0
    t = -a_sum
    for q in range(2 * n):
        knot = rank[q]
        s = knots[knot]
        phi = free_c_sum - n_free * s + C * n_upper - a_sum - s
        if phi <= 0.0:
            t = (free_c_sum + C * n_upper - a_sum) / (n_free + 1)
            break
        r = knot // 2
        if knot % 2 == 0:
            n_upper -= 1
            n_free += 1
            free_c_sum += out[r]
        else:
            n_free -= 1
            free_c_sum -= out[r]
    for r in range(n):
        out[r] = min(max(out[r] - t, 0.0), C)


@njit(cache=True, nogil=True)
def ww_pass(problem, order, alpha, W, wb, shrunk, keep):
    """One sequential pass over the rows in ``order``; returns (max v_i^m, g evaluations).

    Full pass (``shrunk`` False): g over every m ≠ y_i, sub-problem over the variables that violate
    optimality or are free; ``keep[i]`` records whether row i has a free variable. Shrunk pass: g
    and the sub-problem over the free variables (0 < α_i^m < C_i) only.

    One function on purpose, as `cs_pass`: split into helpers called per row it ran 5% slower.
    """
    data, indices, indptr, _ = problem.X
    y, C, A, bias = problem.y, problem.C, problem.A, problem.bias
    k = W.shape[1]
    cls = np.empty(k, dtype=np.uint32)  # unsigned: no wraparound checks on W[j, cls[r]]
    s = np.empty(k)
    g = np.empty(k)
    sel = np.empty(k, dtype=np.int64)
    g_sel = np.empty(k)
    a_sel = np.empty(k)
    knots = np.empty(2 * k)
    new = np.empty(k)
    delta = np.empty(k)
    max_v = 0.0
    work = 0
    n_order = order.shape[0]
    for t in range(n_order):
        if t + 2 < n_order:
            prefetch_row(data, indices, indptr, order[t + 2])
        i = order[t]
        # unsigned bounds: no negative-index checks on data[p] and indices[p] below
        start = np.uint64(indptr[i])
        end = np.uint64(indptr[i + 1])
        yi = y[i]
        Ci = C[i]
        Ai = A[i]
        a = alpha[i]
        nc = 0
        for m in range(k):
            if m != yi and (not shrunk or (a[m] > 0.0 and a[m] < Ci)):
                cls[nc] = m
                nc += 1
        if nc == 0:
            if not shrunk:
                keep[i] = False
            continue
        work += nc
        cls[nc] = yi
        for r in range(nc + 1):
            s[r] = bias * wb[cls[r]]
        for p in range(start, end):
            v = data[p]
            row = W[indices[p]]
            for r in range(nc + 1):
                s[r] += v * row[cls[r]]
        ns = 0
        for r in range(nc):
            m = cls[r]
            g[r] = s[nc] - s[r] - 1.0
            v_rm = _violation(g[r], a[m], Ci)
            if v_rm > max_v:
                max_v = v_rm
            if v_rm > _TINY or (a[m] > 0.0 and a[m] < Ci):
                sel[ns] = m
                g_sel[ns] = g[r]
                a_sel[ns] = a[m]
                ns += 1
        if ns > 0:
            solve_sub_problem(Ai, g_sel, a_sel, Ci, ns, knots, new)
            nd = 0
            d_sum = 0.0
            for q in range(ns):
                m = sel[q]
                d = new[q] - a[m]
                if d != 0.0:
                    a[m] = new[q]
                    sel[nd] = m
                    delta[nd] = -d
                    d_sum += d
                    nd += 1
            if nd > 0:
                a[yi] -= d_sum
                sel[nd] = yi
                delta[nd] = d_sum
                nd += 1
                for q in range(nd):
                    wb[sel[q]] += delta[q] * bias
                for p in range(start, end):
                    v = data[p]
                    row = W[indices[p]]
                    for q in range(nd):
                        row[sel[q]] += delta[q] * v
        if not shrunk:
            keep[i] = _has_free(a, yi, Ci, k)
    return max_v, work


@njit(cache=True, nogil=True)
def ww_max_violation(problem, rows, alpha, W, wb):
    """max v_i^m over ``rows`` and every m ≠ y_i at the current α (a read-only pass)."""
    data, indices, indptr, _ = problem.X
    s = np.empty(W.shape[1])
    worst = 0.0
    for t in range(rows.shape[0]):
        i = rows[t]
        row_scores(
            data, indices, np.uint64(indptr[i]), np.uint64(indptr[i + 1]), W, wb, problem.bias, s
        )
        yi = problem.y[i]
        for m in range(s.shape[0]):
            if m != yi:
                v = _violation(s[yi] - s[m] - 1.0, alpha[i, m], problem.C[i])
                if v > worst:
                    worst = v
    return worst


@njit(cache=True, nogil=True)
def _violation(g, a, C):
    """v_i^m of (18): |g| inside the box, max(0, −g) at 0, max(0, g) at C."""
    if a <= 0.0:
        return max(0.0, -g)
    if a >= C:
        return max(0.0, g)
    return abs(g)


@njit(cache=True, nogil=True)
def _has_free(a, yi, Ci, k):
    for m in range(k):
        if m != yi and a[m] > 0.0 and a[m] < Ci:
            return True
    return False
