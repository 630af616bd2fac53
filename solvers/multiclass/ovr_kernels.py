"""Compiled fused pass of one-vs-rest dual coordinate descent over a block of classes.

One pass visits each row once and updates every class of the block still active for that row, so
a row is read from memory once for the whole block instead of once per class. Per class c the
binary dual is min ½αᵀ(Q + D)α − eᵀα, 0 ≤ α_i ≤ U_i, with y_i = +1 when the row's label is c and
−1 otherwise; U_i = C_i, D_ii = 0 (hinge) or U_i = ∞, D_ii = 1/(2C_i) (squared hinge).

Arrays of the block (kb classes): alpha (n, kb), W (n_features, kb) feature-major, wb (kb,),
active (n, kb) uint8 shrinking flags, live (kb,) uint8 (0 once a class has converged), Mbar/mbar
(kb,) the shrinking thresholds of the previous pass, and the outputs M/m (kb,) (extreme projected
gradients of this pass) and n_kept (kb,) (variables visited and not shrunk). in_play (n,) uint8
says whether a row keeps an active variable of a live class; the pass rewrites it for the rows it
visits, so the driver rescans the flags (`rows_in_play`) only when a class dies or is restored.
"""

import numpy as np
from numba import njit

from solvers._core.sparse import prefetch, prefetch_row, prefetch_row_ends
from solvers.binary.kernels import shuffle_prefix
from solvers.multiclass.kernels import row_scores

_TINY = 1e-12
# A block of at least WIDE_BLOCK classes whose W holds at least WIDE_W_ENTRIES values (8 MiB:
# more than stays in a core's caches) sweeps W's whole feature row when every class is in play
# (`ovr_pass`); narrower or smaller ones keep their register accumulators, which measured
# faster where W stays in cache (pendigits, usps, 26 classes of 16 features).
WIDE_BLOCK = 8
WIDE_W_ENTRIES = 1 << 20


