"""The shared-slack dual solver against a generic QP solver (OSQP) on small random problems."""

import numpy as np
import osqp
import pytest
import scipy.sparse as sp

from solvers import Status, fit_structural


def random_problem(seed, n_examples=40, per_example=4, n_features=12, density=0.5, scale=1.0):
    rng = np.random.default_rng(seed)
    n_rows = n_examples * per_example
    X = sp.random(n_rows, n_features, density=density, random_state=rng, format="csr") * scale
    X.data -= 0.5 * scale
    margins = rng.uniform(0.0, 2.0, n_rows)
    groups = np.repeat(np.arange(n_examples), per_example)
    order = rng.permutation(n_rows)  # rows of an example need not be contiguous
    return X[order], margins[order], groups[order]


def qp_optimum(X, margins, groups, C=1.0, nonneg=False, w0=None, reg_scale=None):
    """min ½‖(w − w0) ∘ r‖² + Σ C_i ξ_i  s.t. x_ijᵀw + ξ_i ≥ l_ij, ξ ≥ 0 (and w ≥ 0) by OSQP."""
    X = sp.csr_matrix(X)
    n_rows, d = X.shape
    labels, gi = np.unique(groups, return_inverse=True)
    m = len(labels)
    cap = np.broadcast_to(np.asarray(C, dtype=float), (m,))
    r = np.ones(d) if reg_scale is None else np.asarray(reg_scale)
    w0v = np.zeros(d) if w0 is None else np.asarray(w0)
    P = sp.block_diag([sp.diags(r**2), sp.csc_matrix((m, m))], format="csc")
    q = np.concatenate([-(r**2) * w0v, cap])
    slack = sp.csr_matrix((np.ones(n_rows), (np.arange(n_rows), gi)), shape=(n_rows, m))
    blocks = [[X, slack], [None, sp.eye(m)]]
    lower = [margins, np.zeros(m)]
    if nonneg:
        blocks.append([sp.eye(d), None])
        lower.append(np.zeros(d))
    A = sp.bmat(blocks, format="csc")
    lower = np.concatenate(lower)
    solver = osqp.OSQP()
    solver.setup(
        P,
        q,
        A,
        lower,
        np.full(len(lower), np.inf),
        verbose=False,
        eps_abs=1e-12,
        eps_rel=1e-12,
        max_iter=200000,
        polishing=True,
    )
    res = solver.solve(raise_error=True)
    w = res.x[:d]
    # The objective of the returned w itself (feasible slacks), not OSQP's own estimate.
    if nonneg:
        w = np.maximum(w, 0.0)
    worst = np.zeros(m)
    np.maximum.at(worst, gi, margins - X @ w)
    obj = 0.5 * np.sum(((w - w0v) * r) ** 2) + cap @ worst
    return w, obj


def assert_bounds_hold(result, opt):
    slack = 1e-9 * max(1.0, abs(opt))
    for p in result.history:
        assert p.lower_bound <= opt + slack
        if p.upper_bound is not None:
            assert p.upper_bound >= opt - slack
    assert result.lower_bound <= opt + slack <= result.upper_bound + 2 * slack


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_qp(seed):
    X, margins, groups = random_problem(seed)
    w_ref, opt = qp_optimum(X, margins, groups, C=0.7)
    res = fit_structural(X, margins, groups, C=0.7, tol=1e-10, max_iter=5000)
    assert res.status is Status.CONVERGED
    assert res.upper_bound == pytest.approx(opt, rel=1e-6)
    assert res.lower_bound == pytest.approx(opt, rel=1e-6)
    np.testing.assert_allclose(res.w, w_ref, rtol=1e-6, atol=1e-6 * np.abs(w_ref).max())
    assert_bounds_hold(res, opt)
    sums = np.bincount(np.unique(groups, return_inverse=True)[1], weights=res.alpha)
    assert np.all(res.alpha >= 0) and np.all(sums <= 0.7 * (1 + 1e-12))
    # w = Σ α x at the optimum (no prior, no bound).
    np.testing.assert_allclose(X.T @ res.alpha, res.w, atol=1e-12)


