"""Weston–Watkins by the sequential dual method against a QP solver, the binary solver and KKT."""

import numpy as np
import osqp
import pytest
import scipy.sparse as sp

from solvers._core.progress import Status
from solvers.binary import solve_binary
from solvers.multiclass.crammer_singer import solve_crammer_singer
from solvers.multiclass.weston_watkins import solve_weston_watkins
from solvers.multiclass.ww_kernels import solve_sub_problem
from tests.solvers.multiclass_data import accuracy, blobs, load, ww_primal


def _qp_ww_primal(X, y, k, C, bias):
    n = X.shape[0]
    Xt = np.hstack([X.toarray(), np.full((n, 1), bias)])
    d = Xt.shape[1]
    pairs = [(i, m) for i in range(n) for m in range(k) if m != y[i]]
    nv = k * d + len(pairs)
    P = sp.block_diag([sp.eye(k * d), sp.csc_matrix((len(pairs), len(pairs)))], format="csc")
    q = np.r_[np.zeros(k * d), np.full(len(pairs), C)]
    rows = np.zeros((len(pairs), nv))
    for t, (i, m) in enumerate(pairs):
        rows[t, y[i] * d : (y[i] + 1) * d] += Xt[i]
        rows[t, m * d : (m + 1) * d] -= Xt[i]
        rows[t, k * d + t] = 1.0
    slack = sp.hstack([sp.csc_matrix((len(pairs), k * d)), sp.eye(len(pairs))])
    A = sp.vstack([sp.csc_matrix(rows), slack], format="csc")
    lower = np.r_[np.ones(len(pairs)), np.zeros(len(pairs))]
    solver = osqp.OSQP()
    solver.setup(
        P,
        q,
        A,
        lower,
        np.full(A.shape[0], np.inf),
        eps_abs=1e-10,
        eps_rel=1e-10,
        max_iter=200_000,
        polishing=True,
        verbose=False,
    )
    return solver.solve(raise_error=True).info.obj_val


@pytest.mark.parametrize(
    ("n", "d", "k", "C", "bias", "seed"),
    [(60, 8, 4, 0.7, 1.0, 1), (150, 5, 3, 2.0, 0.0, 2), (200, 10, 6, 0.3, 2.0, 3)],
)
def test_matches_qp_solver(n, d, k, C, bias, seed):
    X, y = blobs(n, d, k, seed)
    r = solve_weston_watkins(X, y, k, C=C, bias=bias, tol=1e-9, max_iter=100_000)
    assert r.status is Status.CONVERGED
    assert r.primal == pytest.approx(_qp_ww_primal(X, y, k, C, bias), rel=1e-6)
    assert r.primal == pytest.approx(ww_primal(X, y, r.w, r.bias, C, bias), rel=1e-10)


def test_sub_problem_is_exact():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 9))
        A = float(rng.uniform(0.1, 3))
        C = float(rng.uniform(0.1, 2))
        a = rng.uniform(0, C, n) * (rng.random(n) < 0.6)
        g = rng.standard_normal(n) * 2
        out = np.empty(n)
        solve_sub_problem(A, g, a, C, n, np.empty(2 * n), out)
        assert np.all(out >= 0) and np.all(out <= C)
        # KKT of (21): ∇ = A(δ + 1ᵀδ) + g; ≥ 0 at 0, ≤ 0 at C, = 0 inside
        delta = out - a
        grad = A * (delta + delta.sum()) + g
        inside = (out > 1e-12) & (out < C - 1e-12)
        np.testing.assert_allclose(grad[inside], 0.0, atol=1e-9)
        assert np.all(grad[out <= 1e-12] >= -1e-9)
        assert np.all(grad[out >= C - 1e-12] <= 1e-9)


def test_two_classes_equal_binary_hinge_at_twice_C():
    X, y = blobs(150, 8, 2, seed=5, spread=0.6)
    C, bias = 0.7, 1.0
    r = solve_weston_watkins(X, y, 2, C=C, bias=bias, tol=1e-8, max_iter=100_000)
    binary = solve_binary(
        X, np.where(y == 1, 1.0, -1.0), loss="hinge", C=2 * C, bias=bias, tol=1e-8, max_iter=100_000
    )
    assert 2 * r.primal == pytest.approx(binary.primal, rel=1e-8)
    np.testing.assert_allclose(r.w[1] - r.w[0], binary.w, atol=1e-5)


