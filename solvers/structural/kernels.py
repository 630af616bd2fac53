"""Compiled kernels of the shared-slack dual coordinate solver (see `solvers.structural.batch`).

Every kernel works in the scaled space of the change of variables: a constraint vector is
x̂ = x ∘ s (s = 1 / r, the inverse per-feature regularization scale) and the weights are ŵ. The
arguments travel in groups (NamedTuples, which cross into Numba):

- `ScaledRows` (X, scale): the constraint rows as the door's `CSRArrays` and s;
- `Groups` (group_of, group_ptr, members, C): the example of each row, each example's rows
  (``members[group_ptr[g]:group_ptr[g + 1]]``, for the partner search) and its C;
- `Weights` (u, w, lo, bounded): u = Σ alpha_r x̂_r, the weights used for gradients w = u, or
  w = max(u, lo) componentwise under the bound constraint w ≥ lo;
- `Duals` (alpha, alpha_sums): alpha_r ≥ 0 and, per example, Σ_{r ∈ i} alpha_r ≤ C_i.

The dual objective is F = Σ_k φ_k + Σ_r l̂_r alpha_r with φ_k = −½ w_k² + (w_k − u_k) lo_k (the
second term is zero without bounds); the kernels return its change so the driver can track it.
"""

from typing import NamedTuple

import numpy as np
from numba import njit

# Relative slack below which an example's sum constraint counts as active.
_ACTIVE_RTOL = 1e-12


class ScaledRows(NamedTuple):
    X: object  # CSRArrays
    scale: np.ndarray  # (n_features,) s = 1 / r


class Groups(NamedTuple):
    group_of: np.ndarray  # (n_rows,) int64
    group_ptr: np.ndarray  # (n_groups + 1,) int64
    members: np.ndarray  # (n_rows,) int64, the rows sorted by group
    C: np.ndarray  # (n_groups,) float64


class Weights(NamedTuple):
    u: np.ndarray
    w: np.ndarray  # u itself unless bounded
    lo: np.ndarray
    bounded: bool


class Duals(NamedTuple):
    alpha: np.ndarray  # (n_rows,)
    alpha_sums: np.ndarray  # (n_groups,)


@njit(cache=True, nogil=True)
def row_sq_norms(rows):
    """‖x̂_r‖² for every row."""
    data, indices, indptr, _ = rows.X
    s = rows.scale
    n = indptr.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    for r in range(n):
        acc = 0.0
        for p in range(indptr[r], indptr[r + 1]):
            v = data[p] * s[indices[p]]
            acc += v * v
        out[r] = acc
    return out


# The helpers below take the arrays themselves: the compiled passes unpack the groups once, and
# helpers called per row with whole groups ran 1.5× slower.


@njit(cache=True, nogil=True)
def row_dot(data, ind, ptr, s, w, r):
    """x̂_r · w."""
    acc = 0.0
    for p in range(ptr[r], ptr[r + 1]):
        k = ind[p]
        acc += data[p] * s[k] * w[k]
    return acc


@njit(cache=True, nogil=True)
def row_cross(data, ind, ptr, s, r1, r2):
    """x̂_r1 · x̂_r2 by merging the two sorted index lists."""
    p1, e1 = ptr[r1], ptr[r1 + 1]
    p2, e2 = ptr[r2], ptr[r2 + 1]
    acc = 0.0
    while p1 < e1 and p2 < e2:
        k1 = ind[p1]
        k2 = ind[p2]
        if k1 == k2:
            acc += data[p1] * data[p2] * s[k1] * s[k1]
            p1 += 1
            p2 += 1
        elif k1 < k2:
            p1 += 1
        else:
            p2 += 1
    return acc


@njit(cache=True, nogil=True)
def row_axpy(data, ind, ptr, s, u, w, lo, bounded, r, a):
    """u += a x̂_r, refresh w on the touched coordinates; return the change of Σ_k φ_k."""
    dq = 0.0
    for p in range(ptr[r], ptr[r + 1]):
        k = ind[p]
        w_old = w[k]
        u_old = u[k]
        u_new = u_old + a * data[p] * s[k]
        u[k] = u_new
        if bounded:
            w_new = max(u_new, lo[k])
            w[k] = w_new
            dq += (-0.5 * w_new * w_new + (w_new - u_new) * lo[k]) - (
                -0.5 * w_old * w_old + (w_old - u_old) * lo[k]
            )
        else:
            dq += -0.5 * (u_new * u_new - u_old * u_old)
    return dq


@njit(cache=True, nogil=True)
def add_row(rows, weights, r, a):
    """`row_axpy` for the grouped arguments: u += a x̂_r; returns the change of Σ_k φ_k."""
    data, ind, ptr, _ = rows.X
    u, w, lo, bounded = weights
    return row_axpy(data, ind, ptr, rows.scale, u, w, lo, bounded, r, a)


@njit(cache=True, nogil=True)
def _partner(data, ind, ptr, s, w, margins, alpha, group_ptr, members, g, r):
    """The variable of example g, other than r, with alpha > 0 and the smallest gradient.

    Returns (row or -1, its gradient).
    """
    best = -1
    best_grad = 0.0
    for q in range(group_ptr[g], group_ptr[g + 1]):
        k = members[q]
        if k == r or alpha[k] <= 0.0:
            continue
        grad = margins[k] - row_dot(data, ind, ptr, s, w, k)
        if best < 0 or grad < best_grad:
            best_grad = grad
            best = k
    return best, best_grad


