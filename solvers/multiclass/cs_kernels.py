"""Compiled pass of the sequential dual method for the Crammer–Singer formulation.

Symbols as in `solvers.multiclass.crammer_singer`: alpha (n, k) row-major, W (n_features, k)
feature-major, wb (k,) the bias-feature weights, A_i = ‖x̃_i‖², C_i the per-sample bound,
e_i^m = 1 − δ(y_i, m); ``problem`` is a `solvers.multiclass.problem.MulticlassProblem`. Row i
works on its active classes ``act_cls[i, :act_n[i]]``.
"""

import numpy as np
from numba import njit

from solvers._core.sparse import prefetch, prefetch_row
from solvers.multiclass.kernels import row_scores, sort_descending

_TINY = 1e-12


@njit(cache=True, nogil=True)
def solve_sub_problem(A, B, cap, n, total, D, out):
    """Exact solution of min ½A‖a‖² + Bᵀa s.t. a ≤ cap, 1ᵀa = total over n variables.

    The optimum is a_r = min(cap_r, (β − B_r)/A) with β fixed by the equality; β is found from the
    breakpoints D_r = B_r + A·cap_r sorted in decreasing order (O(n log n)). Writes ``out[:n]``.
    """
    cap_sum = 0.0
    for r in range(n):
        D[r] = B[r] + A * cap[r]
        cap_sum += cap[r]
    sort_descending(D, n, out)
    acc = A * (total - cap_sum) + out[0]
    r = 1
    while r < n and acc < r * out[r]:
        acc += out[r]
        r += 1
    beta = acc / r
    for q in range(n):
        out[q] = min(cap[q], (beta - B[q]) / A)


