"""Online (out-of-core) shared-slack SVM: the cache algorithm of Ramanan's section 4.

Same problem as `solvers.structural.batch` (one loss weight C for every example). The examples
stream from disk in chunks; only a cache of constraint rows lives in memory, bounded by
``cache_size``. Algorithm 2 of the paper: for each new example take its most violated constraint
(largest gradient g = l̂ − ŵ·x̂); when g > 0 add it to the cache, raise the running upper bound UB
of the cached problem by C·g and take one dual step on it; when UB − LB > tol · max(1, |UB|),
optimize the cache (Algorithm 1, hot-started) to the tolerance. Rows whose alpha is 0 are evicted
when the cache is full and after each pass (the paper evicts after every optimization; deferring it
keeps the many small optimizations of a first pass cheap, within the same memory bound). LB = F(α)
is a lower bound of the full problem (alpha = 0 off the cache); after a pass, UB' (from the
gradients seen while exploring) decides whether to spend a streaming pass on the exact UB = primal
of ŵ over all the data; the solve stops once that certifies the tolerance, or after ``passes``. When
the support vectors alone overflow the cache, those with the smallest alpha are dropped (their alpha
set to 0: LB stays a valid bound) and counted in ``extra["evicted_support_vectors"]``. The result's
``gap`` (UB − LB) and ``duality_gap`` use the exact UB of the returned ŵ.
"""

from __future__ import annotations

import numpy as np

from solvers._core.params import check_max_iter, check_tol
from solvers._core.progress import (
    Callback,
    Monitor,
    Progress,
    SolveResult,
    Status,
    relative_duality_gap,
)
from solvers._core.sparse import dot, sq_norm
from solvers.structural import kernels
from solvers.structural import stream_kernels as explore_kernels
from solvers.structural.cache import (
    CACHED_UB,
    CURSOR,
    EXPLORED_LOSS,
    MARGIN_SUM,
    N_SORTED,
    PHI_SUM,
    ConstraintCache,
)
from solvers.structural.chunks import chunk_source, whole_examples
from solvers.structural.reparam import Reparam, within_tol

# Inside a pass, a record (the lower bound so far) once this many seconds have passed since the
# last one, between two optimization epochs or two chunks: the monitor's time_limit and the
# callback's stop are heard there. With a tiny tol each optimization of the cache ran max_iter
# epochs, and a pass over 15,000 rows lasted minutes past a time_limit of 5 s.
_PASS_REPORT_S = 1.0


class _Stop(Exception):  # noqa: N818 - a signal, not an error
    """A report inside a pass asked to stop; ``status`` says why."""

    def __init__(self, status):
        super().__init__(status)
        self.status = status


