"""One binary problem on several cores: parallel dual coordinate descent over blocks of samples.

Problem: the dual of `solvers.binary.dcd` (hinge, squared hinge, squared error),
f(α) = ½‖Σ_i s_i α_i x̃_i‖² + g(α), g separable (g(α) = Σ_i ½ D_ii α_i² − |y_i| α_i on the box).

A round is one pass in which K threads run dual coordinate descent (shrinking) over the active
samples: the round draws one permutation of them from the solve's generator and deals it out in K
consecutive chunks, so every thread works on a fresh random subset. (Fixed blocks, each thread
always on the same samples, made "all of block 1, then all of block 2" the order of every pass,
a structured order under which coordinate descent converges several times more slowly near the
optimum, even run serially; dealing anew each round keeps the passes to a tol at the serial
count.) Two ways to share w̃:

Shared (the default; PASSCoDe-Wild, Hsieh, Yu, Dhillon, "PASSCoDe: parallel asynchronous stochastic
dual co-ordinate descent", ICML 2015). Every thread reads and updates the one w̃ without locks, so
each step sees the others' steps of the same round, as serial descent would: the passes to a given
tol stay close to the serial count. Two threads that update the same feature at the same instant
can lose one of the two additions (Numba has no atomic float add on the CPU; the bias entry,
which every row updates, goes through the compare-and-swap of `solvers._core.atomic`, and the
features through plain additions, as a locked addition costs tens of cycles per non-zero);
w̃ then drifts from Σ_i s_i α_i x̃_i by those lost additions. Rare as they are, their drift adds
up: left for 100 rounds, it took about 1.5× the serial passes to reach tol, on text-like and on
uniform sparse data alike (`benchmarks/bench_parallel_anatomy.py`). The driver therefore
rebuilds w̃ exactly from α every ``RESYNC_EVERY`` rounds (which kept the serial count; the
rebuild runs in storage order on all threads, a fraction of a round), before every
convergence check and before returning, wherever a round on several threads has run since the
last rebuild. The check that ends a solve sums the objectives in the same read-only pass.
Guarantee:
PASSCoDe-Wild converges to the optimum of a problem perturbed by the lost updates (its Theorem 4);
the rebuilds remove the perturbation, and the solve stops only when LIBLINEAR's rule
(M − m ≤ tol, |M| ≤ tol, |m| ≤ tol) holds on the rebuilt, consistent (w̃, α), measured by a parallel
read-only pass, so what is returned is certified exactly as the serial solver's answer is.
The order in which threads interleave is not fixed: results are not bit-for-bit repeatable.

Deterministic (``deterministic=True``; CoCoA+, Ma, Smith, Jaggi, Jordan, Richtárik, Takáč,
"Adding vs. averaging in distributed primal-dual optimization", ICML 2015). Every thread solves
the local subproblem

    min_Δ  g(α_b + Δ) + w̃ᵀA_bΔ + (σ′/2)‖A_bΔ‖²,       A_bΔ = Σ_{i ∈ b} s_i Δ_i x̃_i,

on its own u_b = w̃ + σ′Δw̃_b with curvature σ′‖x̃_i‖² + D_ii, and the round's changes are then
added, w̃ ← w̃ + Σ_b Δw̃_b. With Δf_b the local model's change, the true change of f is

    f(α + Δ) − f(α) = Σ_b Δf_b − (σ′/2) Σ_b‖Δw̃_b‖² + ½‖Σ_b Δw̃_b‖²,

so the local models bound f from above exactly when ‖Σ_b Δw̃_b‖² ≤ σ′ Σ_b ‖Δw̃_b‖². The driver
checks that after every round (one O(K·d) merge): a round that fails is undone (α restored from
saved values, w̃ unchanged) and σ′ grows by ``GROW`` up to K, where it always holds
(Cauchy–Schwarz); after ``RELAX_AFTER`` accepted rounds in a row it shrinks by ``RELAX``, down to 1.
Guarantee: every accepted round satisfies the upper bound on which the CoCoA+ analysis rests, so
its rates hold round by round (linear for the squared hinge and squared error, O(1/t) in the
duality gap for the hinge loss); f never increases. The blocks, seeds and merge order are fixed:
the same seed and thread count give identical results. Its price: where blocks are correlated
(dense or popular features) σ′ stays near K and a round does about 1/K of a serial pass's work.

Not chosen: Chiang, Lee, Lin (KDD 2016, LIBLINEAR's -m) parallelise the gradient computations of a
batch of coordinates and update the chosen ones serially, which scales only as far as most
coordinates need no update; PASSCoDe-Atomic (an atomic add per non-zero) measured slower than
the rebuilds, for the same passes.

Threads: at most ``n_jobs``, and fewer on small problems (``MIN_NNZ_PER_THREAD`` non-zeros per
thread, and enough non-zeros per thread that the merge stays a small part of a round), where a
round would be dominated by the merge and the threads' start-up: such sets run serially. The
shared rounds also want ``MIN_FEATURES_PER_THREAD`` features a thread: over a few dozen features
(dense low-dimensional data) every row writes the same few cache lines of w̃, which then bounce
between the cores at every step (50,000 × 30: 0.65–1.13× one thread on 2 threads, measured
before this rule). A machine too busy for all the threads to help drops some of them during a
shared solve (`solvers.binary.crowding`).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from solvers._core.progress import Status
from solvers.binary import crowding, kernels
from solvers.binary import parallel_kernels as pk
from solvers.binary.kernels import add_record_rows

MIN_NNZ_PER_THREAD = 300_000
MIN_FEATURES_PER_THREAD = 256
NNZ_PER_FEATURE_PER_THREAD = 8  # a round's merge costs K·d: keep it under ~1/8 of the pass
RELAX_AFTER = 10
RESYNC_EVERY = 4
GROW, RELAX = 1.5, 1.25


def available_threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on every platform
        return max(1, os.cpu_count() or 1)


def check_n_jobs(n_jobs) -> int:
    if n_jobs is None:
        return available_threads()
    if isinstance(n_jobs, bool) or int(n_jobs) != n_jobs or n_jobs < 1:
        raise ValueError(f"n_jobs must be a positive integer or None, got {n_jobs!r}")
    return int(n_jobs)


def threads_for(csr, n_kept: int, n_jobs: int, deterministic: bool = False) -> int:
    """Threads worth using on this problem: at most n_jobs, fewer when the work is small
    (``MIN_NNZ_PER_THREAD``), or w̃ too narrow to share (``MIN_FEATURES_PER_THREAD``);
    deterministic rounds, with a w̃ each, keep their O(K·d) merge under about
    1/``NNZ_PER_FEATURE_PER_THREAD`` of a round instead."""
    nnz = int(csr.data.shape[0]) * n_kept // max(csr.n_samples, 1)
    wanted = min(n_jobs, max(1, nnz // MIN_NNZ_PER_THREAD), max(1, n_kept // 1000))
    if not deterministic:
        wanted = min(wanted, max(1, csr.n_features // MIN_FEATURES_PER_THREAD))
    else:
        per_merge = NNZ_PER_FEATURE_PER_THREAD * (csr.n_features + 1)
        wanted = min(wanted, max(1, int(np.sqrt(nnz / per_merge))))
    return max(1, wanted)


def _chunks(index, size, n_threads):
    """``index[:size]`` cut into n_threads consecutive views of about equal length."""
    return _cut(index, (np.arange(n_threads + 1) * size) // n_threads)


def _in_storage_order(index, n_samples):
    """The distinct samples of ``index`` in increasing order, in O(n): a sort of 10M samples on
    one thread cost the final check of a 16-thread solve more than its pass."""
    if index.shape[0] == n_samples:  # every sample kept
        return np.arange(n_samples, dtype=index.dtype)
    kept = np.zeros(n_samples, dtype=np.bool_)
    kept[index] = True
    return np.flatnonzero(kept).astype(index.dtype)


def _cut(index, bounds):
    return [index[bounds[b] : bounds[b + 1]] for b in range(bounds.shape[0] - 1)]


class _Round:
    """The threads, their vectors and σ′ of one parallel solve.

    Every round draws one permutation of the active samples and deals it out in consecutive
    chunks, one per thread: each thread's samples are a fresh random subset. Fixed blocks (each
    thread always on the same samples, shuffled within) converge far more slowly near the
    optimum, even run one after the other on one thread: the order "all of block 1, then all of
    block 2" repeated every pass is a structured order of the kind coordinate descent suffers
    from, and it cost the shared rounds 3–4× the serial passes at tol 0.01."""

    def __init__(self, state, n_threads, pool, deterministic):
        self.state, self.pool = state, pool
        self.shared = not deterministic
        self.n_threads = n_threads
        self.rounds_since_sync = 0
        self.index = state.index  # the active samples first, then the shrunk ones
        self.n_active = self.index.shape[0]
        width = 0 if self.shared else state.w.shape[0]
        self.U = np.empty((n_threads, width))
        self.total = np.empty(width)
        self.saved = np.empty(0 if self.shared else state.csr.n_samples)
        self.spare = None  # the chunks of a round, dealt from the index
        self.kept_in_order = None  # the kept samples sorted, for the read-only passes
        self.partial_w = None  # the other threads' sums of `resync`
        self.sigma = 1.0
        self.accepted_in_row = 0
        self.crowds = crowding.CrowdWatch()
        self.exact = True  # w̃ = Σ_i s_i α_i x̃_i: no round on several threads since it was built
        self.serial_round = False  # the last round ran on one thread over an exact w̃
        self.rounds_done = 0
        self.checked = (-1, None)  # (rounds done, objective sums) of the last `full_range`

    @property
    def active(self):
        return [self.n_active]

    def _map(self, fn, items):
        futures = [self.pool.submit(fn, *item) for item in items[1:]]
        first = fn(*items[0])
        return [first] + [f.result() for f in futures]

    def _deal(self, seeds, K):
        """Cut the active samples into one random chunk per thread; returns the chunks (views
        of ``spare``, filled by `_fill`) and the pieces' bounds in the index.

        A serial Fisher–Yates shuffle of all of them would cost the round a random access per
        sample on one thread, which on 10M samples weighs as much as a round's share of the pass
        on 16 threads. So the threads shuffle contiguous pieces of the index side by side, and each
        then takes its share of every piece and shuffles it (`_fill`): chunk b holds a random
        1/K of every piece, a stratified random partition of the active samples."""
        n = self.n_active
        if K == 1:
            kernels.shuffle_prefix(self.index, n, int(seeds[0]))
            return [self.index[:n]], None
        pieces = (np.arange(K + 1) * n) // K
        self._map(
            lambda piece, seed: kernels.shuffle_prefix(piece, piece.shape[0], seed),
            [(piece, int(seeds[p])) for p, piece in enumerate(_cut(self.index, pieces))],
        )
        sizes = np.diff(pieces)
        shares = (np.arange(K + 1)[:, None] * sizes) // K  # share b of piece p: rows b, b + 1
        bounds = np.concatenate(([0], np.cumsum((shares[1:] - shares[:-1]).sum(axis=1))))
        if self.spare is None:
            self.spare = np.empty_like(self.index)
        return _cut(self.spare, bounds), pieces

    def _fill(self, chunk, pieces, b, seed):
        """Thread b's chunk: its share of every piece, shuffled."""
        if pieces is not None:
            pk.gather_share(self.index, pieces, b, pieces.shape[0] - 1, chunk)
            kernels.shuffle_prefix(chunk, chunk.shape[0], seed)

    def _regroup(self, chunks, kept):
        """Each chunk's still-active samples to the front of the index, its shrunk ones after
        them (the samples shrunk in earlier rounds stay where they are, behind)."""
        if len(chunks) > 1:  # one chunk is the index itself, already in that order
            at = 0
            for chunk, k in zip(chunks, kept, strict=True):
                self.index[at : at + k] = chunk[:k]
                at += k
            for chunk, k in zip(chunks, kept, strict=True):
                self.index[at : at + chunk.shape[0] - k] = chunk[k:]
                at += chunk.shape[0] - k
        self.n_active = int(sum(kept))

    def run(self, seeds, bars):
        """One round; returns (accepted, active sizes before, M, m)."""
        st = self.state
        before = self.active
        K = self.n_threads
        if self.shared:  # shrinking can leave too few samples for threads to pay: fewer then
            K = threads_for(st.csr, self.n_active, K)
        chunks, pieces = self._deal(seeds, K)
        sigma = 1.0 if self.shared else self.sigma

        watched = self.shared and self.n_threads > 1  # else no rule reads the threads' shares

        def one(b):
            started = crowding.thread_clocks() if watched else None
            seg = chunks[b]
            self._fill(seg, pieces, b, int(seeds[self.n_threads + b]))
            u = st.w
            if not self.shared:
                u = self.U[b]
                u[:] = st.w
            out = pk.block_epoch(
                st.csr, st.bias, st.record, u, seg, seg.shape[0], bars, sigma, self.saved, 0,
                st.long_rows,
            )  # fmt: skip
            return (*out, None if started is None else crowding.share_on_a_core(started))

        self.serial_round = self.exact and K == 1  # before a fallback can change either
        outs = self._map(one, [(b,) for b in range(K)])
        self.rounds_done += 1
        self.exact = self.exact and (K == 1 or not self.shared)
        self._watch_crowding(K, [o[3] for o in outs])
        M, m = max(o[1] for o in outs), min(o[2] for o in outs)
        if self.shared:
            self._regroup(chunks, [o[0] for o in outs])
            self.rounds_since_sync += K > 1  # one thread alone loses no addition
            if self.rounds_since_sync >= RESYNC_EVERY:
                self.resync()
            return True, before, M, m
        together, apart = pk.merge(st.w, self.U, self.sigma, self.total)
        if together <= self.sigma * apart * (1 + 1e-12) + 1e-300:
            pk.add_into(st.w, self.total)
            self._regroup(chunks, [o[0] for o in outs])
            self.accepted_in_row += 1
            if self.accepted_in_row >= RELAX_AFTER and self.sigma > 1.0:
                self.sigma = max(1.0, self.sigma / RELAX)
                self.accepted_in_row = 0
            return True, before, M, m
        rec, width = st.record.values, st.record.width
        for seg in chunks:
            pk.restore_alpha(rec, width, seg, seg.shape[0], self.saved, 0)
        self.sigma = min(float(self.n_threads), GROW * self.sigma)
        self.accepted_in_row = 0
        return False, before, np.inf, -np.inf

    def _watch_crowding(self, K, shares):
        """Fewer threads for the remaining rounds when the machine is too busy for all of them to
        help (`solvers.binary.crowding`). Down to one thread, w̃ is rebuilt once: no update can be
        lost from then on, so the rounds are serial passes, judged by the serial rule without
        further rebuilds. Not in the deterministic mode, whose result must not depend on the
        machine's load."""
        if not self.shared or self.n_threads == 1:
            return
        self.n_threads = self.crowds.threads_after(self.n_threads, K, shares)
        if self.n_threads == 1:
            self.resync()  # no addition can be lost from now on: w̃ stays exact

    def resync(self):
        """w̃ ← Σ_i s_i α_i x̃_i exactly (a shared-mode round may lose a racing update): each
        thread sums a range of rows in storage order, into w̃ or a vector of its own."""
        st = self.state
        if not self.shared or self.exact:
            return
        if self.partial_w is None:
            self.partial_w = np.empty((self.n_threads - 1, st.w.shape[0]))
        outs = [st.w] + list(self.partial_w[: self.n_threads - 1])
        for out in outs:
            out[:] = 0.0
        self._map(
            lambda first, stop, out: add_record_rows(st.csr, st.bias, st.record, first, stop, out),
            [(*bounds, out) for bounds, out in zip(self._row_ranges(), outs, strict=True)],
        )  # each thread reads its rows' s_i α_i from the record: no n-length temporary
        for out in outs[1:]:
            pk.add_into(st.w, out)
        self.rounds_since_sync = 0
        self.exact = True

    def _row_ranges(self):
        """[first, stop) ranges of rows with about equal non-zeros, one per thread."""
        indptr = self.state.csr.indptr
        targets = (np.arange(1, self.n_threads) * int(indptr[-1])) // self.n_threads
        cuts = np.searchsorted(indptr, targets).tolist()
        bounds = [0, *cuts, indptr.shape[0] - 1]
        return list(zip(bounds[:-1], bounds[1:], strict=True))

    def objectives(self):
        """(primal, dual) at w̃ as `solvers.binary.state.SolveState.objectives`, the threads over
        ranges of rows. w̃ is rebuilt first where a round may have lost additions: the
        objectives describe (w̃, α) as the solve returns them, and the driver reports the last
        ones it was given rather than measure again. Right after `full_range` (the check that
        ends a solve) its pass has summed them already."""
        self.resync()
        st = self.state
        checked_at, sums = self.checked
        if checked_at != self.rounds_done:
            sums = np.sum(self._map(
                lambda first, stop: kernels.objective_sums(
                    st.csr, st.bias, st.record, st.C, st.w, st.loss_code, first, stop
                ),
                self._row_ranges(),
            ), axis=0)  # fmt: skip
        primal, dual = kernels.objectives_from_sums(st.w, *sums)
        return float(primal), float(dual)

    def confirm(self, M, m):
        """The (M, m) that judge a full round that met tol: the round's own when w̃ was exact and
        one thread updated it all round (as the serial solver judges its passes), else
        `full_range` (the round that fell back to one thread measured its own on the old w̃)."""
        return (M, m) if self.serial_round else self.full_range()

    def full_range(self):
        """M and m over every kept sample at the merged w̃, the threads in parallel; the same
        pass sums the objectives' terms for `objectives` (a solve that converges asks for both)."""
        self.resync()
        st = self.state
        if self.kept_in_order is None:  # rows in storage order: a pass several times faster
            self.kept_in_order = _in_storage_order(self.index, st.csr.n_samples)
        kept = self.kept_in_order
        outs = self._map(
            lambda seg: pk.block_check(st.csr, st.bias, st.record, st.C, st.w, st.loss_code, seg),
            [(seg,) for seg in _chunks(kept, kept.shape[0], self.n_threads)],
        )
        self.checked = (self.rounds_done, np.sum([o[2:] for o in outs], axis=0))
        return max(o[0] for o in outs), min(o[1] for o in outs)

    def restore_all(self):
        self.n_active = self.index.shape[0]