@njit(cache=True, nogil=True)
def cs_pass(problem, order, alpha, W, wb, act_cls, act_n):
    """One sequential pass over the rows in ``order``; returns (max_i v_i, g evaluations).

    Per row, in four steps: (1) g_i^m over the row's active classes; (2) shrinking: a class at
    its bound whose g_i^m is below the smallest g of the classes that can still grow cannot move
    and is swapped out of the active set (a row left with one active class is optimal for now
    and is not visited again until the driver restores the full sets); (3) the sub-problem,
    solved exactly over the active classes; (4) the update of α_i, W and wb.

    One function on purpose: split into helpers called per row (Numba passes every array as
    several words, or adds reference counting when it inlines them) the pass ran 9% slower.
    """
    data, indices, indptr, _ = problem.X
    y, C, A, bias = problem.y, problem.C, problem.A, problem.bias
    k = W.shape[1]
    g = np.empty(k)
    gk = np.empty(k)
    B = np.empty(k)
    cap = np.empty(k)
    D = np.empty(k)
    new = np.empty(k)
    sel = np.empty(k, dtype=np.int64)
    delta = np.empty(k)
    max_v = 0.0
    work = 0
    n_order = order.shape[0]
    for t in range(n_order):
        if t + 2 < n_order:
            ahead = order[t + 2]
            prefetch_row(data, indices, indptr, ahead)
            prefetch(alpha[ahead], 0)
            prefetch(act_cls[ahead], 0)
        i = order[t]
        # unsigned bounds: no negative-index checks on data[p] and indices[p] in the loops below
        start = np.uint64(indptr[i])
        end = np.uint64(indptr[i + 1])
        yi = y[i]
        Ci = C[i]
        Ai = A[i]
        a = alpha[i]
        cls = act_cls[i]
        nc = act_n[i]
        work += nc
        # (1) g_i^m = w_mᵀx̃_i + e_i^m over the active classes
        if nc == k:
            # every class active: accumulate in class order (contiguous, vectorizes), then gather
            for m in range(k):
                gk[m] = bias * wb[m] + 1.0
            gk[yi] -= 1.0
            for p in range(start, end):
                v = data[p]
                row = W[indices[p]]
                for m in range(k):
                    gk[m] += v * row[m]
            for r in range(nc):
                g[r] = gk[cls[r]]
        elif nc == 2:
            # the common shrunk row: register accumulators instead of g[0], g[1], whose load-store
            # chains through memory would serialise the loop
            m0 = cls[0]
            m1 = cls[1]
            g0 = bias * wb[m0] + (0.0 if m0 == yi else 1.0)
            g1 = bias * wb[m1] + (0.0 if m1 == yi else 1.0)
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                g0 += v * W[j, m0]
                g1 += v * W[j, m1]
            g[0] = g0
            g[1] = g1
        elif nc == 3:
            m0 = cls[0]
            m1 = cls[1]
            m2 = cls[2]
            g0 = bias * wb[m0] + (0.0 if m0 == yi else 1.0)
            g1 = bias * wb[m1] + (0.0 if m1 == yi else 1.0)
            g2 = bias * wb[m2] + (0.0 if m2 == yi else 1.0)
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                g0 += v * W[j, m0]
                g1 += v * W[j, m1]
                g2 += v * W[j, m2]
            g[0] = g0
            g[1] = g1
            g[2] = g2
        else:
            for r in range(nc):
                m = cls[r]
                g[r] = bias * wb[m] + (0.0 if m == yi else 1.0)
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                for r in range(nc):
                    g[r] += v * W[j, cls[r]]
        # (2) shrinking
        g_max = -np.inf
        g_min = np.inf
        for r in range(nc):
            m = cls[r]
            if g[r] > g_max:
                g_max = g[r]
            if a[m] < (Ci if m == yi else 0.0) and g[r] < g_min:
                g_min = g[r]
        r = 0
        while r < nc:
            m = cls[r]
            if a[m] == (Ci if m == yi else 0.0) and g[r] < g_min:
                nc -= 1
                cls[r], cls[nc] = cls[nc], m
                g[r], g[nc] = g[nc], g[r]
            else:
                r += 1
        act_n[i] = nc
        if nc <= 1:
            continue
        v_i = g_max - g_min
        if v_i <= _TINY:
            continue
        if v_i > max_v:
            max_v = v_i
        # (3) the sub-problem over the active classes
        total = 0.0
        for r in range(nc):
            m = cls[r]
            B[r] = g[r] - Ai * a[m]
            cap[r] = Ci if m == yi else 0.0
            total += a[m]
        solve_sub_problem(Ai, B, cap, nc, total, D, new)
        # (4) the update of α_i, wb and W
        nd = 0
        for r in range(nc):
            m = cls[r]
            d = new[r] - a[m]
            if d != 0.0:
                a[m] = new[r]
                sel[nd] = m
                delta[nd] = d
                nd += 1
        for q in range(nd):
            wb[sel[q]] += delta[q] * bias
        if nd == 2:  # the usual step moves two classes; no inner loop to set up per entry
            m0 = sel[0]
            m1 = sel[1]
            d0 = delta[0]
            d1 = delta[1]
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                W[j, m0] += d0 * v
                W[j, m1] += d1 * v
            continue
        for p in range(start, end):
            v = data[p]
            row = W[indices[p]]
            for q in range(nd):
                row[sel[q]] += delta[q] * v
    return max_v, work


@njit(cache=True, nogil=True)
def cs_max_violation(problem, rows, alpha, W, wb):
    """max_i v_i over ``rows`` at the current α, every class counted (a read-only pass)."""
    data, indices, indptr, _ = problem.X
    k = W.shape[1]
    g = np.empty(k)
    worst = 0.0
    for t in range(rows.shape[0]):
        i = rows[t]
        row_scores(
            data, indices, np.uint64(indptr[i]), np.uint64(indptr[i + 1]), W, wb, problem.bias, g
        )
        yi = problem.y[i]
        Ci = problem.C[i]
        a = alpha[i]
        g_max = -np.inf
        g_min = np.inf
        for m in range(k):
            gm = g[m] + (0.0 if m == yi else 1.0)
            if gm > g_max:
                g_max = gm
            if a[m] < (Ci if m == yi else 0.0) and gm < g_min:
                g_min = gm
        if g_max - g_min > worst:
            worst = g_max - g_min
    return worst