def test_per_example_C_and_float32():
    X, margins, groups = random_problem(3, n_examples=30)
    C = np.linspace(0.2, 2.0, 30)
    _, opt = qp_optimum(X, margins, groups, C=C)
    res = fit_structural(X.astype(np.float32), margins, groups, C=C, tol=1e-10, max_iter=5000)
    _, opt32 = qp_optimum(X.astype(np.float32).astype(np.float64), margins, groups, C=C)
    assert res.upper_bound == pytest.approx(opt32, rel=1e-6)
    assert opt32 == pytest.approx(opt, rel=1e-5)


def test_pairwise_update_is_needed():
    # Large margins saturate every example's sum constraint, so only pairwise moves can go on.
    X, margins, groups = random_problem(4, n_examples=30, per_example=5)
    margins = margins * 20
    _, opt = qp_optimum(X, margins, groups, C=0.5)
    res = fit_structural(X, margins, groups, C=0.5, tol=1e-8, max_iter=3000)
    assert res.converged and res.upper_bound == pytest.approx(opt, rel=1e-6)
    stalled = fit_structural(
        X, margins, groups, C=0.5, tol=1e-8, max_iter=300, pairwise=False, shrinking=False
    )
    assert stalled.status is Status.MAX_ITER
    assert stalled.lower_bound < opt - 1e-3 * abs(opt)
    assert stalled.upper_bound > opt + 1e-3 * abs(opt)


@pytest.mark.parametrize("seed", [5, 6])
def test_nonneg_matches_qp(seed):
    X, margins, groups = random_problem(seed)
    w_ref, opt = qp_optimum(X, margins, groups, nonneg=True)
    assert np.any(w_ref <= 1e-9)  # the bound is active somewhere
    res = fit_structural(X, margins, groups, nonneg=True, tol=1e-10, max_iter=5000)
    assert res.converged and np.all(res.w >= 0)
    assert res.upper_bound == pytest.approx(opt, rel=1e-6)
    np.testing.assert_allclose(res.w, w_ref, atol=1e-6 * np.abs(w_ref).max())
    assert_bounds_hold(res, opt)


def test_nonneg_clipping_u_not_w():
    # x = ±1, l = 1: the optimum is w = 0 (clipping w in place would end at w = 1).
    X = sp.csr_matrix(np.array([[1.0], [-1.0]]))
    res = fit_structural(X, [1.0, 1.0], [0, 1], nonneg=True, tol=1e-12, max_iter=100)
    assert res.converged
    assert res.w[0] == pytest.approx(0.0, abs=1e-9)
    assert res.upper_bound == pytest.approx(2.0)


@pytest.mark.parametrize("nonneg", [False, True])
def test_prior_and_scale_match_qp(nonneg):
    X, margins, groups = random_problem(7, n_features=10)
    rng = np.random.default_rng(8)
    w0 = rng.normal(0, 0.5, 10)
    r = rng.uniform(0.3, 3.0, 10)
    w_ref, opt = qp_optimum(X, margins, groups, nonneg=nonneg, w0=w0, reg_scale=r)
    res = fit_structural(
        X, margins, groups, nonneg=nonneg, w0=w0, reg_scale=r, tol=1e-10, max_iter=5000
    )
    assert res.converged
    assert res.upper_bound == pytest.approx(opt, rel=1e-6)
    np.testing.assert_allclose(res.w, w_ref, atol=1e-6 * np.abs(w_ref).max())
    assert_bounds_hold(res, opt)


def test_callback_reports_and_stops():
    X, margins, groups = random_problem(9)
    seen = []

    def cb(p):
        seen.append(p)
        return len(seen) < 3

    res = fit_structural(X, margins, groups, tol=1e-12, callback=cb)
    # three passes, then the exact bounds of the returned state (the callback sees it too)
    assert res.status is Status.STOPPED and res.n_iter == 3 and len(seen) == 4
    assert seen[-1].gap == res.gap and seen[-1].upper_bound == res.upper_bound
    assert all(p.lower_bound is not None and p.active is not None for p in seen)
    # UB' is reported for full passes (the first one is; shrunk ones cover fewer rows).
    assert seen[0].approx_upper_bound is not None and seen[0].active == len(margins)
    assert res.upper_bound is not None and res.upper_bound >= res.lower_bound


