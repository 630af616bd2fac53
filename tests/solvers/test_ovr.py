"""One-vs-rest: each class equals the binary solver, threads change nothing, accuracy."""

import numpy as np
import pytest
import scipy.sparse as sp
from liblinear import liblinearutil

from solvers._core.progress import Status
from solvers.binary import solve_binary
from solvers.multiclass.ovr import solve_ovr
from tests.solvers.multiclass_data import accuracy, liblinear_weights, load


@pytest.mark.parametrize(
    ("name", "loss", "tol"),
    [("dna", "squared_hinge", 1e-6), ("wine", "hinge", 1e-6), ("vowel", "squared_hinge", 1e-6)],
)
def test_each_class_equals_binary_solver(name, loss, tol):
    X, _, y, classes = load(name)
    k = len(classes)
    r = solve_ovr(X, y, k, loss=loss, C=1.0, bias=1.0, tol=tol, max_iter=100_000, n_jobs=1)
    assert r.status is Status.CONVERGED
    for c in range(k):
        b = solve_binary(
            X, np.where(y == c, 1.0, -1.0), loss=loss, C=1.0, bias=1.0, tol=tol, max_iter=100_000
        )
        assert r.extra["primal"][c] == pytest.approx(b.primal, rel=1e-6)
        # certified per class: primal + dual ≥ 0 and small
        assert 0 <= r.extra["primal"][c] + r.extra["dual"][c] <= 1e-5 * r.extra["primal"][c]
    if r.method == "dcd":  # w = w(α); after a Newton finish w is the primal iterate instead
        np.testing.assert_allclose(
            r.w, (X.T @ (r.alpha * np.where(y == np.arange(k)[:, None], 1, -1)).T).T, atol=1e-8
        )


def test_per_class_C_matches_binary_with_sample_weights():
    X, _, y, classes = load("wine")
    k, n = len(classes), X.shape[0]
    Cmat = np.random.default_rng(0).uniform(0.1, 2.0, (k, n))
    Cmat[:, :5] = 0.0  # dropped rows
    r = solve_ovr(X, y, k, loss="squared_hinge", C=Cmat, bias=1.0, tol=1e-7, max_iter=100_000)
    for c in range(k):
        b = solve_binary(
            X,
            np.where(y == c, 1.0, -1.0),
            loss="squared_hinge",
            C=Cmat[c],
            bias=1.0,
            tol=1e-7,
            max_iter=100_000,
        )
        assert r.extra["primal"][c] == pytest.approx(b.primal, rel=1e-6)
    assert np.all(r.alpha[:, :5] == 0.0)


@pytest.fixture
def many_blocks(monkeypatch):
    """Blocks of classes even on problems too small to pick them by themselves."""
    from solvers.multiclass import ovr

    monkeypatch.setattr(ovr, "WORK_PER_THREAD", 1)


@pytest.mark.parametrize("order", ["permute", "cyclic", "random"])
def test_serial_and_threaded_runs_are_identical(order, many_blocks):
    X, _, y, classes = load("vowel")
    k = len(classes)
    runs = [
        solve_ovr(
            X,
            y,
            k,
            loss="squared_hinge",
            C=0.5,
            bias=1.0,
            tol=1e-3,
            order=order,
            random_state=11,
            n_jobs=j,
        )
        for j in (1, 2, 4)
    ]
    for r in runs[1:]:
        np.testing.assert_array_equal(r.w, runs[0].w)
        np.testing.assert_array_equal(r.alpha, runs[0].alpha)
        np.testing.assert_array_equal(r.extra["n_iter"], runs[0].extra["n_iter"])
    # the measure of the returned state: every class's own, the largest of them
    assert all(r.gap == runs[0].gap == runs[0].extra["gap"].max() for r in runs)


def test_accuracy_close_to_liblinear():
    for name in ("dna", "pendigits"):
        X, labels, y, classes = load(name)
        Xt, _, yt, _ = load(name, "test")
        ours = solve_ovr(X, y, len(classes), loss="hinge", C=1.0, bias=1.0)
        model = liblinearutil.train(labels, X, "-s 3 -c 1 -B 1 -q")
        W, b = liblinear_weights(model, classes, X.shape[1], 1.0)
        assert abs(accuracy(Xt, yt, ours.w, ours.bias) - accuracy(Xt, yt, W, b)) <= 0.5, name


