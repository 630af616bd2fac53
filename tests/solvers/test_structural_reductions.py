"""Problems written through the shared-slack solver reach the optima of their dedicated solvers."""

import numpy as np
import pytest
import scipy.sparse as sp

from solvers import fit_structural, solve_svr
from solvers.structural.problems import (
    binary_problem,
    multiclass_problem,
    split_classes,
    svr_problem,
)
from tests.conftest import shared_file
from tests.solvers.test_structural import qp_optimum


def read(*parts):
    from solvers import read_libsvm

    return read_libsvm(shared_file(*parts))


def brackets_meet(ours, lb, ub, rel):
    """Two certified brackets of the same optimum overlap, and ours is narrow."""
    assert ours.lower_bound <= ub * (1 + 1e-12) and lb <= ours.upper_bound * (1 + 1e-12)
    assert ours.upper_bound - ours.lower_bound <= rel * abs(ours.upper_bound)


@pytest.mark.parametrize("C", [0.5, np.linspace(0.1, 2.0, 270)])
def test_binary_equals_l1_dual_coordinate_descent(C):
    from solvers import solve_binary

    X, y = read("heart_scale", "heart_scale")
    Xs, margins, groups = binary_problem(X, y, C=C, bias=1.0)
    ours = fit_structural(Xs, margins, groups, tol=1e-10, max_iter=20000)
    ref = solve_binary(X, y, loss="hinge", C=C, bias=1.0, tol=1e-8, max_iter=100000)
    assert ours.converged and ref.converged
    assert ours.upper_bound == pytest.approx(ref.primal, rel=1e-7)
    scale = np.abs(ref.w).max()
    np.testing.assert_allclose(ours.w[:-1], ref.w, atol=1e-5 * scale)
    assert ours.w[-1] == pytest.approx(ref.bias, abs=1e-5 * scale)
    # alpha_binary = C_i alpha (C folded into x and l).
    np.testing.assert_allclose(np.asarray(C) * ours.alpha, ref.alpha, atol=1e-4 * np.max(C))


def test_binary_margin_rescaling_matches_qp():
    rng = np.random.default_rng(0)
    X = sp.random(60, 8, density=0.6, random_state=rng, format="csr")
    y = np.where(rng.random(60) < 0.5, -1.0, 1.0)
    X = X.multiply(y[:, None] * 0.5 + 0.2).tocsr()  # slightly separable
    margin = rng.uniform(0.5, 2.0, 60)
    cost = rng.uniform(0.2, 1.5, 60)
    Xs, margins, groups = binary_problem(X, y, C=cost, margin=margin)
    ours = fit_structural(Xs, margins, groups, tol=1e-10, max_iter=20000)
    # The direct form: min ½‖w‖² + Σ cost_i max(0, margin_i − y_i wᵀx_i).
    _, opt = qp_optimum(sp.diags(y) @ X, margin, np.arange(60), C=cost)
    assert ours.upper_bound == pytest.approx(opt, rel=1e-6)


def test_cost_sensitive_multiclass_matches_qp():
    rng = np.random.default_rng(1)
    n, d, k = 45, 6, 3
    X = sp.csr_matrix(rng.normal(size=(n, d)))
    y = rng.integers(0, k, n)
    loss = np.array([[0.0, 1.0, 3.0], [0.5, 0.0, 1.0], [2.0, 1.0, 0.0]])
    Xs, margins, groups = multiclass_problem(X, y, k, loss=loss, C=0.8)
    ours = fit_structural(Xs, margins, groups, tol=1e-10, max_iter=20000)
    # Independent construction of the constraints (w_{y_i} − w_j)ᵀx_i + ξ_i ≥ loss(y_i, j).
    rows, marg, grp = [], [], []
    for i in range(n):
        for j in range(k):
            if j != y[i]:
                v = np.zeros(k * d)
                v[y[i] * d : (y[i] + 1) * d] = X[i].toarray()
                v[j * d : (j + 1) * d] -= X[i].toarray().ravel()
                rows.append(v)
                marg.append(loss[y[i], j])
                grp.append(i)
    w_ref, opt = qp_optimum(np.array(rows), np.array(marg), np.array(grp), C=0.8)
    assert ours.upper_bound == pytest.approx(opt, rel=1e-6)
    np.testing.assert_allclose(ours.w, w_ref, atol=1e-5 * np.abs(w_ref).max())


@pytest.mark.parametrize(
    ("parts", "C", "scale", "tol"),
    [
        (("dna", "dna.scale"), 0.1, 1.0, 1e-6),
        # pendigits' features (0..100) scaled to [0, 1]; the unscaled problem needs far more passes.
        (("pendigits", "pendigits"), 0.01, 0.01, 1e-4),
    ],
)
def test_zero_one_loss_equals_crammer_singer(parts, C, scale, tol):
    from solvers import solve_crammer_singer

    X, y = read(*parts)
    X = X * scale
    classes, y = np.unique(y, return_inverse=True)
    k = len(classes)
    Xs, margins, groups = multiclass_problem(X, y, k, C=C, bias=1.0)
    ours = fit_structural(Xs, margins, groups, tol=tol, max_iter=5000)
    ref = solve_crammer_singer(X, y, k, C=C, bias=1.0, tol=1e-5, max_iter=100000)
    assert ours.converged and ref.converged
    # Both brackets [LB, UB] hold the same optimum (the CS dual is reported minimized).
    brackets_meet(ours, -ref.dual, ref.primal, tol)
    W, b = split_classes(ours.w, k, 1.0)
    assert np.abs(W - ref.w).max() <= 1e-2 * np.abs(ref.w).max()


def test_svr_two_constraint_construction_equals_dual_svr():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    X = sp.csr_matrix(X / X.std(axis=0))
    Xs, margins, groups = svr_problem(X, y, epsilon=0.5, C=0.1, bias=1.0)
    ours = fit_structural(Xs, margins, groups, tol=1e-12, max_iter=20000)
    ref = solve_svr(X, y, C=0.1, epsilon=0.5, bias=1.0, tol=1e-12, max_iter=100000)
    assert ours.upper_bound == pytest.approx(ref.primal, rel=1e-8)
    np.testing.assert_allclose(ours.w[:-1], ref.w, atol=1e-6 * np.abs(ref.w).max())
    assert ours.w[-1] == pytest.approx(ref.bias, rel=1e-6)


def test_builders_reject_bad_labels():
    X = sp.csr_matrix(np.eye(3))
    with pytest.raises(ValueError, match="-1, \\+1"):
        binary_problem(X, [0, 1, 1])
    with pytest.raises(ValueError, match="class indices"):
        multiclass_problem(X, [0, 1, 3], 3)
    with pytest.raises(ValueError, match="loss must have shape"):
        multiclass_problem(X, [0, 1, 2], 3, loss=np.ones((2, 2)))
