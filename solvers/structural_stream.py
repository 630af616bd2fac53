"""Online (out-of-core) shared-slack SVM: the cache algorithm of Ramanan's section 4.

Same problem as `solvers.structural` (one loss weight C for every example). The examples stream
from disk in chunks; only a cache of constraint rows lives in memory, bounded by ``cache_size``.
Algorithm 2 of the paper: for each new example take its most violated constraint (largest
gradient g = l̂ − ŵ·x̂); when g > 0 add it to the cache, raise the running upper bound UB of the
cached problem by C·g and take one dual step on it; when UB − LB > tol · max(1, |UB|), optimize
the cache (Algorithm 1, hot-started) to the tolerance. Rows whose alpha is 0 are evicted when the
cache is full and after each pass (the paper evicts after every optimization; deferring it keeps
the many small optimizations of a first pass cheap, within the same memory bound). LB = F(α)
is a lower bound of the full problem (alpha = 0 off the cache); after a pass, UB' (from the
gradients seen while exploring) decides whether to spend a streaming pass on the exact UB = primal
of ŵ over all the data; the solve stops once that certifies the tolerance, or after ``passes``.
When the support vectors alone overflow the cache, those with the smallest alpha are dropped
(their alpha set to 0: LB stays a valid bound) and counted in ``extra["evicted_support_vectors"]``.
"""

from __future__ import annotations

import numpy as np

from solvers import _stream_kernels as SK
from solvers import _structural_kernels as K
from solvers.progress import Callback, Monitor, Progress, SolveResult, Status
from solvers.structural import Reparam, within_tol
from solvers.structural_cache import ConstraintCache
from solvers.structural_chunks import chunk_source, whole_examples


