"""One binary problem on several threads (`solvers.binary.parallel`): the same certified optimum.

The sets here are small, so the solver would pick one thread by itself; the tests force the
thread count to exercise the parallel rounds (on 2 cores, 3 threads also test oversubscription).
"""

import threading

import numpy as np
import pytest
import scipy.sparse as sp

from solvers._core.problem import csr_arrays
from solvers._core.progress import Status
from solvers.binary import crowding, parallel, solve_binary
from solvers.estimators import LinearSVC
from tests.solvers._binary_helpers import augmented, dual, load, primal, synthetic, w_tilde_of
from tests.solvers.test_binary_optimality import TIGHT, _check_certified


@pytest.fixture
def forced_threads(monkeypatch):
    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)
    # a busy test machine must not send the rounds to one thread
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", 0.0)


@pytest.fixture
def chunk_sizes(monkeypatch):
    """The threads' rounds run one after the other; the size of every chunk dealt is recorded."""
    sizes = []
    epoch = parallel.pk.block_epoch

    def recording(X, bias, record, u, index, active_size, *rest):
        sizes.append(active_size)
        return epoch(X, bias, record, u, index, active_size, *rest)

    monkeypatch.setattr(parallel.pk, "block_epoch", recording)
    monkeypatch.setattr(parallel._Round, "_map", lambda self, fn, items: [fn(*i) for i in items])
    return sizes


def text_like(n=3000, d=500, per_row=20, seed=0):
    """Rows of positive values over features of Zipf-like popularity (a few in most rows),
    unit-norm, labelled by a hidden linear model: the correlated rows of bag-of-words data."""
    rng = np.random.default_rng(seed)
    popularity = np.arange(1, d + 1) ** -1.1
    cols = rng.choice(d, size=(n, per_row), p=popularity / popularity.sum())
    X = sp.csr_matrix(
        (rng.random(n * per_row) + 0.5, cols.ravel(), np.arange(0, n * per_row + 1, per_row)),
        shape=(n, d),
    )
    X.sum_duplicates()
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1))))
    score = X @ rng.standard_normal(d)
    return X, np.where(score > np.median(score), 1.0, -1.0)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_threads_need_no_more_passes_than_one(forced_threads, chunk_sizes, loss):
    # Run one after the other, two threads' rounds are serial passes in the order the rounds
    # deal: a fresh permutation of all active samples cut in two. Fixed blocks, each shuffled
    # apart, needed several times the serial passes on such correlated rows (160 against 23).
    X, y = text_like()
    common = dict(loss=loss, tol=1e-4, max_iter=100_000, newton=False)
    one = solve_binary(X, y, **common)
    two = solve_binary(X, y, n_jobs=2, **common)
    assert one.status == two.status == "converged"
    assert two.n_iter <= 1.3 * one.n_iter + 2, (two.n_iter, one.n_iter)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_lost_additions_do_not_slow_the_rounds(forced_threads, chunk_sizes, monkeypatch, loss):
    # Threads that add to one entry of w̃ at the same instant lose one of the additions. The
    # rounds here run one after the other, and each thread's pass loses a few of its own, on
    # purpose: the rebuilds of w̃ from α every few rounds keep the passes at the serial count.
    rng = np.random.default_rng(0)
    epoch = parallel.pk.block_epoch

    def losing(X, bias, record, u, index, active_size, *rest):
        before = u.copy()
        out = epoch(X, bias, record, u, index, active_size, *rest)
        lost = rng.choice(u.shape[0], size=5, replace=False)
        u[lost] = before[lost]  # those features' additions of this pass are lost
        return out

    monkeypatch.setattr(parallel.pk, "block_epoch", losing)
    X, y = text_like(seed=1)
    common = dict(loss=loss, tol=1e-4, max_iter=100_000, newton=False)
    one = solve_binary(X, y, **common)
    two = solve_binary(X, y, n_jobs=2, **common)
    assert two.status == "converged"
    _check_certified(X, y, two, 1.0, loss, 0.0, 1e-4)
    assert two.n_iter <= 1.3 * one.n_iter + 2, (two.n_iter, one.n_iter)