def test_behaviour_callback_warm_start_zero_rows_float32():
    X, _, y, _ = load("wine")
    seen = []
    r = solve_ovr(X, y, 3, C=1.0, bias=1.0, tol=1e-4, callback=seen.append, objective_every=2)
    assert len(seen) in (r.n_iter, r.n_iter + 1) and seen[-1].gap == r.gap <= 1e-4
    assert any(p.primal is not None for p in seen)
    stopped = solve_ovr(X, y, 3, tol=1e-6, callback=lambda p: False)
    assert stopped.status is Status.STOPPED and stopped.n_iter == 1
    warm = solve_ovr(X, y, 3, C=1.0, bias=1.0, tol=1e-4, warm_start=r.alpha)
    assert warm.n_iter < r.n_iter / 2
    r32 = solve_ovr(X.astype(np.float32), y, 3, C=1.0, bias=1.0, tol=1e-4)
    assert r32.primal == pytest.approx(r.primal, rel=1e-4)
    Z = sp.vstack([X, sp.csr_matrix((3, X.shape[1]))], format="csr")
    z = solve_ovr(Z, np.r_[y, [0, 1, 2]], 3, loss="hinge", C=1.0, tol=1e-6, max_iter=100_000)
    assert z.status is Status.CONVERGED
    np.testing.assert_array_equal(z.alpha[:, -3:], 1.0)
    with pytest.raises(ValueError, match="loss"):
        solve_ovr(X, y, 3, loss="squared_error")
    with pytest.raises(ValueError, match="shape"):
        solve_ovr(X, y, 3, C=np.ones((2, 3)))


def test_no_temporaries_of_the_size_of_alpha():
    """One block: beyond α (n, k) and W the solve holds one byte per (row, class) shrinking flag and
    O(n) arrays; no signed copy of α at the start, no (n, k) score matrix for the objectives."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n, d, k = 4000, 30, 40
    X = sp.random(n, d, density=0.5, format="csr", random_state=rng)
    y = rng.integers(0, k, n)
    solve_ovr(X, y, k, max_iter=1, n_jobs=1)  # compiled before measuring
    tracemalloc.start()
    solve_ovr(X, y, k, C=1.0, bias=1.0, tol=0.5, max_iter=5, n_jobs=1)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1.6 * n * k * 8


@pytest.mark.parametrize("k, n_jobs", [(40, 2), (20, 2), (10, 2), (105, 3)])
def test_threaded_blocks_share_one_copy_of_the_model(k, n_jobs, many_blocks):
    """Each thread writes its classes into its own region of one buffer, which becomes the
    result's arrays in place: threads add no copy of W or α, and give the one-thread model."""
    import tracemalloc

    rng = np.random.default_rng(1)
    n, d = 1500, 4000
    X = sp.random(n, d, density=0.01, format="csr", random_state=rng)
    y = rng.integers(0, k, n)
    solve_ovr(X, y, k, max_iter=1, n_jobs=n_jobs)  # compiled before measuring
    peaks, results = [], []
    for jobs in (1, n_jobs):
        # the least peak of 3 runs: a copy is made every run, while two threads' transient
        # temporaries meet at one instant only now and then
        seen = []
        for _ in range(3):
            tracemalloc.start()
            result = solve_ovr(X, y, k, tol=0.1, n_jobs=jobs)
            seen.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        results.append(result)
        peaks.append(min(seen))
    one, many = results
    np.testing.assert_array_equal(many.w, one.w)
    np.testing.assert_array_equal(many.alpha, one.alpha)
    np.testing.assert_array_equal(many.bias, one.bias)
    # a copy of W alone would add d · k · 8 bytes; per-block bookkeeping is O(n) per block
    assert peaks[1] < peaks[0] + 32 * n * n_jobs, peaks


def test_small_problems_use_one_block_whatever_n_jobs():
    from solvers.multiclass.ovr import _fused_threads
    from solvers.multiclass.problem import check_problem

    X, _, y, classes = load("vowel")
    problem = check_problem(X, y, len(classes), 1.0, 1.0)
    assert _fused_threads(problem, 16) == 1


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_spare_threads_go_inside_the_classes(monkeypatch, loss):
    """Two classes and four threads: two binary solves side by side, two threads each."""
    from solvers.binary import parallel
    from solvers.multiclass import ovr_parallel

    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)
    used = []
    real = ovr_parallel.solve_by_class

    def spy(problem, Cfull, k, inner, monitor, options):
        used.append(inner)
        return real(problem, Cfull, k, inner, monitor, options)

    monkeypatch.setattr(ovr_parallel, "solve_by_class", spy)
    X, _, y, classes = load("vowel")
    y2 = (y >= 5).astype(np.int64)
    seen = []
    fused = solve_ovr(X, y2, 2, loss=loss, bias=1.0, tol=1e-5, n_jobs=1, max_iter=100_000)
    split = solve_ovr(
        X, y2, 2, loss=loss, bias=1.0, tol=1e-5, n_jobs=4, max_iter=100_000, callback=seen.append
    )
    assert used == [2]
    assert split.status is Status.CONVERGED and split.w.shape == fused.w.shape
    assert split.alpha.shape == fused.alpha.shape and split.bias.shape == (2,)
    np.testing.assert_allclose(split.extra["primal"], fused.extra["primal"], rtol=1e-5)
    assert seen and seen[-1].gap == split.gap


