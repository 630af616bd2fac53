"""Compiled exploration step of the online shared-slack solver (see `solvers.structural_stream`).

The cache holds constraint rows as raw CSR arrays (float64 values, uint32 indices), their margins
l̂, dual variables and example slots; the example table (global id, C, Σ alpha) is sorted by id up
to `n_sorted`, newer examples are appended after it. istate = [rows, nnz, examples, n_sorted,
cursor]; fstate = [UB of the cached problem, Σ l̂ alpha, Σ φ (see _structural_kernels), Σ of
C · max(0, max_j g) seen while exploring].
"""

from numba import njit

from solvers._structural_kernels import row_axpy, row_dot

DONE = 0  # the chunk is explored
OPTIMIZE = 1  # the gap of the cached problem exceeds tol
FULL = 2  # the next row does not fit in the cache


@njit(cache=True, nogil=True)
def explore(
    data,
    ind,
    ptr,
    lm,
    ex_ptr,
    first_id,
    start,
    cd,
    ci,
    cp,
    cl,
    ca,
    cg,
    csq,
    gid,
    gcap,
    gsum,
    istate,
    fstate,
    s,
    u,
    w,
    lo,
    bounded,
    c,
    tol,
):
    """Explore examples start.. of a chunk (Algorithm 2, lines 4–11); return (next, reason)."""
    for e in range(start, ex_ptr.shape[0] - 1):
        best = -1
        best_g = 0.0
        for r in range(ex_ptr[e], ex_ptr[e + 1]):
            g = lm[r] - row_dot(data, ind, ptr, s, w, r)
            if best < 0 or g > best_g:
                best_g = g
                best = r
        if best < 0:
            continue
        eid = first_id + e
        cursor = istate[4]
        while cursor < istate[3] and gid[cursor] < eid:
            cursor += 1
        istate[4] = cursor
        slot = cursor if cursor < istate[3] and gid[cursor] == eid else -1
        if best_g <= 0.0:
            continue
        nnz_r = ptr[best + 1] - ptr[best]
        n_rows = istate[0]
        nnz = istate[1]
        if n_rows >= cl.shape[0] or nnz + nnz_r > cd.shape[0]:
            return e, FULL
        if slot < 0 and istate[2] >= gid.shape[0]:
            return e, FULL
        fstate[3] += c * best_g
        if slot < 0:
            slot = istate[2]
            gid[slot] = eid
            gcap[slot] = c
            gsum[slot] = 0.0
            istate[2] += 1
        sq = 0.0
        for p in range(ptr[best], ptr[best + 1]):
            k = ind[p]
            cd[nnz] = data[p]
            ci[nnz] = k
            v = data[p] * s[k]
            sq += v * v
            nnz += 1
        cp[n_rows + 1] = nnz
        cl[n_rows] = lm[best]
        ca[n_rows] = 0.0
        cg[n_rows] = slot
        csq[n_rows] = sq
        istate[0] = n_rows + 1
        istate[1] = nnz
        fstate[0] += c * best_g
        # The one-pass step on the new variable (never lowers the dual).
        room = gcap[slot] - gsum[slot]
        if room > 0.0:
            a = room if sq <= 0.0 else min(best_g / sq, room)
            ca[n_rows] = a
            gsum[slot] += a
            fstate[2] += row_axpy(cd, ci, cp, s, u, w, lo, bounded, n_rows, a)
            fstate[1] += a * lm[best]
        ub = fstate[0]
        if ub - (fstate[1] + fstate[2]) > tol * max(1.0, abs(ub)):
            return e + 1, OPTIMIZE
    return ex_ptr.shape[0] - 1, DONE


@njit(cache=True, nogil=True)
def chunk_loss(data, ind, ptr, lm, ex_ptr, s, w, c):
    """Σ_e c · max(0, max_j (l̂_ej − ŵ·x̂_ej)) over the examples of a chunk."""
    total = 0.0
    for e in range(ex_ptr.shape[0] - 1):
        worst = 0.0
        for r in range(ex_ptr[e], ex_ptr[e + 1]):
            g = lm[r] - row_dot(data, ind, ptr, s, w, r)
            if g > worst:
                worst = g
        total += c * worst
    return total
