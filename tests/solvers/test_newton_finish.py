"""The L2 losses never stall: where dual coordinate descent stalls, primal Newton finishes.

The stalling problems are the first 3,000 rows of the raw news20 (term counts, row norms up to
1e5): at C = 1 and tol 0.1 the binary dual passes run their 1,000 passes and stop unconverged.
"""

from functools import cache

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

from solvers._core.newton import L2Loss, StallDetector, newton_finish
from solvers._core.problem import csr_arrays
from solvers._core.progress import Monitor, Status
from solvers.binary import solve_binary
from solvers.estimators import LinearSVC
from solvers.multiclass.ovr import solve_ovr
from solvers.regression.svr import solve_svr
from tests.conftest import shared_file
from tests.solvers._binary_helpers import primal
from tests.solvers.test_binary_references import liblinear_w_tilde


@cache
def raw_news20(rows=3000):
    X, y = load_svmlight_file(str(shared_file("news20", "news20.bz2")))
    return sp.csr_matrix(X[:rows]), y[:rows]


def halves():
    X, y = raw_news20()
    return X, np.where(y <= 10, 1.0, -1.0)


def test_raw_news20_binary_stalls_without_newton_and_converges_with_it():
    X, y = halves()
    stalled = solve_binary(X, y, C=1.0, tol=0.1, newton=False)
    assert stalled.status is Status.MAX_ITER and stalled.method == "dcd"
    result = solve_binary(X, y, C=1.0, tol=0.1)
    assert result.status is Status.CONVERGED and result.method == "newton"
    assert result.n_iter < 400
    methods = [p.method for p in result.history]
    first = methods.index("newton")
    assert set(methods[:first]) == {"dcd"} and set(methods[first:]) == {"newton"}
    # the history ends on the returned state, its projected-gradient range included (before:
    # the last Newton step's record, without one)
    last = result.history[-1]
    assert last.iteration == result.n_iter and last.iteration != result.history[-2].iteration
    assert (last.pg_max, last.pg_min) == (result.pg_max, result.pg_min) != (None, None)
    # certified: the duality gap of (w, α(w)) is measured on the returned pair
    ref = liblinear_w_tilde(X, y, "-s 1 -c 1 -e 0.1", 0.0)
    p_ref = primal(X, y, ref, 1.0, "squared_hinge", 0.0)
    assert 0 <= result.duality_gap <= 0.1
    assert result.primal == pytest.approx(primal(X, y, result.w, 1.0, "squared_hinge", 0.0))
    assert result.primal <= p_ref * (1 + 1e-3)  # never worse than LIBLINEAR's switch
    assert result.primal < stalled.primal
    assert result.gap <= 0.01 * 0.1  # ‖∇P‖/‖∇P(0)‖ ≤ ε′
    assert np.all(result.alpha >= 0)


def test_tight_tol_newton_matches_the_optimum():
    X, y = halves()
    tight = solve_binary(X, y, C=1.0, tol=1e-4, max_iter=5000)
    assert tight.status is Status.CONVERGED and tight.method == "newton"
    assert 0 <= tight.duality_gap <= 1e-4
    loose = solve_binary(X, y, C=1.0, tol=0.1)
    assert tight.primal <= loose.primal * (1 + 1e-9)


def test_estimator_reports_the_finishing_method():
    X, y = halves()
    model = LinearSVC(C=1.0, fit_intercept=False).fit(X, y)
    assert model.status_ == "converged"
    assert model.method_ == "newton"
    assert model.history_[-1]["method"] == "newton"


def test_one_vs_rest_classes_finish_by_newton():
    X, y = raw_news20()
    labels = (y - 1).astype(np.int64)
    stalled = solve_ovr(X, labels, 20, C=1.0, tol=0.1, n_jobs=1, newton=False)
    assert stalled.status is Status.MAX_ITER
    result = solve_ovr(X, labels, 20, C=1.0, tol=0.1, n_jobs=2)
    assert result.status is Status.CONVERGED and result.method == "newton"
    assert 0 <= result.duality_gap <= 0.1 and result.primal < stalled.primal
    gaps = result.extra["primal"] + result.extra["dual"]  # per class P + f ≥ 0
    assert np.all(gaps >= -1e-9 * np.abs(result.extra["primal"]))