def solve_structural_stream(
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
        a callable returning a fresh iterator of ``(X, margins, qid)`` chunks ((rows,
        n_features) matrices the input door takes, (rows,), (rows,)) for each pass, e.g. over
        memory-mapped arrays.
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
        As in `solvers.solve_structural` (C a scalar here).
    max_iter : int
        Maximum passes over the cache per optimization.
    warm_start : SolveResult, optional
        A previous result of this function on the same stream and options: its cache (support
        vectors and their alpha, in ``extra["cache"]``) is restored and w rebuilt from it.

    Returns
    -------
    SolveResult
        w (n_features,), alpha of the cached rows, lower_bound, upper_bound (exact, from a
        streaming pass), gap = UB − LB, duality_gap, status CONVERGED when
        UB − LB ≤ tol · max(1, |UB|), n_iter (passes); extra: examples, cache rows, peak cache
        rows, evicted support vectors, cache bytes.
    """
    monitor = Monitor(callback, time_limit)  # the clock starts with the call
    if n_features is None or int(n_features) < 1:
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    n_features = int(n_features)
    passes = check_max_iter(passes, "passes")
    if not np.isscalar(C) or not C > 0:
        raise ValueError(f"C must be a positive scalar for the online mode, got {C!r}")
    tol, max_iter = check_tol(tol), check_max_iter(max_iter)
    if not cache_size > 0:
        raise ValueError(f"cache_size must be > 0, got {cache_size!r}")
    chunks = chunk_source(source, chunk_rows, n_features, zero_based)
    reparam = Reparam(n_features, nonneg=nonneg, w0=w0, reg_scale=reg_scale)
    state = _Online(
        n_features, reparam, C, tol, max_iter, cache_size, np.random.default_rng(random_state)
    )
    state.monitor = monitor
    if warm_start is not None:
        state.restore(warm_start.extra["cache"])
    status, n_iter, lb, ub, ub_approx, n_examples = _run(state, chunks, monitor, passes, tol)
    if ub is None:
        ub = exact_upper_bound(chunks, n_features, reparam, state.w, C)
    if status is not Status.CONVERGED and within_tol(ub, lb, tol):
        status = Status.CONVERGED
    final = monitor.conclude(_progress(n_iter, monitor, state.cache.rows, lb, ub, ub_approx))
    return _result(state, reparam, status, n_iter, final, monitor, n_examples)


fit_structural_stream = solve_structural_stream  # the name this solver had first; same function


def _run(state, chunks, monitor, passes, tol):
    """Exploration passes until the exact bounds certify tol or a budget ends."""
    status, ub, ub_approx, lb, n_examples, n_iter = Status.MAX_ITER, None, None, 0.0, 0, 0
    sums = state.cache.arrays.sums
    for n_iter in range(1, passes + 1):
        sums[EXPLORED_LOSS] = 0.0
        n_examples = 0
        state.n_iter = n_iter
        try:
            for X, margins, ex in whole_examples(chunks(), state.n_features, state.reparam):
                state.cache.arrays.counts[CURSOR] = 0
                state.explore(X, margins, ex, n_examples)
                n_examples += len(ex) - 1
                state.heed()
            state.optimize(evict=True)
        except _Stop as stop:  # the pass's gradients bound nothing: the exact UB decides
            return stop.status, n_iter, state.lower_bound(), None, None, n_examples
        lb = state.lower_bound()
        ub_approx = 0.5 * sq_norm(state.w) + float(sums[EXPLORED_LOSS])
        ub = None
        if within_tol(ub_approx, lb, tol) or n_iter == passes:
            ub = exact_upper_bound(chunks, state.n_features, state.reparam, state.w, state.C)
        stop = monitor.report(_progress(n_iter, monitor, state.cache.rows, lb, ub, ub_approx))
        if ub is not None and within_tol(ub, lb, tol):
            return Status.CONVERGED, n_iter, lb, ub, ub_approx, n_examples
        if stop is not None:
            return stop, n_iter, lb, ub, ub_approx, n_examples
    return status, n_iter, lb, ub, ub_approx, n_examples


def _progress(n_iter, monitor, active, lb, ub, ub_approx):
    return Progress(
        n_iter,
        monitor.elapsed(),
        (ub if ub is not None else ub_approx) - lb,
        active=active,
        primal=ub,
        dual=lb,
        duality_gap=relative_duality_gap(ub, lb),
        lower_bound=lb,
        upper_bound=ub,
        approx_upper_bound=ub_approx,
    )


def _result(state, reparam, status, n_iter, final, monitor, n_examples):
    c = state.cache
    return SolveResult(
        w=reparam.to_original(state.w),
        bias=0.0,
        alpha=c.row_view("alpha").copy(),
        n_iter=n_iter,
        status=status,
        gap=final.gap,
        primal=final.upper_bound,
        dual=final.lower_bound,
        history=monitor.history,
        lower_bound=final.lower_bound,
        upper_bound=final.upper_bound,
        duality_gap=final.duality_gap,
        extra={
            "examples": n_examples,
            "cache_rows": c.rows,
            "peak_cache_rows": c.peak_rows,
            "evicted_support_vectors": c.evicted_svs,
            "cache_optimizations": state.n_optimize,
            "cache_bytes": c.nbytes,
            "cache_example_ids": c.arrays.example_id[c.row_view("slot")].copy(),
            "cache": c.snapshot(),
        },
    )


class _Online:
    """State and steps of the online solver."""

    def __init__(self, n_features, reparam, C, tol, max_iter, cache_size, rng):
        self.reparam, self.C, self.tol = reparam, float(C), tol
        self.max_iter, self.rng = max_iter, rng
        self.cache = ConstraintCache(cache_size, n_features)
        self.u = np.zeros(n_features)
        self.w = reparam.weights(self.u)
        self.n_features = n_features
        self.n_optimize = 0
        self.last_gradient = np.empty(0)
        self.monitor: Monitor | None = None
        self.n_iter = 0  # the pass under way
        self.last_report = 0.0

    def heed(self):
        """Inside a pass, every _PASS_REPORT_S: a record of the lower bound so far; raises
        _Stop when the monitor answers with a status (time_limit, the callback's stop)."""
        m = self.monitor
        if m is None or m.elapsed() - self.last_report < _PASS_REPORT_S:
            return
        self.last_report = m.elapsed()
        lb = self.lower_bound()
        stop = m.report(
            Progress(
                self.n_iter, m.elapsed(), None, active=self.cache.rows, dual=lb, lower_bound=lb
            )
        )
        if stop is not None:
            raise _Stop(stop)

    def _rows(self, csr):
        return kernels.ScaledRows(csr, self.reparam.s)

    def _weights(self):
        return kernels.Weights(self.u, self.w, self.reparam.lo, self.reparam.bounded)

    def _cached_loss(self):
        """The loss term of the cached problem's exact UB."""
        c = self.cache
        return kernels.group_loss(
            self._rows(c.csr()), c.row_view("margins"), self.w, c.row_view("slot"),
            c.example_view("example_C"), c.n_examples,
        )  # fmt: skip

    def restore(self, snapshot):
        """Load a cache snapshot (from a previous solve) and rebuild u and w from its alpha."""
        c = self.cache
        c.load(snapshot)
        self.u = kernels.scatter_alpha(self._rows(c.csr()), c.row_view("alpha"))
        self.w = self.reparam.weights(self.u)
        self._resync(0.5 * sq_norm(self.w) + self._cached_loss())

    def lower_bound(self):
        c = self.cache
        return self.reparam.quad(self.u, self.w) + dot(c.row_view("margins"), c.row_view("alpha"))

    def explore(self, X, margins, ex_ptr, first_id):
        c = self.cache
        start, last_full = 0, -1
        while True:
            start, reason = explore_kernels.explore(
                self._rows(X), margins, ex_ptr, first_id, start, c.arrays,
                self._rows(c.csr(full_capacity=True)), self._weights(), self.C, self.tol,
            )  # fmt: skip
            c.peak_rows = max(c.peak_rows, c.rows)
            if reason == explore_kernels.DONE:
                return
            self.n_optimize += 1
            if reason == explore_kernels.FULL:
                if start == last_full:
                    raise ValueError(
                        f"cache_size is too small: one constraint row of example {first_id + start}"
                        " does not fit in half of the cache"
                    )
                last_full = start
                self.optimize(evict=True)
                self.make_room()
                sorted_ids = c.arrays.example_id[: int(c.arrays.counts[N_SORTED])]
                c.arrays.counts[CURSOR] = np.searchsorted(sorted_ids, first_id + start)
            else:
                self.optimize()

    def optimize(self, evict=False):
        """Algorithm 1 on the cache, hot-started, to the tolerance; optionally evict non-SVs.

        Eviction (a compaction of the cache) runs when the cache is full and after each pass
        rather than after every optimization: the memory bound is the same and the many small
        optimizations of the first pass stay cheap.
        """
        c = self.cache
        n, m = c.rows, c.n_examples
        if n == 0:
            return
        rows = self._rows(c.csr())
        slot = c.row_view("slot")
        members = np.argsort(slot, kind="stable").astype(np.int64)
        group_ptr = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(np.bincount(slot, minlength=m), out=group_ptr[1:])
        groups = kernels.Groups(slot, group_ptr, members, c.example_view("example_C"))
        duals = kernels.Duals(c.row_view("alpha"), c.example_view("example_alpha"))
        margins, sq_norms = c.row_view("margins"), c.row_view("sq_norms")
        ub = c.arrays.sums[CACHED_UB]
        if len(self.last_gradient) < n:
            self.last_gradient = np.empty(c.row_capacity)
        for _ in range(self.max_iter):
            if within_tol(ub, self.lower_bound(), self.tol):
                break
            self.heed()
            max_gradient = np.zeros(m)
            kernels.epoch(
                rows, margins, groups, sq_norms, self.rng.permutation(n), duals,
                self._weights(), True, max_gradient, self.last_gradient[:n],
            )  # fmt: skip
            duals.alpha_sums[:] = np.bincount(slot, weights=duals.alpha, minlength=m)
            ub_approx = 0.5 * sq_norm(self.w) + dot(groups.C, max_gradient)
            if within_tol(ub_approx, self.lower_bound(), self.tol):
                ub = 0.5 * sq_norm(self.w) + self._cached_loss()
        if evict:
            c.keep_rows(c.row_view("alpha") > 0)
        self._resync(ub)

    def make_room(self, free=0.5):
        """Drop the smallest-alpha support vectors until `free` of the cache is empty."""
        c = self.cache
        n = c.rows
        over_rows = n - int((1 - free) * c.row_capacity)
        over_nnz = c.nnz - int((1 - free) * c.nnz_capacity)
        if over_rows <= 0 and over_nnz <= 0:
            return
        alpha = c.row_view("alpha")
        order = np.argsort(alpha, kind="stable")
        lengths = np.diff(c.csr().indptr)[order]
        by_nnz = int(np.searchsorted(np.cumsum(lengths), over_nnz)) + 1 if over_nnz > 0 else 0
        drop = order[: max(over_rows, by_nnz)]
        rows = self._rows(c.csr())
        unbounded = kernels.Weights(self.u, self.u, self.reparam.lo, False)
        for r in drop:
            kernels.add_row(rows, unbounded, r, -alpha[r])
            c.arrays.example_alpha[c.arrays.slot[r]] -= alpha[r]
        keep = np.ones(n, dtype=bool)
        keep[drop] = False
        c.evicted_svs += int(np.count_nonzero(alpha[drop] > 0))
        self.w = self.reparam.weights(self.u)
        c.keep_rows(keep)
        self._resync(0.5 * sq_norm(self.w) + self._cached_loss())

    def _resync(self, ub):
        """Exact Σ l̂ α and Σ φ (no drift from the incremental sums), and the cached UB."""
        c = self.cache
        sums = c.arrays.sums
        sums[CACHED_UB] = ub
        sums[MARGIN_SUM] = dot(c.row_view("margins"), c.row_view("alpha"))
        sums[PHI_SUM] = self.reparam.quad(self.u, self.w)


def exact_upper_bound(chunks, n_features, reparam, w, C):
    """UB = primal of ŵ over the whole stream (one pass)."""
    loss = 0.0
    for X, margins, ex in whole_examples(chunks(), n_features, reparam):
        rows = kernels.ScaledRows(X, reparam.s)
        loss += explore_kernels.chunk_loss(rows, margins, ex, w, float(C))
    return 0.5 * sq_norm(w) + loss