@pytest.mark.parametrize("stop", ["max_iter", "stopped"])
def test_objectives_reported_after_lost_additions_are_those_of_the_returned_state(
    forced_threads, monkeypatch, stop
):
    # A solve that ends before it converges reports the objectives its last round computed; with
    # lost additions in that round they must be those of the rebuilt w̃ it returns, not of the
    # drifted one (the duality gap would describe another pair).
    epoch = parallel.pk.block_epoch

    def losing(X, bias, record, u, *rest):
        out = epoch(X, bias, record, u, *rest)
        u[0] += 0.05  # as if a racing addition to feature 0 were lost
        return out

    monkeypatch.setattr(parallel.pk, "block_epoch", losing)
    X, y = text_like(seed=2)
    common = dict(loss="squared_hinge", bias=1.0, tol=1e-6, newton=False, n_jobs=2,
                  objective_every=1)  # fmt: skip
    if stop == "max_iter":
        result = solve_binary(X, y, max_iter=3, **common)
    else:
        calls = []
        result = solve_binary(X, y, max_iter=100, callback=lambda p: len(calls) < 2
                              and not calls.append(p), **common)  # fmt: skip
    assert result.status == stop
    w_tilde = w_tilde_of(result, 1.0)
    sign = np.where(y >= 0, 1.0, -1.0)
    np.testing.assert_allclose(w_tilde, augmented(X, 1.0).T @ (sign * result.alpha), atol=1e-9)
    assert result.primal == pytest.approx(primal(X, y, w_tilde, 1.0, "squared_hinge", 1.0),
                                          rel=1e-9)  # fmt: skip
    C = np.full(y.shape, 1.0)
    assert result.dual == pytest.approx(dual(result.alpha, y, w_tilde, C, "squared_hinge"),
                                        rel=1e-9)  # fmt: skip


def test_every_round_deals_each_active_sample_to_one_thread(forced_threads, monkeypatch):
    dealt = []
    epoch = parallel.pk.block_epoch

    def recording(X, bias, record, u, index, active_size, *rest):
        dealt.append(np.array(index[:active_size]))
        return epoch(X, bias, record, u, index, active_size, *rest)

    monkeypatch.setattr(parallel.pk, "block_epoch", recording)
    X, y = synthetic(n=2003, d=100, density=0.05, seed=5)
    C = np.ones(y.shape[0])
    C[::10] = 0.0  # dropped rows are never dealt
    solve_binary(X, y, C=C, tol=1e-3, max_iter=3, n_jobs=3, shrinking=False, newton=False)
    kept = np.flatnonzero(C > 0)
    assert len(dealt) == 9
    for first in range(0, 9, 3):
        chunks = dealt[first : first + 3]
        np.testing.assert_array_equal(np.sort(np.concatenate(chunks)), kept)
        assert max(map(len, chunks)) - min(map(len, chunks)) <= 3  # one per piece at most
    assert not np.array_equal(dealt[0], dealt[3])  # a fresh deal every round


def test_rounds_over_few_active_samples_run_on_one_thread(monkeypatch):
    # enough non-zeros for two threads at first; shrinking then leaves rounds whose samples
    # would not pay for them (`threads_for` on the active set), and those run on one thread
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", 0.0)
    rounds = []
    deal = parallel._Round._deal

    def recording(self, seeds, K):
        rounds.append((self.n_active, K))
        return deal(self, seeds, K)

    monkeypatch.setattr(parallel._Round, "_deal", recording)
    X, y = synthetic(n=40_000, d=1000, density=0.02, seed=6)
    result = solve_binary(X, y, tol=1e-3, n_jobs=2, newton=False)
    assert result.status is Status.CONVERGED
    _check_certified(X, y, result, 1.0, "squared_hinge", 0.0, 1e-3)
    enough = 2 * parallel.MIN_NNZ_PER_THREAD / (X.nnz / X.shape[0])  # samples for 2 threads
    assert rounds[0] == (X.shape[0], 2)
    assert any(K == 1 for _, K in rounds)
    assert all((K == 2) == (n_active >= enough) for n_active, K in rounds), rounds


@pytest.fixture
def crowded(monkeypatch):
    """Every round judged, and crowded (no thread can be on a core more than all of its span)."""
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", np.inf)
    monkeypatch.setattr(crowding, "MIN_JUDGED_S", 0.0)


@pytest.fixture
def thread_counts(monkeypatch):
    """The thread count of every round, in order."""
    counts = []
    deal = parallel._Round._deal

    def recording(self, seeds, K):
        counts.append(K)
        return deal(self, seeds, K)

    monkeypatch.setattr(parallel._Round, "_deal", recording)
    return counts