def test_the_newton_finish_of_stalled_classes_hears_a_stop(monkeypatch):
    """A job's one-vs-rest LinearSVC at tol 1e-300: its passes stalled after 0.4 s and the
    classes' Newton finish ran on, asking the callback nothing, so a cancel went unheard for
    over 90 s (and a finish cut by time_limit was labelled max_iter). The finish asks the
    callback every ASK_EVERY_S (here: at every step) with the passes' last record."""
    import scipy.sparse as sp

    from solvers import LinearSVC
    from solvers.multiclass import ovr_newton

    monkeypatch.setattr(ovr_newton, "ASK_EVERY_S", 0.0)
    rng = np.random.default_rng(1)
    X = sp.csr_matrix(rng.normal(size=(3000, 20)))
    y = rng.integers(5, size=3000)
    seen = []

    def callback(progress):  # go on through the passes; stop at the first ask of the finish
        repeated = bool(seen) and progress.iteration == seen[-1].iteration
        seen.append(progress)
        return not repeated

    monkeypatch.setattr(ovr_newton, "STALL_CAP", 5)  # the passes stall at once
    model = LinearSVC(tol=1e-300, max_iter=400, callback=callback).fit(X, y)
    assert model.status_ == Status.STOPPED.value
    assert seen[-2].iteration == seen[-3].iteration  # the ask: the passes' last record again


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_wide_blocks_equal_the_binary_solver(loss):
    """20 classes over news20's 62,061 features: W holds more than `WIDE_W_ENTRIES` values, so
    full passes sweep W's whole feature rows (`ovr_pass`); each class is still the binary
    solver's optimum, certified, and w = Σ α_i y_i x_i."""
    from solvers.multiclass.ovr_kernels import WIDE_BLOCK, WIDE_W_ENTRIES
    from tests.solvers.test_newton_finish import raw_news20

    X, labels = raw_news20(2000)
    X = sp.csr_matrix(X.multiply(1.0 / np.sqrt(X.multiply(X).sum(axis=1))))
    y = np.unique(labels, return_inverse=True)[1]
    k = int(y.max()) + 1
    assert k >= WIDE_BLOCK and X.shape[1] * k >= WIDE_W_ENTRIES
    r = solve_ovr(X, y, k, loss=loss, C=1.0, tol=1e-5, max_iter=100_000, n_jobs=1, newton=False)
    assert r.status is Status.CONVERGED
    for c in range(k):
        b = solve_binary(X, np.where(y == c, 1.0, -1.0), loss=loss, C=1.0, tol=1e-5,
                         max_iter=100_000, newton=False)  # fmt: skip
        assert r.extra["primal"][c] == pytest.approx(b.primal, rel=1e-5)
        gap = r.extra["primal"][c] + r.extra["dual"][c]  # ≥ 0 up to rounding
        assert -1e-12 * r.extra["primal"][c] <= gap <= 1e-4 * r.extra["primal"][c]
    signs = np.where(y == np.arange(k)[:, None], 1.0, -1.0)
    np.testing.assert_allclose(r.w, (X.T @ (r.alpha * signs).T).T, atol=1e-8)


def _ovr_pass_with(**constants):
    """The fused pass compiled with some of its module's constants replaced."""
    import types

    from numba import njit

    from solvers.multiclass import ovr_kernels

    f = ovr_kernels.ovr_pass.py_func
    twin = types.FunctionType(f.__code__, {**f.__globals__, **constants}, f.__name__)
    return njit(nogil=True)(twin)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_the_wide_sweep_gives_the_grouped_loops_iterates_to_the_last_bit(monkeypatch, loss):
    """The pass with the wide sweep forced on every block, and with it never taken: the same
    models, dual variables and passes, cold and warm-started on a path (its support first)."""
    from solvers.multiclass import ovr_blocks

    X, _, y, classes = load("vowel")
    k = len(classes)
    outcomes = []
    for constants in ({"WIDE_BLOCK": 1, "WIDE_W_ENTRIES": 0}, {"WIDE_BLOCK": 10**9}):
        monkeypatch.setattr(ovr_blocks, "ovr_pass", _ovr_pass_with(**constants))
        runs = []
        for n_jobs in (1, 2):
            options = dict(loss=loss, bias=1.0, tol=1e-4, n_jobs=n_jobs, newton=False)
            cold = solve_ovr(X, y, k, C=0.3, **options)
            warm = solve_ovr(X, y, k, C=3.0, warm_start=cold.alpha, start_on_support=True,
                             **options)  # fmt: skip
            runs += [cold, warm]
        outcomes.append(runs)
    for wide, grouped in zip(*outcomes, strict=True):
        assert wide.n_iter == grouped.n_iter
        for name in ("w", "alpha", "bias"):
            assert np.array_equal(getattr(wide, name), getattr(grouped, name)), name


