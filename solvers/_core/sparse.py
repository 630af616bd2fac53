"""Compiled CSR row kernels shared by the solvers, and the door's check of the entries.

A row x_i of a CSR matrix is the slice ``start = indptr[i]``, ``end = indptr[i + 1]`` of ``data``
and ``indices``. Every solver appends an implicit constant feature of value ``bias`` to each row
without copying X: the weight vector ``w`` then has ``n_features + 1`` entries and ``w[n_features]``
is the bias weight (it stays 0 when ``bias == 0``). Pass an unsigned view of ``indices``
(`unsigned_indices`): with signed indices Numba inserts a negative-index check in every access.

`prefetch` asks the CPU to start loading a cache line; the dual coordinate solvers visit rows in a
random order, and loading the next rows early hides most of that latency.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

# The largest magnitude a training value may have: its square, times any number of entries a row
# can hold, stays far inside float64, as do the solvers' sums of such rows scaled by C. Finite
# values near 1e308 passed before and trained an all-zero model (their squares overflow to inf).
MAX_ABS_VALUE = 1e100


def unsigned_indices(indices: np.ndarray) -> np.ndarray:
    """View of a CSR ``indices`` array as unsigned integers of the same width (no copy)."""
    if indices.dtype == np.int32:
        return indices.view(np.uint32)
    if indices.dtype == np.int64:
        return indices.view(np.uint64)
    if indices.dtype in (np.uint32, np.uint64):
        return indices
    raise TypeError(f"CSR indices must be int32 or int64, got {indices.dtype}")


@njit(cache=True, nogil=True)
def entries_in_range(data, indices, n_features):
    """0 when every value is finite and at most ``MAX_ABS_VALUE`` in magnitude, and every
    (unsigned) index below n_features; 1 at the first non-finite value, 2 at the first index out
    of range, 3 at the first value beyond ``MAX_ABS_VALUE``. One pass, no temporaries."""
    limit = np.uint64(n_features)
    for k in range(data.shape[0]):
        if not np.isfinite(data[k]):
            return 1
        if np.uint64(indices[k]) >= limit:
            return 2
        if abs(data[k]) > MAX_ABS_VALUE:
            return 3
    return 0


@intrinsic
def prefetch(typingctx, array, position):
    """Hint the CPU to load the cache line holding ``array[position]`` (read, keep in cache)."""
    if not isinstance(array, types.Array) or not isinstance(position, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type, position_type = signature.args
        ary = context.make_array(array_type)(context, builder, args[0])
        idx = context.cast(builder, args[1], position_type, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [idx], wraparound=False)
        i8_ptr = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        # arguments: address, rw = 0 (read), locality = 3 (keep), cache type = 1 (data)
        builder.call(
            fn,
            [builder.bitcast(ptr, i8_ptr), i32(0), i32(3), i32(1)],
        )
        return context.get_dummy_value()

    return types.void(array, position), codegen


@njit(cache=True, nogil=True)
def prefetch_row(data, indices, indptr, i):
    """Prefetch row ``i``'s values and indices (up to its first 256 entries).

    One hint per 8 entries (a 64-byte line of float64 values; float32 and uint32 lines get two),
    plus the last entry, whose line the stride may skip.
    """
    start = indptr[i]
    end = indptr[i + 1]
    if end <= start:
        return
    stop = min(end, start + 256)
    for k in range(start, stop, 8):
        prefetch(data, k)
        prefetch(indices, k)
    prefetch(data, stop - 1)
    prefetch(indices, stop - 1)


@njit(cache=True, nogil=True)
def prefetch_row_ends(data, indices, indptr, i):
    """Prefetch the first and last cache lines of row ``i``'s values and indices.

    Four hints and no loop: on rows of up to a few cache lines this beats `prefetch_row`, whose
    loop (a branch with a trip count that varies by row) costs more than it hides; the hardware's
    stream prefetcher follows a longer row once its first lines arrive.
    """
    start = indptr[i]
    last = max(indptr[i + 1], start + 1) - 1
    prefetch(data, start)
    prefetch(indices, start)
    prefetch(data, last)
    prefetch(indices, last)


@njit(cache=True, nogil=True)
def row_dot(data, indices, start, end, w, n_features, bias):
    """x̃_iᵀw for the row [start, end) with the implicit bias feature."""
    acc = 0.0
    # an unsigned counter spares Numba's negative-index checks on data[k] and indices[k]
    for k in range(np.uint64(start), np.uint64(end)):
        acc += data[k] * w[indices[k]]
    return acc + bias * w[n_features]


@njit(cache=True, nogil=True)
def row_axpy(coef, data, indices, start, end, w, n_features, bias):
    """w += coef · x̃_i for the row [start, end) with the implicit bias feature."""
    for k in range(np.uint64(start), np.uint64(end)):
        w[indices[k]] += coef * data[k]
    w[n_features] += coef * bias


@njit(cache=True, nogil=True)
def sq_norm(w):
    """‖w‖² by a plain loop (np.dot inside Numba goes through BLAS, several times slower here)."""
    acc = 0.0
    for j in range(w.shape[0]):
        acc += w[j] * w[j]
    return acc


@njit(cache=True, nogil=True)
def dot(a, b):
    """aᵀb by a plain loop (BLAS threads fight for the cores on a busy machine)."""
    acc = 0.0
    for j in range(a.shape[0]):
        acc += a[j] * b[j]
    return acc


@njit(cache=True, nogil=True)
def row_sq_norm(data, start, end, bias_sq):
    """‖x̃_i‖² (float64) for the row [start, end), plus ``bias_sq`` for the bias feature."""
    acc = 0.0
    for k in range(np.uint64(start), np.uint64(end)):
        v = data[k]
        acc += v * v
    return acc + bias_sq


@njit(cache=True, nogil=True)
def row_sq_norms(data, indptr, bias):
    """‖x̃_i‖² for every row (float64), bias feature included; shape (n_rows,)."""
    n = indptr.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    bias_sq = bias * bias
    for i in range(n):
        out[i] = row_sq_norm(data, indptr[i], indptr[i + 1], bias_sq)
    return out


@njit(cache=True, nogil=True)
def rows_dot(data, indices, indptr, w, n_features, bias):
    """X̃w for all rows (float64); shape (n_rows,)."""
    n = indptr.shape[0] - 1
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        out[i] = row_dot(data, indices, indptr[i], indptr[i + 1], w, n_features, bias)
    return out


@njit(cache=True, nogil=True)
def rows_dot_where(data, indices, indptr, weight, w, n_features, bias):
    """X̃w for the rows with ``weight[i] > 0`` (0 for the others, which are not read)."""
    n = indptr.shape[0] - 1
    out = np.zeros(n, dtype=np.float64)
    for i in range(n):
        if weight[i] > 0.0:
            out[i] = row_dot(data, indices, indptr[i], indptr[i + 1], w, n_features, bias)
    return out


@njit(cache=True, nogil=True)
def weighted_row_sum(coef, data, indices, indptr, n_features, bias):
    """Σ_i coef_i x̃_i as a float64 vector of n_features + 1 entries (the last is the bias)."""
    w = np.zeros(n_features + 1, dtype=np.float64)
    add_weighted_rows(coef, data, indices, indptr, n_features, bias, 0, indptr.shape[0] - 1, w)
    return w


@njit(cache=True, nogil=True)
def add_weighted_rows(coef, data, indices, indptr, n_features, bias, first, stop, out):
    """out += Σ_{first ≤ i < stop} coef_i x̃_i: one thread's share of `weighted_row_sum`."""
    for i in range(first, stop):
        c = coef[i]
        if c != 0.0:
            row_axpy(c, data, indices, indptr[i], indptr[i + 1], out, n_features, bias)


@njit(cache=True, nogil=True)
def subset_times(data, indices, indptr, rows, coef, out):
    """out[r, c] = x_{rows[r]}ᵀ coef[c] for the listed rows only (no copy of them, nor of coef:
    a class at a time, so that each reads its own contiguous row of ``coef`` (k, n_features))."""
    for c in range(coef.shape[0]):
        w = coef[c]
        for r in range(rows.shape[0]):
            i = rows[r]
            acc = 0.0
            for p in range(indptr[i], indptr[i + 1]):
                acc += data[p] * w[indices[p]]
            out[r, c] = acc


@njit(cache=True, nogil=True)
def subset_times_by_row(data, indices, indptr, rows, coef_t, out):
    """out[r, :] = x_{rows[r]}ᵀ coef_t for the listed rows only, ``coef_t`` of shape
    (n_features, k) in row-major order (one-vs-rest keeps its weights so): each entry of a row
    reads one contiguous row of k weights."""
    k = coef_t.shape[1]
    for r in range(rows.shape[0]):
        i = rows[r]
        for c in range(k):
            out[r, c] = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            v = data[p]
            w = coef_t[indices[p]]
            for c in range(k):
                out[r, c] += v * w[c]