def test_crowded_rounds_go_on_one_thread(forced_threads, chunk_sizes, crowded):
    X, y = synthetic(n=2000, d=200, density=0.05)
    result = solve_binary(X, y, C=0.5, tol=1e-6, max_iter=100_000, n_jobs=2, newton=False)
    _check_certified(X, y, result, 0.5, "squared_hinge", 0.0, 1e-6)
    n_threaded = crowding.CROWDED_ROUNDS * 2
    assert len(chunk_sizes) > n_threaded + 1
    assert all(size <= 1000 for size in chunk_sizes[:n_threaded])  # two chunks a round
    # then one chunk, of every active sample, per round (the full rounds hold all 2000)
    assert max(chunk_sizes[n_threaded:]) == 2000


def test_crowded_rounds_halve_the_threads(forced_threads, crowded, thread_counts):
    # 4 threads go to 2 after CROWDED_ROUNDS rounds, then to 1, and the answer is still the
    # certified optimum (the threads race: real ones)
    threads = thread_counts
    X, y = synthetic(n=2000, d=200, density=0.05)
    result = solve_binary(X, y, C=0.5, tol=1e-6, max_iter=100_000, n_jobs=4, newton=False)
    _check_certified(X, y, result, 0.5, "squared_hinge", 0.0, 1e-6)
    n = crowding.CROWDED_ROUNDS
    assert threads[: 2 * n] == [4] * n + [2] * n
    assert len(threads) > 2 * n and set(threads[2 * n :]) == {1}


def test_crowding_halves_the_threads_a_round_used(crowded, thread_counts, monkeypatch):
    # shrinking-sized rounds on 3 of 8 threads: halving 8 would change nothing; 3 halves to 1
    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: min(n_jobs, 3))
    X, y = synthetic(n=2000, d=200, density=0.05)
    result = solve_binary(X, y, C=0.5, tol=1e-6, max_iter=100_000, n_jobs=8, newton=False)
    _check_certified(X, y, result, 0.5, "squared_hinge", 0.0, 1e-6)
    n = crowding.CROWDED_ROUNDS
    assert thread_counts[:n] == [3] * n and set(thread_counts[n:]) == {1}


def test_crowding_drops_only_the_crowded_threads(forced_threads, thread_counts, monkeypatch):
    # one thread of four kept off its core each round (the one the calling thread runs): the
    # solve drops that one thread at a time, 4 → 3 → 2 → 1, not half of them
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", 0.7)
    monkeypatch.setattr(crowding, "MIN_JUDGED_S", 0.0)
    main = threading.main_thread()
    monkeypatch.setattr(crowding, "share_on_a_core",
                        lambda started: 0.5 if threading.current_thread() is main else 1.0)
    X, y = synthetic(n=2000, d=200, density=0.05)
    result = solve_binary(X, y, C=0.5, tol=1e-6, max_iter=100_000, n_jobs=4, newton=False)
    _check_certified(X, y, result, 0.5, "squared_hinge", 0.0, 1e-6)
    n = crowding.CROWDED_ROUNDS
    assert thread_counts[: 3 * n] == [4] * n + [3] * n + [2] * n
    assert len(thread_counts) > 3 * n and set(thread_counts[3 * n :]) == {1}


def test_short_rounds_are_not_judged(forced_threads, thread_counts, monkeypatch):
    # rounds of microseconds: one preemption would weigh as crowding there
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", np.inf)
    X, y = synthetic(n=2000, d=200, density=0.05)
    solve_binary(X, y, C=0.5, tol=1e-3, n_jobs=2, newton=False)
    assert len(thread_counts) > crowding.CROWDED_ROUNDS and set(thread_counts) == {2}


def test_the_round_that_falls_back_is_checked_on_the_rebuilt_vector(crowded, forced_threads,
                                                                     monkeypatch):  # fmt: skip
    # its own M and m were measured by two threads on the old w̃: a round that meets tol then
    # is confirmed by the exact pass, as every multi-thread round is
    monkeypatch.setattr(crowding, "CROWDED_ROUNDS", 1)
    checks = []
    full_range = parallel._Round.full_range
    monkeypatch.setattr(parallel._Round, "full_range",
                        lambda self: checks.append(1) or full_range(self))  # fmt: skip
    X, y = synthetic(n=2000, d=200, density=0.05)
    result = solve_binary(X, y, C=0.5, tol=1e3, n_jobs=2, newton=False)
    assert result.n_iter == 1 and result.status is Status.CONVERGED
    assert checks == [1]