@njit(cache=True, nogil=True)
def ovr_pass(
    X,
    bias,
    labels,
    classes,
    Cmat,
    c_stride,
    hinge,
    A,
    order,
    alpha,
    W,
    wb,
    active,
    live,
    Mbar,
    mbar,
    M,
    m,
    n_kept,
    in_play,
    long_rows,
):
    """One fused pass over the rows in ``order`` for the classes of a block (see module doc).

    The row two positions ahead is prefetched: whole when ``long_rows`` (rows of many cache
    lines), else its first and last lines (`solvers.binary.kernels.dcd_epoch` says why)."""
    data, indices, indptr, _ = X
    kb = W.shape[1]
    cls = np.empty(kb, dtype=np.uint32)  # unsigned: no wraparound checks on W[j, cls[r]]
    s = np.empty(kb)
    delta = np.empty(kb)
    step = np.empty(kb)
    wide = kb >= WIDE_BLOCK and W.shape[0] * kb >= WIDE_W_ENTRIES
    for c in range(kb):
        M[c] = -np.inf
        m[c] = np.inf
        n_kept[c] = 0
    n_order = order.shape[0]
    for t in range(n_order):
        if t + 2 < n_order:
            ahead = order[t + 2]
            if long_rows:
                prefetch_row(data, indices, indptr, ahead)
            else:
                prefetch_row_ends(data, indices, indptr, ahead)
            prefetch(active[ahead], 0)
            prefetch(alpha[ahead], 0)
        i = order[t]
        # unsigned bounds: no negative-index checks on data[p] and indices[p] below
        start = np.uint64(indptr[i])
        end = np.uint64(indptr[i + 1])
        flags = active[i]
        na = 0
        for c in range(kb):
            if live[c] and flags[c]:
                cls[na] = c
                na += 1
        if na == 0:
            in_play[i] = 0
            continue
        # every class of the block active in this row (a full pass, a cold start): one sweep
        # over the row with W's whole feature row per entry, contiguous, in the order of the
        # grouped loop below (the same sums to the last bit); wide blocks read W's lines once
        # per entry instead of once per group of classes
        g = 0
        if wide and na == kb:
            for c in range(kb):
                s[c] = bias * wb[c]
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                for c in range(kb):
                    s[c] += v * W[j, c]
            g = na
        # register accumulators, four classes at a time, then two, then one (not s[r], whose
        # load-store chain through memory would serialise the loop); the row stays in L1
        while g < na:
            if na - g >= 4:
                c0 = cls[g]
                c1 = cls[g + 1]
                c2 = cls[g + 2]
                c3 = cls[g + 3]
                acc = bias * wb[c0]
                acc1 = bias * wb[c1]
                acc2 = bias * wb[c2]
                acc3 = bias * wb[c3]
                for p in range(start, end):
                    v = data[p]
                    j = indices[p]
                    acc += v * W[j, c0]
                    acc1 += v * W[j, c1]
                    acc2 += v * W[j, c2]
                    acc3 += v * W[j, c3]
                s[g] = acc
                s[g + 1] = acc1
                s[g + 2] = acc2
                s[g + 3] = acc3
                g += 4
            elif na - g >= 2:
                c0 = cls[g]
                c1 = cls[g + 1]
                acc = bias * wb[c0]
                acc1 = bias * wb[c1]
                for p in range(start, end):
                    v = data[p]
                    j = indices[p]
                    acc += v * W[j, c0]
                    acc1 += v * W[j, c1]
                s[g] = acc
                s[g + 1] = acc1
                g += 2
            else:
                c0 = cls[g]
                acc = bias * wb[c0]
                for p in range(start, end):
                    acc += data[p] * W[indices[p], c0]
                s[g] = acc
                g += 1
        nd = 0
        kept = 0
        for r in range(na):
            c = cls[r]
            yi = 1.0 if labels[i] == classes[c] else -1.0
            Ci = Cmat[i, c * c_stride]
            if hinge:
                U = Ci
                Dii = 0.0
            else:
                U = np.inf
                Dii = 0.5 / Ci
            a = alpha[i, c]
            G = yi * s[r] - 1.0 + Dii * a
            PG = 0.0
            if a == 0.0:
                if G > Mbar[c]:
                    flags[c] = 0
                    continue
                if G < 0.0:
                    PG = G
            elif a == U:
                if G < mbar[c]:
                    flags[c] = 0
                    continue
                if G > 0.0:
                    PG = G
            else:
                PG = G
            n_kept[c] += 1
            kept = 1
            M[c] = max(M[c], PG)
            m[c] = min(m[c], PG)
            if abs(PG) > _TINY:
                qd = A[i] + Dii
                if qd > 0.0:
                    a_new = min(max(a - G / qd, 0.0), U)
                else:
                    a_new = U  # a zero row under the hinge loss: G = −1, the step is unbounded
                alpha[i, c] = a_new
                cls[nd] = c
                delta[nd] = (a_new - a) * yi
                nd += 1
        in_play[i] = kept
        if nd == 0:
            continue
        for q in range(nd):
            wb[cls[q]] += delta[q] * bias
        g = 0
        if wide and 2 * nd >= kb:
            # most of the block's classes moved: one contiguous sweep of W's feature rows, with
            # a zero step for the others (W[j, c] + 0 is W[j, c])
            for c in range(kb):
                step[c] = 0.0
            for q in range(nd):
                step[cls[q]] = delta[q]
            for p in range(start, end):
                v = data[p]
                j = indices[p]
                for c in range(kb):
                    W[j, c] += step[c] * v
            g = nd
        while g < nd:
            if nd - g >= 4:
                c0 = cls[g]
                c1 = cls[g + 1]
                c2 = cls[g + 2]
                c3 = cls[g + 3]
                d0 = delta[g]
                d1 = delta[g + 1]
                d2 = delta[g + 2]
                d3 = delta[g + 3]
                for p in range(start, end):
                    v = data[p]
                    j = indices[p]
                    W[j, c0] += d0 * v
                    W[j, c1] += d1 * v
                    W[j, c2] += d2 * v
                    W[j, c3] += d3 * v
                g += 4
            elif nd - g >= 2:
                c0 = cls[g]
                c1 = cls[g + 1]
                d0 = delta[g]
                d1 = delta[g + 1]
                for p in range(start, end):
                    v = data[p]
                    j = indices[p]
                    W[j, c0] += d0 * v
                    W[j, c1] += d1 * v
                g += 2
            else:
                c0 = cls[g]
                d0 = delta[g]
                for p in range(start, end):
                    W[indices[p], c0] += d0 * data[p]
                g += 1


