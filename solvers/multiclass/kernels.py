"""Compiled helpers shared by the multi-class solvers.

Weights are stored feature-major: ``W`` has shape (n_features, n_classes), so the class loop for
one non-zero x_ij reads the contiguous row ``W[j]``. The implicit bias feature of value ``bias``
has its own weights ``wb`` of shape (n_classes,). X is the door's `CSRArrays` (unsigned
indices), ``problem`` a `solvers.multiclass.problem.MulticlassProblem`.
"""

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def row_scores(data, indices, start, end, W, wb, bias, out):
    """x̃_iᵀW for the row [start, end) (unsigned bounds), bias included, into out (n_classes,)."""
    k = W.shape[1]
    for m in range(k):
        out[m] = bias * wb[m]
    for p in range(start, end):
        v = data[p]
        row = W[indices[p]]
        for m in range(k):
            out[m] += v * row[m]


@njit(cache=True, nogil=True)
def margin_loss(problem, W, wb, summed):
    """Σ_i C_i ℓ_i over the margin violations 1 + w_mᵀx̃_i − w_{y_i}ᵀx̃_i (m ≠ y_i), row by row
    with O(k) scratch: ℓ_i is their largest positive part (Crammer–Singer) or, with ``summed``,
    the sum of their positive parts (Weston–Watkins). Rows with C_i = 0 are skipped."""
    data, indices, indptr, _ = problem.X
    y, C, bias = problem.y, problem.C, problem.bias
    s = np.empty(W.shape[1])
    total = 0.0
    for i in range(indptr.shape[0] - 1):
        if C[i] == 0.0:
            continue
        row_scores(data, indices, np.uint64(indptr[i]), np.uint64(indptr[i + 1]), W, wb, bias, s)
        yi = y[i]
        row_loss = 0.0
        for m in range(s.shape[0]):
            if m != yi:
                violation = max(0.0, 1.0 + s[m] - s[yi])
                row_loss = row_loss + violation if summed else max(row_loss, violation)
        total += C[i] * row_loss
    return total


@njit(cache=True, nogil=True)
def weights_from_alpha(X, alpha, bias, sign, W, wb):
    """W += sign · Σ_i x_i α_iᵀ and wb += sign · bias · Σ_i α_i, alpha of shape (n_rows, n_classes).

    W has shape (n_features, n_classes) and wb shape (n_classes,).
    """
    data, indices, indptr, _ = X
    n, k = alpha.shape
    for i in range(n):
        a = alpha[i]
        nonzero = False
        for m in range(k):
            if a[m] != 0.0:
                nonzero = True
                wb[m] += sign * bias * a[m]
        if not nonzero:
            continue
        for p in range(np.uint64(indptr[i]), np.uint64(indptr[i + 1])):
            v = sign * data[p]
            row = W[indices[p]]
            for m in range(k):
                row[m] += v * a[m]


@njit(cache=True, nogil=True)
def sort_descending(values, n, out):
    """Copy ``values[:n]`` into ``out[:n]`` sorted in decreasing order.

    Insertion sort for the short lists the sub-problems usually have; numpy's sort beyond that.
    """
    if n > 24:
        s = np.sort(values[:n])
        for r in range(n):
            out[r] = s[n - 1 - r]
        return
    for r in range(n):
        v = values[r]
        q = r - 1
        while q >= 0 and out[q] < v:
            out[q + 1] = out[q]
            q -= 1
        out[q + 1] = v


@njit(cache=True, nogil=True)
def argsort_ascending(values, n):
    """Indices that sort ``values[:n]`` in increasing order (insertion sort for short lists)."""
    if n > 24:
        return np.argsort(values[:n], kind="mergesort")
    order = np.empty(n, dtype=np.int64)
    for r in range(n):
        v = values[r]
        q = r - 1
        while q >= 0 and values[order[q]] > v:
            order[q + 1] = order[q]
            q -= 1
        order[q + 1] = r
    return order
