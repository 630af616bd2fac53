"""Compiled exploration step of the online shared-slack solver (see `solvers.structural.stream`).

The cache (`solvers.structural.cache.CacheArrays`) holds constraint rows as raw CSR arrays
(float64 values, uint32 indices), their margins l̂, dual variables and example slots, and the
table of examples (global id, C, Σ alpha); ``counts`` and ``sums`` carry its sizes and running
sums between calls (field numbers in `solvers.structural.cache`). The groups of arguments are
those of `solvers.structural.kernels`.
"""

from numba import njit

from solvers.structural.kernels import add_row, row_dot

DONE = 0  # the chunk is explored
OPTIMIZE = 1  # the gap of the cached problem exceeds tol
FULL = 2  # the next row does not fit in the cache

# the counts and sums fields (as in solvers.structural.cache)
_ROWS, _NNZ, _EXAMPLES, _N_SORTED, _CURSOR = 0, 1, 2, 3, 4
_CACHED_UB, _MARGIN_SUM, _PHI_SUM, _EXPLORED_LOSS = 0, 1, 2, 3


@njit(cache=True, nogil=True)
def explore(chunk, margins, ex_ptr, first_id, start, cache, cache_rows, weights, c, tol):
    """Explore examples start.. of a chunk (Algorithm 2, lines 4–11); return (next, reason).

    chunk: the chunk's rows (`ScaledRows`), margins its l̂, ex_ptr the row offsets of its
    examples, first_id the global id of its first example; cache_rows: the cache's CSR arrays at
    full capacity as `ScaledRows` (for the dual step); c: the loss weight of every example.
    """
    counts, sums = cache.counts, cache.sums
    for e in range(start, ex_ptr.shape[0] - 1):
        best, best_g = _most_violated(chunk, margins, weights.w, ex_ptr[e], ex_ptr[e + 1])
        if best < 0:
            continue
        slot = _find_example(cache, first_id + e)
        if best_g <= 0.0:
            continue
        chunk_ptr = chunk.X.indptr
        if counts[_ROWS] >= cache.margins.shape[0] or (
            counts[_NNZ] + chunk_ptr[best + 1] - chunk_ptr[best] > cache.data.shape[0]
        ):
            return e, FULL
        if slot < 0 and counts[_EXAMPLES] >= cache.example_id.shape[0]:
            return e, FULL
        sums[_EXPLORED_LOSS] += c * best_g
        if slot < 0:
            slot = counts[_EXAMPLES]
            cache.example_id[slot] = first_id + e
            cache.example_C[slot] = c
            cache.example_alpha[slot] = 0.0
            counts[_EXAMPLES] += 1
        row = _append_row(chunk, margins, best, cache, slot)
        sums[_CACHED_UB] += c * best_g
        # The one-pass step on the new variable (never lowers the dual).
        room = cache.example_C[slot] - cache.example_alpha[slot]
        if room > 0.0:
            sq = cache.sq_norms[row]
            a = room if sq <= 0.0 else min(best_g / sq, room)
            cache.alpha[row] = a
            cache.example_alpha[slot] += a
            sums[_PHI_SUM] += add_row(cache_rows, weights, row, a)
            sums[_MARGIN_SUM] += a * margins[best]
        ub = sums[_CACHED_UB]
        if ub - (sums[_MARGIN_SUM] + sums[_PHI_SUM]) > tol * max(1.0, abs(ub)):
            return e + 1, OPTIMIZE
    return ex_ptr.shape[0] - 1, DONE


@njit(cache=True, nogil=True, inline="always")
def _most_violated(rows, margins, w, first, stop):
    """(row, gradient g = l̂ − ŵ·x̂) of the largest gradient among rows first..stop-1."""
    data, indices, indptr, _ = rows.X
    best = -1
    best_g = 0.0
    for r in range(first, stop):
        g = margins[r] - row_dot(data, indices, indptr, rows.scale, w, r)
        if best < 0 or g > best_g:
            best_g = g
            best = r
    return best, best_g


@njit(cache=True, nogil=True, inline="always")
def _find_example(cache, eid):
    """The slot of example ``eid`` in the sorted part of the table, or -1; moves the cursor."""
    counts = cache.counts
    cursor = counts[_CURSOR]
    while cursor < counts[_N_SORTED] and cache.example_id[cursor] < eid:
        cursor += 1
    counts[_CURSOR] = cursor
    if cursor < counts[_N_SORTED] and cache.example_id[cursor] == eid:
        return cursor
    return -1


@njit(cache=True, nogil=True, inline="always")
def _append_row(chunk, margins, best, cache, slot):
    """Copy the chunk's row ``best`` to the end of the cache (alpha 0); returns its row number."""
    data, indices, indptr, _ = chunk.X
    s = chunk.scale
    counts = cache.counts
    n_rows = counts[_ROWS]
    nnz = counts[_NNZ]
    sq = 0.0
    for p in range(indptr[best], indptr[best + 1]):
        k = indices[p]
        cache.data[nnz] = data[p]
        cache.indices[nnz] = k
        v = data[p] * s[k]
        sq += v * v
        nnz += 1
    cache.indptr[n_rows + 1] = nnz
    cache.margins[n_rows] = margins[best]
    cache.alpha[n_rows] = 0.0
    cache.slot[n_rows] = slot
    cache.sq_norms[n_rows] = sq
    counts[_ROWS] = n_rows + 1
    counts[_NNZ] = nnz
    return n_rows


@njit(cache=True, nogil=True)
def chunk_loss(rows, margins, ex_ptr, w, c):
    """Σ_e c · max(0, max_j (l̂_ej − ŵ·x̂_ej)) over the examples of a chunk."""
    data, indices, indptr, _ = rows.X
    total = 0.0
    for e in range(ex_ptr.shape[0] - 1):
        worst = 0.0
        for r in range(ex_ptr[e], ex_ptr[e + 1]):
            g = margins[r] - row_dot(data, indices, indptr, rows.scale, w, r)
            if g > worst:
                worst = g
        total += c * worst
    return total