@pytest.mark.parametrize("deterministic", [False, True])
@pytest.mark.parametrize("shrinking", [True, False])
@pytest.mark.parametrize("bias", [0.0, 1.0])
@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared_error"])
def test_certified_at_tight_tol(forced_threads, loss, bias, shrinking, deterministic):
    X, y = synthetic(n=2000, d=200, density=0.05)
    tol = TIGHT[loss]
    result = solve_binary(
        X, y, loss=loss, C=0.5, bias=bias, tol=tol, shrinking=shrinking, max_iter=100_000,
        n_jobs=2, deterministic=deterministic, newton=False,
    )  # fmt: skip
    _check_certified(X, y, result, 0.5, loss, bias, tol)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared_error"])
def test_the_final_check_sums_the_objectives_of_the_returned_state(forced_threads, monkeypatch,
                                                                    loss):  # fmt: skip
    # A solve that converges reads the rows once after its last round for both the check and
    # the objectives (no objective pass, no rebuild of w̃ after the check); what it reports must
    # still be the primal and dual of the (w̃, α) it returns, on the solved rows with their C.
    calls = {"objective_sums": 0, "rebuilds_after_check": 0}
    sums, add_rows = parallel.kernels.objective_sums, parallel.add_record_rows
    checked = []

    def counted_sums(*args):
        calls["objective_sums"] += 1
        return sums(*args)

    def counted_rebuild(*args):
        calls["rebuilds_after_check"] += bool(checked)
        return add_rows(*args)

    full_range = parallel._Round.full_range

    def check(self):  # a check that does not confirm tol is followed by more rounds: count anew
        out = full_range(self)
        checked.append(1)
        calls["rebuilds_after_check"] = 0
        return out

    monkeypatch.setattr(parallel.kernels, "objective_sums", counted_sums)
    monkeypatch.setattr(parallel, "add_record_rows", counted_rebuild)
    monkeypatch.setattr(parallel._Round, "full_range", check)
    X, y = synthetic(n=3000, d=200, density=0.05, seed=6)
    if loss == "squared_error":
        y = np.asarray(X @ np.linspace(-1.0, 1.0, X.shape[1])).ravel() + 0.1
    # C small enough that the hinge loss converges at TIGHT in a few thousand rounds: three
    # threads on two cores wait for each other at every round
    C = np.random.default_rng(6).uniform(0.02, 0.4, size=y.shape[0])
    rows = np.sort(np.random.default_rng(7).choice(y.shape[0], 2200, replace=False))
    result = solve_binary(X, y, loss=loss, C=C, bias=1.0, tol=TIGHT[loss], max_iter=100_000,
                          n_jobs=3, rows=rows, newton=False, objective_every=10**9)  # fmt: skip
    assert result.status is Status.CONVERGED
    assert checked and calls == {"objective_sums": 0, "rebuilds_after_check": 0}
    w_tilde = w_tilde_of(result, 1.0)
    Xr, yr, Cr, alpha = X[rows], y[rows], C[rows], result.alpha
    sign = np.where(yr >= 0, 1.0, -1.0)
    np.testing.assert_allclose(w_tilde, augmented(Xr, 1.0).T @ (sign * alpha), atol=1e-9)
    assert result.primal == pytest.approx(primal(Xr, yr, w_tilde, Cr, loss, 1.0), rel=1e-9)
    assert result.dual == pytest.approx(dual(alpha, yr, w_tilde, Cr, loss), rel=1e-9)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_per_sample_C_with_dropped_rows_on_three_threads(forced_threads, loss):
    # the rebuild of w̃ and the objectives are split by ranges of rows: rows with C_i = 0 (in
    # every range) must count in neither, and three ranges must add up to the whole
    X, y = synthetic(n=2400, d=150, density=0.05, seed=4)
    C = np.random.default_rng(4).uniform(0.02, 0.4, size=y.shape[0])  # small: see the final check
    C[::7] = 0.0
    result = solve_binary(
        X, y, loss=loss, C=C, bias=1.0, tol=TIGHT[loss], max_iter=100_000, n_jobs=3,
        newton=False,
    )  # fmt: skip
    kept = C > 0
    assert np.all(result.alpha[~kept] == 0.0)
    one = solve_binary(X[kept], y[kept], loss=loss, C=C[kept], bias=1.0, tol=TIGHT[loss],
                       max_iter=100_000, newton=False)  # fmt: skip
    assert result.status is Status.CONVERGED
    assert result.primal == pytest.approx(one.primal, rel=1e-6)
    assert result.dual == pytest.approx(one.dual, rel=1e-6)
    assert result.history[-1].primal == result.primal  # the last record carries them


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_same_optimum_as_one_thread(forced_threads, loss):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=1)
    options = dict(loss=loss, C=0.2, bias=1.0, tol=1e-5, max_iter=100_000, newton=False)
    one = solve_binary(X, y, **options)
    for deterministic in (False, True):
        three = solve_binary(X, y, **options, n_jobs=3, deterministic=deterministic)
        assert three.status is Status.CONVERGED
        assert three.primal == pytest.approx(one.primal, rel=1e-6)