def test_classes_side_by_side_converge_only_when_every_class_does(monkeypatch):
    """Spare threads inside the classes: a class at a tiny C is solved in two passes while the
    others run out of passes. The fit must say max_iter, as the projected gradients of the
    classes left unsolved (measured here with numpy) say, not converged."""
    from solvers.binary import parallel

    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 200)
    X = sp.csr_matrix(rng.normal(size=(600, 5)))
    C = np.ones((3, 600))
    C[0] = 1e-6
    tol = 1e-3
    result = solve_ovr(X, y, 3, loss="hinge", C=C, bias=1.0, tol=tol, max_iter=3, n_jobs=6,
                       newton=False)  # fmt: skip
    Xt = sp.hstack([X, np.ones((600, 1))]).tocsr()
    ranges = []
    for c in range(3):
        yc = np.where(y == c, 1.0, -1.0)
        G = yc * (Xt @ np.r_[result.w[c], result.bias[c]]) - 1.0
        a = result.alpha[c]
        PG = np.where(a <= 0, np.minimum(G, 0), np.where(a >= C[c], np.maximum(G, 0), G))
        ranges.append(PG.max() - PG.min())
    assert ranges[0] <= tol and max(ranges) > 10 * tol  # one class solved, the others not
    assert result.status is Status.MAX_ITER


def test_classes_side_by_side_stopped_by_the_clock_say_time_limit(monkeypatch):
    """Spare threads inside the classes: the fit's wall-clock budget reaches each class through
    its callback, but the fit was not stopped by the caller's callback: it says time_limit, as
    the fused pass does; a callback's stop still says stopped."""
    from solvers.binary import parallel

    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)
    rng = np.random.default_rng(0)
    y = np.repeat([0, 1, 2], 200)
    X = sp.csr_matrix(rng.normal(size=(600, 5)))
    options = dict(loss="hinge", bias=1.0, tol=1e-12, max_iter=1000, n_jobs=6, newton=False)
    timed = solve_ovr(X, y, 3, time_limit=1e-9, **options)
    assert timed.status is Status.TIME_LIMIT
    fused = solve_ovr(X, y, 3, time_limit=1e-9, **{**options, "n_jobs": 1})
    assert fused.status is Status.TIME_LIMIT
    stopped = solve_ovr(X, y, 3, callback=lambda p: p.iteration < 2, **options)
    assert stopped.status is Status.STOPPED


@pytest.mark.parametrize("finish", ["passes", "newton"])
def test_a_solve_measures_its_classes_once_after_its_last_pass(monkeypatch, many_blocks, finish):
    """The last pass's record measures every class (its objectives) and the result reuses that
    measure; a Newton finish replaces it for the classes it finished only. A path over C makes
    fifty such solves, and a second measure was a tenth of a sector search. The per-class
    primal and dual are checked here against numpy on the returned W and α."""
    from solvers.multiclass import ovr, ovr_newton

    measured = []
    counting = ovr.block_measures
    monkeypatch.setattr(ovr, "block_measures", lambda *a: measured.append(1) or counting(*a))
    if finish == "newton":
        monkeypatch.setattr(ovr_newton, "STALL_CAP", 5)  # the passes stall at once
    X, _, y, classes = load("vowel")
    k, C = len(classes), 0.5
    tol = 1e-3 if finish == "passes" else 1e-8
    r = solve_ovr(X, y, k, loss="squared_hinge", C=C, bias=1.0, tol=tol, max_iter=1000, n_jobs=2)
    assert r.status is Status.CONVERGED
    assert r.method == ("dcd" if finish == "passes" else "newton")
    assert len(measured) == 2  # one per block of classes (two threads), once
    XB = sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()
    S = np.where(y == np.arange(k)[:, None], 1.0, -1.0)
    for c in range(k):
        w = np.r_[r.w[c], r.bias[c]]
        primal = 0.5 * w @ w + C * np.sum(np.maximum(0.0, 1.0 - S[c] * (XB @ w)) ** 2)
        w_alpha = XB.T @ (S[c] * r.alpha[c])
        dual = 0.5 * w_alpha @ w_alpha + r.alpha[c] @ r.alpha[c] / (4 * C) - r.alpha[c].sum()
        assert r.extra["primal"][c] == pytest.approx(primal, rel=1e-9)
        assert r.extra["dual"][c] == pytest.approx(dual, rel=1e-9, abs=1e-12)