@njit(cache=True, nogil=True)
def _pair_step(data, ind, ptr, s, sq_norms, alpha, r, k, gp):
    """Step a ≥ 0 moving mass from k to r, for the gradient difference gp = g_r − g_k > 0.

    a = min(gp / ‖x̂_r − x̂_k‖², alpha_k); with equal rows the dual is linear in a: all of alpha_k.
    """
    hp = sq_norms[r] + sq_norms[k] - 2.0 * row_cross(data, ind, ptr, s, r, k)
    a = alpha[k]
    if hp > 1e-12 * (sq_norms[r] + sq_norms[k]) and gp / hp < a:
        a = gp / hp
    return a


@njit(cache=True, nogil=True)
def _move(data, ind, ptr, s, margins, alpha, u, w, lo, bounded, r, k, a):
    """alpha_r += a, alpha_k −= a (the example's sum is unchanged); returns (Δ Σ l̂α, Δ Σ φ)."""
    alpha[r] += a
    if a == alpha[k]:
        alpha[k] = 0.0
    else:
        alpha[k] -= a
    dq = row_axpy(data, ind, ptr, s, u, w, lo, bounded, r, a)
    dq += row_axpy(data, ind, ptr, s, u, w, lo, bounded, k, -a)
    return a * (margins[r] - margins[k]), dq


@njit(cache=True, nogil=True)
def epoch(rows, margins, groups, sq_norms, order, duals, weights, pairwise, max_gradient, seen):
    """One pass of single and pairwise dual updates over the rows in ``order``.

    On an example whose sum constraint is active, a variable with g > 0 takes mass from the
    partner of smallest gradient among the example's non-zero alpha (pairwise step); every
    other case is the exact single-variable step.
    max_gradient[g] receives the largest gradient met for example g during the pass (for UB'),
    seen[r] the gradient of row r when it was visited (for shrinking).
    Returns (change of Σ l̂ alpha, change of Σ φ, number of updates).
    """
    data, ind, ptr, _ = rows.X
    s = rows.scale
    group_of, group_ptr, members, group_C = groups
    alpha, alpha_sums = duals
    u, w, lo, bounded = weights
    dl = 0.0
    dq = 0.0
    n_upd = 0
    for t in range(order.shape[0]):
        r = order[t]
        g = group_of[r]
        c = group_C[g]
        grad = margins[r] - row_dot(data, ind, ptr, s, w, r)
        seen[r] = grad
        if grad > max_gradient[g]:
            max_gradient[g] = grad
        if grad > 0.0 and alpha_sums[g] >= c * (1.0 - _ACTIVE_RTOL):
            if not pairwise:
                continue
            k, grad_k = _partner(data, ind, ptr, s, w, margins, alpha, group_ptr, members, g, r)
            if k < 0 or grad - grad_k <= 0.0:
                continue
            a = _pair_step(data, ind, ptr, s, sq_norms, alpha, r, k, grad - grad_k)
            if a <= 0.0:
                continue
            ddl, ddq = _move(data, ind, ptr, s, margins, alpha, u, w, lo, bounded, r, k, a)
            dl += ddl
            dq += ddq
            n_upd += 1
            continue
        if grad == 0.0:
            continue
        if sq_norms[r] > 0.0:
            a = grad / sq_norms[r]
        elif grad > 0.0:
            a = np.inf
        else:
            a = -np.inf
        hi = c - alpha_sums[g]
        at_top = a >= hi
        if at_top:
            a = hi
        at_zero = a <= -alpha[r]
        if at_zero:
            a = -alpha[r]
        if a == 0.0:
            continue
        if at_zero:
            alpha[r] = 0.0
        else:
            alpha[r] += a
        alpha_sums[g] += a
        if at_top:
            alpha_sums[g] = c
        dq += row_axpy(data, ind, ptr, s, u, w, lo, bounded, r, a)
        dl += a * margins[r]
        n_upd += 1
    return dl, dq, n_upd


@njit(cache=True, nogil=True)
def group_loss(rows, margins, w, group_of, C, n_groups):
    """Σ_i C_i max(0, max_j (l̂_ij − ŵ·x̂_ij)): the loss term of the exact upper bound."""
    data, ind, ptr, _ = rows.X
    s = rows.scale
    worst = np.zeros(n_groups, dtype=np.float64)
    for r in range(ptr.shape[0] - 1):
        grad = margins[r] - row_dot(data, ind, ptr, s, w, r)
        g = group_of[r]
        if grad > worst[g]:
            worst[g] = grad
    total = 0.0
    for g in range(n_groups):
        total += C[g] * worst[g]
    return total


@njit(cache=True, nogil=True)
def scatter_alpha(rows, alpha):
    """u = Σ_r alpha_r x̂_r (to rebuild the weights from a warm start)."""
    data, indices, indptr, n_features = rows.X
    s = rows.scale
    u = np.zeros(n_features, dtype=np.float64)
    for r in range(indptr.shape[0] - 1):
        a = alpha[r]
        if a == 0.0:
            continue
        for p in range(indptr[r], indptr[r + 1]):
            k = indices[p]
            u[k] += a * data[p] * s[k]
    return u