def one_large_example(n_rows):
    """One example of ``n_rows`` rows over 50 features: each pairwise visit's partner search
    reads the whole example, so a pass costs n_rows² (2 million rows: hours)."""
    rows = np.arange(n_rows)
    X = sp.csr_matrix((np.ones(n_rows), (rows, rows % 50)), shape=(n_rows, 50))
    return X, (rows % 5).astype(float), np.ones(n_rows)


@pytest.mark.parametrize("stop_by", ["callback", "time_limit"])
def test_a_long_pass_is_stopped_within_it(monkeypatch, stop_by):
    """A pass over one example of 2 million rows lasted hours: a job's cancel (the callback's
    False) and time_limit were heard only at its end. The pass reports between slices of
    about _SLICE_WORK entries once it has lasted _PASS_REPORT_S (here: at once)."""
    from solvers.structural import batch

    monkeypatch.setattr(batch, "_PASS_REPORT_S", 0.0)
    n_rows = 20_000
    X, margins, groups = one_large_example(n_rows)
    seen = []
    stop = stop_by == "callback"
    options = {"callback": lambda p: seen.append(p) or not stop}
    if not stop:
        options["time_limit"] = 1e-9
    res = fit_structural(X, margins, groups, tol=1e-12, **options)
    expected = Status.STOPPED if stop_by == "callback" else Status.TIME_LIMIT
    assert res.status is expected and res.n_iter == 1
    first = seen[0]  # from inside the first pass: the rows visited so far, no gap yet
    assert 0 < first.active < n_rows // 10 and first.gap is None
    assert first.lower_bound is not None and first.iteration == 1
    # the returned state's exact bounds are valid: UB of w over all rows >= LB = F(alpha)
    assert res.upper_bound is not None and res.upper_bound >= res.lower_bound > 0


def test_a_pass_in_slices_gives_the_same_solve(monkeypatch):
    """Slices change where a pass may stop, not what it computes."""
    from solvers.structural import batch

    X, margins, groups = random_problem(4, n_examples=5, per_example=40)
    whole = fit_structural(X, margins, groups, tol=1e-6)
    monkeypatch.setattr(batch, "_SLICE_WORK", 50)
    monkeypatch.setattr(batch, "_PASS_REPORT_S", 0.0)
    sliced = fit_structural(X, margins, groups, tol=1e-6)
    np.testing.assert_array_equal(sliced.w, whole.w)
    assert sliced.n_iter == whole.n_iter
    assert len(sliced.history) > len(whole.history)  # the records from inside passes


def test_shrinking_reaches_the_same_optimum():
    X, margins, groups = random_problem(12, n_examples=80, per_example=6)
    _, opt = qp_optimum(X, margins, groups, C=0.3)
    on = fit_structural(X, margins, groups, C=0.3, tol=1e-10, max_iter=5000)
    off = fit_structural(X, margins, groups, C=0.3, tol=1e-10, max_iter=5000, shrinking=False)
    assert on.converged and off.converged
    assert on.upper_bound == pytest.approx(opt, rel=1e-6)
    assert off.upper_bound == pytest.approx(opt, rel=1e-6)
    assert min(p.active for p in on.history) < len(margins)  # it did shrink
    assert_bounds_hold(on, opt)


def test_warm_start_and_determinism():
    X, margins, groups = random_problem(10)
    a = fit_structural(X, margins, groups, tol=1e-8, random_state=3)
    b = fit_structural(X, margins, groups, tol=1e-8, random_state=3)
    np.testing.assert_array_equal(a.alpha, b.alpha)
    rough = fit_structural(X, margins, groups, tol=1e-2)
    warm = fit_structural(X, margins, groups, tol=1e-8, warm_start=rough)
    assert warm.converged and warm.n_iter < a.n_iter
    assert warm.upper_bound == pytest.approx(a.upper_bound, rel=1e-7)


def test_rejects_bad_input():
    X, margins, groups = random_problem(11, n_examples=5)
    with pytest.raises(ValueError, match="margins"):
        fit_structural(X, margins[:-1], groups)
    with pytest.raises(ValueError, match="groups"):
        fit_structural(X, margins, groups[:-1])
    with pytest.raises(ValueError, match="reg_scale"):
        fit_structural(X, margins, groups, reg_scale=np.zeros(X.shape[1]))
    with pytest.raises(ValueError, match="exceeds C"):
        fit_structural(X, margins, groups, warm_start=np.ones(len(margins)))