def test_one_vs_rest_classes_stall_on_their_own():
    # Each class leaves the fused passes when its own passes stall, as its class-by-class solve
    # switches, not when the slowest class does. On dna two classes stall and one converges by
    # its passes (binary solves: about 100-150 passes then Newton, and 207 passes): that one
    # still runs its passes after the others have left.
    X, y = load_svmlight_file(str(shared_file("dna", "dna.scale")))
    labels = np.unique(y, return_inverse=True)[1].astype(np.int64)
    result = solve_ovr(X, labels, 3, C=1.0, tol=0.1, n_jobs=1)
    assert result.status is Status.CONVERGED and result.method == "newton"
    binaries = [solve_binary(X, np.where(labels == c, 1.0, -1.0), tol=0.1) for c in range(3)]
    by_passes = [c for c, b in enumerate(binaries) if b.method == "dcd"]
    assert len(by_passes) == 1 and binaries[by_passes[0]].status is Status.CONVERGED
    passes = result.extra["n_iter"]
    c = by_passes[0]
    assert passes[c] >= binaries[c].n_iter - 20
    assert all(passes[o] < passes[c] for o in range(3) if o != c)
    for c, binary in enumerate(binaries):
        assert result.extra["primal"][c] == pytest.approx(binary.primal, rel=1e-3)


def test_squared_epsilon_insensitive_svr_finishes_by_newton():
    X, y = raw_news20()
    args = {"loss": "squared_epsilon_insensitive", "epsilon": 0.1, "C": 1.0, "tol": 1e-3}
    stalled = solve_svr(X, y, newton=False, **args)
    assert stalled.status is Status.MAX_ITER
    result = solve_svr(X, y, **args)
    assert result.status is Status.CONVERGED and result.method == "newton"
    assert 0 <= result.duality_gap <= 1e-3
    assert result.primal < stalled.primal


def test_newton_alone_reaches_the_optimum_of_a_small_problem():
    """From w = 0 on a tiny regression problem, against the closed-form ridge solution."""
    rng = np.random.default_rng(0)
    A = rng.normal(size=(60, 5))
    target = A @ rng.normal(size=5) + 0.1 * rng.normal(size=60)
    loss = L2Loss(target, np.full(60, 0.5), regression=True)
    out = newton_finish(
        csr_arrays(sp.csr_matrix(A)), 0.0, loss, np.zeros(6), eps=1e-12, max_iter=50,
        monitor=Monitor(), first_iteration=0,
    )  # fmt: skip
    # ½‖w‖² + ½‖Aw − t‖²: (I + AᵀA) w = Aᵀt
    expected = np.linalg.solve(np.eye(5) + A.T @ A, A.T @ target)
    np.testing.assert_allclose(out.w[:5], expected, rtol=1e-8)
    assert out.status is Status.CONVERGED and abs(out.duality_gap) < 1e-10


def test_stall_detector():
    falling = StallDetector(cap=300, window=5)
    assert not any(falling.stalled(0.8**k) for k in range(100))
    flat = StallDetector(cap=300, window=5)
    assert [flat.stalled(1.0) for _ in range(10)][-1] is True
    capped = StallDetector(cap=7, window=50)
    assert [capped.stalled(0.5**k) for k in range(7)] == [False] * 6 + [True]