class _Online:
    """State and steps of the online solver."""

    def __init__(self, n_features, rp, C, tol, max_iter, cache_size, rng):
        self.rp, self.C, self.tol, self.max_iter, self.rng = rp, float(C), tol, max_iter, rng
        self.cache = ConstraintCache(cache_size)
        self.u = np.zeros(n_features)
        self.w = rp.weights(self.u)
        self.n_features = n_features
        self.n_optimize = 0
        self.gseen = np.empty(0)

    def restore(self, snapshot):
        """Load a cache snapshot (from a previous solve) and rebuild u and w from its alpha."""
        c, rp = self.cache, self.rp
        c.load(snapshot)
        data, ind, ptr = c.csr()
        self.u = K.scatter_alpha(data, ind, ptr, rp.s, c.ca[: c.rows], self.n_features)
        self.w = rp.weights(self.u)
        n, m = c.rows, c.n_examples
        loss = K.group_loss(data, ind, ptr, rp.s, c.cl[:n], self.w, c.cg[:n], c.gcap[:m], m)
        self._resync(0.5 * float(self.w @ self.w) + loss)

    def lower_bound(self):
        c = self.cache
        return self.rp.quad(self.u, self.w) + float(c.cl[: c.rows] @ c.ca[: c.rows])

    def explore(self, X, lm, ex_ptr, first_id):
        c, rp = self.cache, self.rp
        ind = X.indices.view(np.uint32)
        start, last_full = 0, -1
        while True:
            start, reason = SK.explore(
                X.data,
                ind,
                X.indptr,
                lm,
                ex_ptr,
                first_id,
                start,
                *c.kernel_arrays(),
                rp.s,
                self.u,
                self.w,
                rp.lo,
                rp.bounded,
                self.C,
                self.tol,
            )
            c.peak_rows = max(c.peak_rows, c.rows)
            if reason == SK.DONE:
                return
            self.n_optimize += 1
            if reason == SK.FULL:
                if start == last_full:
                    raise ValueError(
                        f"cache_size is too small: one constraint row of example {first_id + start}"
                        " does not fit in half of the cache"
                    )
                last_full = start
                self.optimize(evict=True)
                self.make_room()
                c.istate[4] = np.searchsorted(c.gid[: c.n_sorted], first_id + start)
            else:
                self.optimize()

    def optimize(self, evict=False):
        """Algorithm 1 on the cache, hot-started, to the tolerance; optionally evict non-SVs.

        Eviction (a compaction of the cache) runs when the cache is full and after each pass
        rather than after every optimization: the memory bound is the same and the many small
        optimizations of the first pass stay cheap.
        """
        c, rp = self.cache, self.rp
        n, m = c.rows, c.n_examples
        if n == 0:
            return
        data, ind, ptr = c.csr()
        grp = c.cg[:n]
        members = np.argsort(grp, kind="stable").astype(np.int64)
        gptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(grp, minlength=m), out=gptr[1:])
        cap, gsum = c.gcap[:m], c.gsum[:m]
        ub = c.fstate[0]
        for _ in range(self.max_iter):
            lb = self.lower_bound()
            if within_tol(ub, lb, self.tol):
                break
            gmax = np.zeros(m)
            if len(self.gseen) < n:
                self.gseen = np.empty(len(c.cl))
            K.epoch(
                data,
                ind,
                ptr,
                rp.s,
                c.cl[:n],
                cap,
                grp,
                gptr,
                members,
                c.csq[:n],
                self.rng.permutation(n),
                c.ca[:n],
                gsum,
                self.u,
                self.w,
                rp.lo,
                rp.bounded,
                True,
                gmax,
                self.gseen[:n],
            )
            gsum[:] = np.bincount(grp, weights=c.ca[:n], minlength=m)
            lb = self.lower_bound()
            ub_approx = 0.5 * float(self.w @ self.w) + float(cap @ gmax)
            if within_tol(ub_approx, lb, self.tol):
                ub = 0.5 * float(self.w @ self.w) + K.group_loss(
                    data, ind, ptr, rp.s, c.cl[:n], self.w, grp, cap, m
                )
        if evict:
            c.keep_rows(c.ca[:n] > 0)
        self._resync(ub)

    def make_room(self, free=0.5):
        """Drop the smallest-alpha support vectors until `free` of the cache is empty."""
        c, rp = self.cache, self.rp
        n = c.rows
        over_rows = n - int((1 - free) * len(c.cl))
        over_nnz = c.nnz - int((1 - free) * len(c.cd))
        if over_rows <= 0 and over_nnz <= 0:
            return
        order = np.argsort(c.ca[:n], kind="stable")
        lengths = np.diff(c.cp[: n + 1])[order]
        by_nnz = int(np.searchsorted(np.cumsum(lengths), over_nnz)) + 1 if over_nnz > 0 else 0
        drop_n = max(over_rows, by_nnz)
        drop = order[:drop_n]
        data, ind, ptr = c.csr()
        for r in drop:
            a = c.ca[r]
            K.row_axpy(data, ind, ptr, rp.s, self.u, self.u, rp.lo, False, r, -a)
            c.gsum[c.cg[r]] -= a
        keep = np.ones(n, dtype=bool)
        keep[drop] = False
        c.evicted_svs += int(np.count_nonzero(c.ca[:n][drop] > 0))
        self.w = rp.weights(self.u)
        c.keep_rows(keep)
        m, n = c.n_examples, c.rows
        data, ind, ptr = c.csr()
        loss = K.group_loss(data, ind, ptr, rp.s, c.cl[:n], self.w, c.cg[:n], c.gcap[:m], m)
        self._resync(0.5 * float(self.w @ self.w) + loss)

    def _resync(self, ub):
        """Exact Σ l̂ α and Σ φ (no drift from the incremental sums), and the cached UB."""
        c = self.cache
        c.fstate[0] = ub
        c.fstate[1] = float(c.cl[: c.rows] @ c.ca[: c.rows])
        c.fstate[2] = self.rp.quad(self.u, self.w)