def run_parallel(state, monitor, rng, tol, max_iter, shrinking, objective_every, stall, n_threads,
                 rules, deterministic):  # fmt: skip
    """The outer loop of `solvers.binary.dcd._run`, with rounds instead of passes; ``rules`` holds
    the driver's (progress, with_objectives, meets, gap) functions, so both loops share them."""
    progress, with_objectives, meets, gap_of = rules
    n_kept = state.index.shape[0]
    pool = ThreadPoolExecutor(max_workers=n_threads - 1)
    try:
        rounds = _Round(state, n_threads, pool, deterministic)
        M_bar, m_bar = np.inf, -np.inf
        status, M, m = Status.MAX_ITER, np.inf, -np.inf
        work = 0.0
        n_iter = 0
        for n_iter in range(1, max_iter + 1):
            seeds = rng.integers(0, 2**63, size=2 * n_threads)
            bars = (M_bar, m_bar) if shrinking else (np.inf, -np.inf)
            accepted, before, M_new, m_new = rounds.run(seeds, bars)
            if accepted:
                M, m = M_new, m_new
            active = sum(rounds.active)
            work += sum(before) / n_kept
            met = accepted and meets(M, m, tol)
            converged = False
            if met and sum(before) == n_kept and active == n_kept:
                M, m = rounds.confirm(M, m)  # exact, on the merged w̃
                converged = meets(M, m, tol)
            record = progress(monitor, n_iter, M, m, active)
            if converged or objective_every == 1 or work >= objective_every - 1e-9:
                work = 0.0  # the last record carries them: the driver then needs no pass
                record = with_objectives(record, *rounds.objectives())
            stop = monitor.report(record)
            if converged:
                return Status.CONVERGED, n_iter, M, m
            if stop is not None:
                rounds.resync()
                return stop, n_iter, M, m
            if not accepted:
                continue
            if stall is not None and n_iter < max_iter and stall.stalled(gap_of(M, m)):
                rounds.resync()
                return None, n_iter, M, m
            if met or active == 0:
                rounds.restore_all()
                M_bar, m_bar = np.inf, -np.inf
            else:
                M_bar = M if M > 0 else np.inf
                m_bar = m if m < 0 else -np.inf
        rounds.resync()
        return status, n_iter, M, m
    finally:
        pool.shutdown()