def test_primal_start_on_a_row_subset_reaches_the_certified_optimum():
    """Newton from the w̃ of a smaller C (a path's primal warm start), on half of the rows, ends
    where a cold tight solve on the copied rows does, and its duality gap certifies it."""
    X, y = halves()
    rows = np.arange(0, X.shape[0], 2)
    before = solve_binary(X, y, C=0.3, tol=1e-4, max_iter=5000, rows=rows)
    start = np.append(before.w, 0.0)
    warm = solve_binary(X, y, C=1.0, tol=1e-4, max_iter=5000, rows=rows, primal_start=start)
    cold = solve_binary(X[rows], y[rows], C=1.0, tol=1e-4, max_iter=5000)
    assert warm.method == "newton" and warm.status is Status.CONVERGED
    assert warm.alpha.shape == (len(rows),) and np.all(warm.alpha >= 0)
    assert 0 <= warm.duality_gap <= 1e-4
    assert warm.primal == pytest.approx(primal(X[rows], y[rows], warm.w, 1.0, "squared_hinge", 0.0))
    assert warm.primal == pytest.approx(cold.primal, rel=2e-4)
    assert warm.primal <= before.primal / 0.3  # P(w; C) ≤ P(w; C') C / C' for C ≥ C'


def test_primal_start_is_checked():
    X, y = halves()
    with pytest.raises(ValueError, match="L2 loss"):
        solve_binary(X, y, loss="hinge", primal_start=np.zeros(X.shape[1] + 1))
    with pytest.raises(ValueError, match="shape"):
        solve_binary(X, y, primal_start=np.zeros(X.shape[1]))


def test_newton_after_hands_over_at_that_pass_and_reaches_the_same_optimum():
    """A path's solve that caps its dual passes (``newton_after``) hands over to Newton there,
    and Newton's rule and certificate hold as after a detected stall."""
    X, y = halves()
    detected = solve_binary(X, y, C=1.0, tol=0.1)
    capped = solve_binary(X, y, C=1.0, tol=0.1, newton_after=20)
    assert capped.status is Status.CONVERGED and capped.method == "newton"
    methods = [p.method for p in capped.history]
    assert methods.index("newton") == 20 and set(methods[:20]) == {"dcd"}
    assert capped.gap <= 0.01 * 0.1  # ‖∇P‖/‖∇P(0)‖ ≤ ε′, as without the cap
    assert capped.primal == pytest.approx(primal(X, y, capped.w, 1.0, "squared_hinge", 0.0))
    assert 0 <= capped.duality_gap <= 0.1
    # both are within their certified gaps of the one optimum
    bound = (capped.duality_gap + detected.duality_gap) * max(1.0, detected.primal)
    assert abs(capped.primal - detected.primal) <= bound


def test_newton_tol_replaces_the_factor_of_the_finish_rule():
    """``newton_tol`` (a path's solves give LIBLINEAR's own 0.1 · tol) replaces 0.01 · tol in
    ε′ = factor · max(1, min(n₊, n₋)) / n, after a stall and from a primal start alike: the
    looser rule holds, the strict one is not asked for, and the certificate is still measured
    on the pair returned."""
    X, y = halves()
    smaller = min(int((y > 0).sum()), int((y < 0).sum())) / len(y)
    start = np.zeros(X.shape[1] + 1)
    for extra in ({}, {"primal_start": start}):
        strict = solve_binary(X, y, C=1.0, tol=0.1, **extra)
        loose = solve_binary(X, y, C=1.0, tol=0.1, newton_tol=0.01, **extra)
        assert strict.method == loose.method == "newton"
        assert strict.status is loose.status is Status.CONVERGED
        assert strict.gap <= 0.001 * smaller < loose.gap <= 0.01 * smaller
        assert loose.n_iter < strict.n_iter
        assert loose.primal == pytest.approx(primal(X, y, loose.w, 1.0, "squared_hinge", 0.0))
        assert loose.duality_gap >= 0 and loose.primal >= strict.primal * (1 - 1e-9)
    with pytest.raises(ValueError, match="newton_tol must be a finite number > 0"):
        solve_binary(X, y, newton_tol=0.0)


def test_newton_tol_reaches_the_one_vs_rest_finish():
    X, y = raw_news20()
    classes = np.unique(y, return_inverse=True)[1]
    strict = solve_ovr(X, classes, 20, C=1.0, tol=0.1)
    loose = solve_ovr(X, classes, 20, C=1.0, tol=0.1, newton_tol=0.01)
    assert strict.method == loose.method == "newton"
    assert strict.status is loose.status is Status.CONVERGED
    assert loose.duality_gap > strict.duality_gap  # the finish stopped earlier
    assert strict.primal <= loose.primal <= strict.primal * (1 + loose.duality_gap)
    with pytest.raises(ValueError, match="newton_tol"):
        solve_ovr(X, classes, 20, newton_tol=-1.0)