def fit_structural_stream(
    source,
    *,
    chunk_rows=100_000,
    cache_size=256.0,
    passes=3,
    n_features=None,
    zero_based=False,
    C=1.0,
    tol=1e-3,
    max_iter=1000,
    nonneg=False,
    w0=None,
    reg_scale=None,
    random_state=0,
    callback: Callback | None = None,
    time_limit=None,
    warm_start=None,
) -> SolveResult:
    """Solve the shared-slack SVM over a stream of examples with a bounded cache.

    Parameters
    ----------
    source : path or callable
        A qid-grouped LIBSVM file (``l_ij qid:i idx:val ...``, each example's lines contiguous), or
        a callable returning a fresh iterator of ``(X, margins, qid)`` chunks (CSR, (rows,),
        (rows,)) for each pass, e.g. over memory-mapped arrays.
    chunk_rows : int
        Rows per chunk read from a file.
    cache_size : float
        Memory budget of the cache in MiB.
    passes : int
        Maximum number of exploration passes over the stream.
    n_features : int
        Dimension (required).
    zero_based : bool
        Index base of the file.
    C, tol, nonneg, w0, reg_scale, random_state, callback, time_limit
        As in `solvers.fit_structural` (C a scalar here).
    max_iter : int
        Maximum passes over the cache per optimization.
    warm_start : SolveResult, optional
        A previous result of this function on the same stream and options: its cache (support
        vectors and their alpha, in ``extra["cache"]``) is restored and w rebuilt from it.

    Returns
    -------
    SolveResult
        w (n_features,), alpha of the cached rows, lower_bound, upper_bound (exact, from a
        streaming pass), status CONVERGED when UB − LB ≤ tol · max(1, |UB|), n_iter (passes);
        extra: examples, cache rows, peak cache rows, evicted support vectors, cache bytes.
    """
    if n_features is None or int(n_features) < 1:
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    n_features = int(n_features)
    if int(passes) < 1:
        raise ValueError(f"passes must be >= 1, got {passes!r}")
    if not np.isscalar(C) or not C > 0:
        raise ValueError(f"C must be a positive scalar for the online mode, got {C!r}")
    if not tol > 0 or not cache_size > 0:
        raise ValueError(f"tol and cache_size must be > 0, got {tol!r} and {cache_size!r}")
    chunks = chunk_source(source, chunk_rows, n_features, zero_based)
    rp = Reparam(n_features, nonneg=nonneg, w0=w0, reg_scale=reg_scale)
    monitor = Monitor(callback, time_limit)
    state = _Online(
        n_features, rp, C, tol, int(max_iter), cache_size, np.random.default_rng(random_state)
    )
    if warm_start is not None:
        state.restore(warm_start.extra["cache"])
    status, ub, n_examples = Status.MAX_ITER, None, 0
    for it in range(1, int(passes) + 1):
        state.cache.fstate[3] = 0.0
        n_examples = 0
        for X, lm, ex in whole_examples(chunks(), n_features, rp):
            state.cache.istate[4] = 0
            state.explore(X, lm, ex, n_examples)
            n_examples += len(ex) - 1
        state.optimize(evict=True)
        lb = state.lower_bound()
        ub_approx = 0.5 * float(state.w @ state.w) + float(state.cache.fstate[3])
        ub = None
        if within_tol(ub_approx, lb, tol) or it == int(passes):
            ub = exact_upper_bound(chunks, n_features, rp, state.w, C)
        gap = (ub if ub is not None else ub_approx) - lb
        stop = monitor.report(
            Progress(
                it,
                monitor.elapsed(),
                gap,
                active=state.cache.rows,
                primal=ub,
                dual=lb,
                lower_bound=lb,
                upper_bound=ub,
                approx_upper_bound=ub_approx,
            )
        )
        if ub is not None and within_tol(ub, lb, tol):
            status = Status.CONVERGED
            break
        if stop is not None:
            status = stop
            break
    if ub is None:
        ub = exact_upper_bound(chunks, n_features, rp, state.w, C)
    c = state.cache
    return SolveResult(
        w=rp.to_original(state.w),
        bias=0.0,
        alpha=c.ca[: c.rows].copy(),
        n_iter=it,
        status=status,
        gap=ub - lb,
        primal=ub,
        dual=lb,
        history=monitor.history,
        lower_bound=lb,
        upper_bound=ub,
        extra={
            "examples": n_examples,
            "cache_rows": c.rows,
            "peak_cache_rows": c.peak_rows,
            "evicted_support_vectors": c.evicted_svs,
            "cache_optimizations": state.n_optimize,
            "cache_bytes": sum(a.nbytes for a in vars(c).values() if isinstance(a, np.ndarray)),
            "cache_example_ids": c.gid[c.cg[: c.rows]].copy(),
            "cache": c.snapshot(),
        },
    )


def exact_upper_bound(chunks, n_features, rp, w, C):
    """UB = primal of ŵ over the whole stream (one pass)."""
    loss = 0.0
    for X, lm, ex in whole_examples(chunks(), n_features, rp):
        loss += SK.chunk_loss(
            X.data, X.indices.view(np.uint32), X.indptr, lm, ex, rp.s, w, float(C)
        )
    return 0.5 * float(w @ w) + loss