@pytest.mark.parametrize("name", ["dna", "segment"])
def test_kkt_and_certified_gap(name):
    X, _, y, classes = load(name)
    k, C = len(classes), 1.0
    tol = 1e-3
    r = solve_weston_watkins(X, y, k, C=C, bias=1.0, tol=tol, max_iter=100_000)
    assert r.status is Status.CONVERGED
    assert r.primal + r.dual <= 1e-3 * r.primal
    assert r.primal == pytest.approx(ww_primal(X, y, r.w, r.bias, C, 1.0), rel=1e-10)
    alpha = r.alpha
    idx = np.arange(len(y))
    others = np.ones_like(alpha, dtype=bool)
    others[idx, y] = False
    assert np.all(alpha[others] >= 0) and np.all(alpha[others] <= C)
    np.testing.assert_allclose(alpha.sum(axis=1), 0.0, atol=1e-9)
    np.testing.assert_allclose(r.w, -(X.T @ alpha).T, atol=1e-8)
    # (18): every v_i^m below tol
    S = X @ r.w.T + r.bias
    g = S[idx, y][:, None] - S - 1.0
    v = np.where(alpha <= 0, np.maximum(0, -g), np.where(alpha >= C, np.maximum(0, g), np.abs(g)))
    assert v[others].max() < 2 * tol


def test_accuracy_close_to_crammer_singer():
    for name in ("dna", "pendigits"):
        X, _, y, classes = load(name)
        Xt, _, yt, _ = load(name, "test")
        k = len(classes)
        ww = solve_weston_watkins(X, y, k, C=1.0, bias=1.0)
        cs = solve_crammer_singer(X, y, k, C=1.0, bias=1.0)
        assert abs(accuracy(Xt, yt, ww.w, ww.bias) - accuracy(Xt, yt, cs.w, cs.bias)) <= 1.5


def test_behaviour_seed_callback_warm_start_zero_rows():
    X, _, y, _ = load("wine")
    a = solve_weston_watkins(X, y, 3, C=1.0, bias=1.0, tol=1e-3, random_state=3)
    b = solve_weston_watkins(X, y, 3, C=1.0, bias=1.0, tol=1e-3, random_state=3)
    np.testing.assert_array_equal(a.alpha, b.alpha)
    stopped = solve_weston_watkins(X, y, 3, tol=1e-6, callback=lambda p: False)
    assert stopped.status is Status.STOPPED and stopped.n_iter == 1
    warm = solve_weston_watkins(X, y, 3, C=1.0, bias=1.0, tol=1e-3, warm_start=a.alpha)
    assert warm.status is Status.CONVERGED and warm.n_iter < a.n_iter
    Z = sp.vstack([X, sp.csr_matrix((2, X.shape[1]))], format="csr")
    r = solve_weston_watkins(Z, np.r_[y, [0, 2]], 3, C=1.0, tol=1e-6, max_iter=100_000)
    base = solve_weston_watkins(X, y, 3, C=1.0, tol=1e-6, max_iter=100_000)
    assert r.primal == pytest.approx(base.primal + 2 * 2.0, rel=1e-6)
    assert r.primal + r.dual <= 1e-5 * r.primal
    with pytest.raises(ValueError, match="infeasible"):
        solve_weston_watkins(X, y, 3, C=1.0, warm_start=np.full((len(y), 3), 2.0))


def test_no_temporaries_of_the_size_of_alpha():
    """Beyond α (n, k) and W the solve holds O(n) arrays: the final objectives are computed row by
    row, not from an (n, k) score matrix."""
    import tracemalloc

    rng = np.random.default_rng(0)
    n, d, k = 4000, 30, 40
    X = sp.random(n, d, density=0.5, format="csr", random_state=rng)
    y = rng.integers(0, k, n)
    solve_weston_watkins(X, y, k, max_iter=1)  # compiled before measuring
    tracemalloc.start()
    solve_weston_watkins(X, y, k, C=1.0, bias=1.0, tol=0.5, max_iter=5)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1.6 * n * k * 8