def test_newton_tol_reaches_classes_solved_side_by_side(monkeypatch):
    """With threads to spare, one-vs-rest solves its classes side by side on the binary solver
    (`solvers.multiclass.ovr_parallel`): each gets the caller's ``newton_tol``."""
    import solvers.multiclass.ovr_parallel as by_class

    X, y = raw_news20(600)
    classes = np.unique(y, return_inverse=True)[1] % 3
    asked = []
    real = by_class.solve_binary

    def spy(*args, **kwargs):
        asked.append(kwargs.get("newton_tol"))
        return real(*args, **kwargs)

    monkeypatch.setattr(by_class, "solve_binary", spy)
    monkeypatch.setattr(by_class.parallel, "threads_for", lambda *args, **kwargs: 2)
    result = solve_ovr(X, classes, 3, C=1.0, tol=0.1, n_jobs=6, newton_tol=0.01)
    assert asked == [0.01] * 3 and result.status is Status.CONVERGED


@pytest.mark.parametrize("solver", ["binary", "SVR"])
def test_a_newton_finish_ends_on_a_record_of_the_returned_certificate(solver):
    # The last record (the last one the callback sees) describes the returned (w̃, α): the dual
    # objective of the returned α and its duality gap, not only the primal of the Newton step.
    from tests.solvers._every_solver import TARGET, Y_PM, dense_problem

    X = sp.csr_matrix(dense_problem()[0] * 30)
    XB = sp.hstack([X, np.ones((X.shape[0], 1))]).tocsr()
    seen = []
    if solver == "binary":
        C = 10.0
        r = solve_binary(X, Y_PM, loss="squared_hinge", C=C, bias=1.0, tol=1e-8,
                         max_iter=100_000, newton_after=3, callback=seen.append)  # fmt: skip
        w = XB.T @ (Y_PM * r.alpha)
        dual = 0.5 * w @ w - r.alpha.sum() + (r.alpha**2).sum() / (4 * C)
    else:
        C = 100.0
        r = solve_svr(X, TARGET, loss="squared_epsilon_insensitive", epsilon=0.1, C=C,
                      bias=1.0, tol=1e-8, max_iter=100_000, callback=seen.append)  # fmt: skip
        w = XB.T @ r.alpha
        dual = (0.5 * w @ w - TARGET @ r.alpha + 0.1 * np.abs(r.alpha).sum()
                + (r.alpha**2).sum() / (4 * C))  # fmt: skip
    assert r.status is Status.CONVERGED and r.method == "newton"
    assert r.dual == pytest.approx(dual, rel=1e-9)
    last = r.history[-1]
    assert seen[-1] is last and last.iteration == r.n_iter
    assert (last.primal, last.dual, last.duality_gap) == (r.primal, r.dual, r.duality_gap)


def test_one_vs_rest_counts_the_newton_steps_of_its_finish_as_the_binary_solver_does():
    # A class whose finish runs out of its steps ends the fit at max_iter: n_iter then says the
    # budget was spent (passes and Newton steps), per class and overall, as for two classes.
    from tests.solvers._every_solver import Y3, Y_PM, dense_problem

    X = sp.csr_matrix(dense_problem()[0] * 30)
    options = dict(C=10.0, bias=1.0, tol=1e-14, max_iter=40, newton_after=3)
    binary = solve_binary(X, Y_PM, loss="squared_hinge", **options)
    assert binary.status is Status.MAX_ITER and binary.n_iter == 40
    r = solve_ovr(X, Y3, 3, n_jobs=1, **options)
    assert r.status is Status.MAX_ITER and r.method == "newton"
    assert r.n_iter == 40 and max(r.extra["n_iter"]) == 40
    assert r.history[-1].iteration == r.n_iter