@njit(cache=True, nogil=True)
def ovr_measures(X, bias, labels, classes, Cmat, c_stride, hinge, alpha, W, wb):
    """Per-class (primal, f(α), M, m) of a block at the current α, four arrays of shape (kb,):
    the objectives and the largest and smallest projected gradient over the rows with C_i > 0
    (−inf / +inf when there is none). The scores are computed row by row (O(kb) scratch), never
    as an (n, kb) matrix."""
    data, indices, indptr, _ = X
    n = indptr.shape[0] - 1
    kb = W.shape[1]
    s = np.empty(kb)
    reg = np.empty(kb)
    loss = np.zeros(kb)
    lin = np.zeros(kb)
    M = np.full(kb, -np.inf)
    m = np.full(kb, np.inf)
    for c in range(kb):
        reg[c] = wb[c] * wb[c]
    for j in range(W.shape[0]):
        for c in range(kb):
            reg[c] += W[j, c] * W[j, c]
    for i in range(n):
        if c_stride == 0 and Cmat[i, 0] <= 0.0:
            continue  # a row no class trains on (a fold's held-out row): no scores needed
        row_scores(data, indices, np.uint64(indptr[i]), np.uint64(indptr[i + 1]), W, wb, bias, s)
        for c in range(kb):
            Ci = Cmat[i, c * c_stride]
            if Ci <= 0.0:
                continue
            yi = 1.0 if labels[i] == classes[c] else -1.0
            xi = max(0.0, 1.0 - yi * s[c])
            a = alpha[i, c]
            if hinge:
                loss[c] += Ci * xi
                lin[c] += a
                U, Dii = Ci, 0.0
            else:
                loss[c] += Ci * xi * xi
                lin[c] += a - 0.25 * a * a / Ci
                U, Dii = np.inf, 0.5 / Ci
            G = yi * s[c] - 1.0 + Dii * a
            PG = min(G, 0.0) if a <= 0.0 else (max(G, 0.0) if a >= U else G)
            M[c] = max(M[c], PG)
            m[c] = min(m[c], PG)
    primal = np.empty(kb)
    dual = np.empty(kb)
    for c in range(kb):
        primal[c] = 0.5 * reg[c] + loss[c]
        dual[c] = 0.5 * reg[c] - lin[c]
    return primal, dual, M, m


@njit(cache=True, nogil=True)
def after_pass(
    tol, shrink, full_pass, iteration, M, m, n_kept, n_usable, usable, active, live, gap, n_iter,
    Mbar, mbar, in_play,
):  # fmt: skip
    """Per-class stopping and shrinking bookkeeping after a pass; returns (some class met tol,
    classes still live).

    A live class meets tol when M − m ≤ tol, |M| ≤ tol and |m| ≤ tol (or it visited nothing);
    it dies if that held on a full pass over all its usable rows, and is restored (its flags reset
    to ``usable``, its thresholds to ±inf) if it held on its shrunk rows only. With ``shrink``,
    the next pass shrinks by this pass's M > 0 and m < 0 (LIBLINEAR's M̄, m̄)."""
    n, kb = active.shape
    met_any = False
    changed = False
    for c in range(kb):
        restored = False
        if live[c]:
            visited = n_kept[c] > 0
            gap[c] = M[c] - m[c] if visited else 0.0
            n_iter[c] = iteration
            met = not visited or (
                M[c] - m[c] <= tol and abs(M[c]) <= tol and abs(m[c]) <= tol
            )  # fmt: skip
            if met:
                met_any = True
                if n_kept[c] == n_usable[c]:
                    if full_pass:
                        live[c] = 0
                        changed = True
                else:
                    for i in range(n):
                        active[i, c] = usable[i, c]
                    restored = True
                    changed = True
        if shrink:
            Mbar[c] = M[c] if M[c] > 0.0 and not restored else np.inf
            mbar[c] = m[c] if m[c] < 0.0 and not restored else -np.inf
    if changed:
        rows_in_play(active, live, in_play)
    n_live = 0
    for c in range(kb):
        n_live += live[c]
    return met_any, n_live