def test_deterministic_mode_repeats_exactly(forced_threads):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=3)
    runs = [
        solve_binary(X, y, tol=1e-3, n_jobs=3, deterministic=True, random_state=7) for _ in range(2)
    ]
    np.testing.assert_array_equal(runs[0].w, runs[1].w)
    np.testing.assert_array_equal(runs[0].alpha, runs[1].alpha)
    assert runs[0].n_iter == runs[1].n_iter


@pytest.mark.parametrize("deterministic", [False, True])
def test_progress_reports_the_projected_gradient_range(forced_threads, deterministic):
    X, y = synthetic(n=2000, d=60)
    seen = []
    result = solve_binary(
        X, y, tol=1e-4, n_jobs=2, callback=seen.append, objective_every=1,
        deterministic=deterministic,
    )  # fmt: skip
    assert result.status is Status.CONVERGED
    # the passes' gap is M − m; a Newton finish's is ‖∇P‖/‖∇P(0)‖, its last record carrying the
    # range of the α returned, as the result does
    passes = [p for p in seen if p.M is not None and p.m is not None and p.method != "newton"]
    assert passes and all(p.gap == pytest.approx(p.M - p.m) for p in passes)
    assert seen[-1].gap <= 1e-4
    if deterministic:  # every accepted round decreases f(α); a rejected one leaves it
        duals = [p.dual for p in seen if p.dual is not None]
        assert all(b <= a + 1e-9 * abs(a) for a, b in zip(duals, duals[1:], strict=False))


def test_estimator_uses_n_jobs_for_two_classes(forced_threads):
    X, y = synthetic(n=3000, d=200, density=0.05, seed=2)
    one = LinearSVC(tol=1e-5, max_iter=100_000).fit(X, y)
    two = LinearSVC(tol=1e-5, max_iter=100_000, n_jobs=2).fit(X, y)
    assert two.status_ == "converged"
    assert two.objective_ == pytest.approx(one.objective_, rel=1e-5)


def test_small_problems_pick_one_thread():
    X, y = load("a9a")  # 32,561 rows, 451,592 non-zeros: too little work per thread
    assert parallel.threads_for(csr_arrays(X), X.shape[0], 16) == 1
    X, y = synthetic(n=300)
    assert parallel.threads_for(csr_arrays(X), X.shape[0], 2) == 1
    # dense rows over 30 features: plenty of work, but every step writes the same cache lines
    dense = csr_arrays(sp.csr_matrix(np.random.default_rng(0).normal(size=(50_000, 30))))
    assert parallel.threads_for(dense, 50_000, 2) == 1
    assert parallel.threads_for(dense, 50_000, 2, deterministic=True) == 2  # a w̃ each


def test_n_jobs_is_checked():
    X, y = synthetic()
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="n_jobs"):
            solve_binary(X, y, n_jobs=bad)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_a_deterministic_solve_stopped_after_rejected_rounds_reports_its_range(forced_threads,
                                                                               loss):  # fmt: skip
    # Every row on one shared feature: the blocks' steps all point the same way, so the first
    # round's ‖Σ_b Δw̃_b‖² exceeds σ′ Σ_b ‖Δw̃_b‖² at σ′ = 1 and is undone (α stays 0). Its
    # record carries the (±inf) range of no accepted round, gap 0; the state returned, α = 0,
    # has every projected gradient −1, so M − m = 0 too. The result must still report the
    # (M, m) measured on what it returns, not the record of the rejected round (None, None).
    n = 3000
    X = sp.csr_matrix(np.ones((n, 1)))
    y = np.ones(n)
    result = solve_binary(X, y, loss=loss, C=1.0, bias=0.0, tol=1e-3, max_iter=1, n_jobs=3,
                          deterministic=True, newton=False, objective_every=1)  # fmt: skip
    assert not result.alpha.any()  # the round was rejected: the state is the start
    G = np.where(y >= 0, 1.0, -1.0) * (X @ result.w) - 1.0  # D_ii α_i = 0 at α = 0
    PG = np.minimum(G, 0.0)  # α_i = 0 at its lower bound
    assert result.status is Status.MAX_ITER
    assert result.pg_max == pytest.approx(PG.max()) and result.pg_min == pytest.approx(PG.min())
    assert result.history[-1].pg_max == pytest.approx(PG.max())