@njit(cache=True, nogil=True)
def ray_terms(alpha, Cmat, c_stride, hinge, W, wb):
    """Per class c of the block, the terms of its dual along the ray of α_c
    (`solvers._core.warm_start`): (Σ_i α_ic, ‖w̃_c‖² + Σ_i D_ii α_ic², the largest r with
    rα_ic ≤ U_i for every i), each of shape (kb,)."""
    n, kb = alpha.shape
    lin = np.zeros(kb)
    quad = np.zeros(kb)
    r_max = np.full(kb, np.inf)
    for i in range(n):
        for c in range(kb):
            a = alpha[i, c]
            if a <= 0.0:
                continue
            C = Cmat[i, c * c_stride]
            lin[c] += a
            if hinge:
                r_max[c] = min(r_max[c], C / a)
            else:
                quad[c] += 0.5 * a * a / C
    for j in range(W.shape[0]):
        for c in range(kb):
            quad[c] += W[j, c] * W[j, c]
    for c in range(kb):
        quad[c] += wb[c] * wb[c]
    return lin, quad, r_max


@njit(cache=True, nogil=True)
def shuffled_rows(in_play, seed, out):
    """The rows flagged in ``in_play`` written to ``out`` in a random order drawn from ``seed``
    (`solvers.binary.kernels.shuffle_prefix`); returns how many."""
    count = 0
    for i in range(in_play.shape[0]):
        if in_play[i]:
            out[count] = i
            count += 1
    shuffle_prefix(out, count, seed)
    return count


@njit(cache=True, nogil=True)
def pass_summary(M, m, n_kept):
    """(largest M − m, largest M, smallest m, variables kept) over the classes a pass visited."""
    gap = 0.0
    top = -np.inf
    bottom = np.inf
    kept = 0
    for c in range(M.shape[0]):
        kept += n_kept[c]
        if n_kept[c] > 0:
            gap = max(gap, M[c] - m[c])
            top = max(top, M[c])
            bottom = min(bottom, m[c])
    return gap, top, bottom, kept


@njit(cache=True, nogil=True)
def rows_in_play(active, live, out):
    """out[i] = 1 when row i keeps an active variable of a live class of the block, else 0."""
    n, kb = active.shape
    for i in range(n):
        flag = 0
        for c in range(kb):
            if live[c] and active[i, c]:
                flag = 1
                break
        out[i] = flag


@njit(cache=True, nogil=True)
def interleave_regions(buf, rows, k, block_of, slot, starts, sizes):
    """Rearrange ``buf`` in place from one (rows, size_b) region per block, the regions back to
    back from ``starts[b]``, into one (rows, k) array in class order.

    Class c lives in block ``block_of[c]`` at column ``slot[c]``. Each position q = r · k + c
    pulls its value from where it sits now; following these moves around their cycles, with a
    bitmap of the positions already filled, moves every value once.
    """
    total = rows * k
    done = np.zeros((total + 63) // 64, dtype=np.uint64)
    one = np.uint64(1)
    for p0 in range(total):
        if done[p0 >> 6] & (one << np.uint64(p0 & 63)):
            continue
        saved = buf[p0]
        q = p0
        while True:
            done[q >> 6] |= one << np.uint64(q & 63)
            r = q // k
            c = q - r * k
            b = block_of[c]
            src = starts[b] + r * sizes[b] + slot[c]
            if src == p0:
                buf[q] = saved
                break
            buf[q] = buf[src]
            q = src
