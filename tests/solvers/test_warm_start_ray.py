"""A dual warm start is rescaled to the best point of its ray (`solvers._core.warm_start`).

For every formulation the start the solver builds from α (the solution at a smaller C) is r*·α,
and the dual objective there, computed here from X, y and α with numpy, is the lowest on the
feasible part of the ray: no other r does better, and r = 1 (α as given) never does.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from solvers._core.problem import csr_arrays
from solvers._core.warm_start import ray_scale
from solvers.binary import solve_binary
from solvers.binary.state import SolveState
from solvers.multiclass import (
    ovr_blocks,
    sdm,
    solve_crammer_singer,
    solve_ovr,
    solve_weston_watkins,
)
from solvers.multiclass.crammer_singer import CrammerSinger
from solvers.multiclass.problem import check_problem
from solvers.multiclass.weston_watkins import WestonWatkins
from solvers.regression import solve_svr, svr
from tests.conftest import shared_file

C_SMALL, C_LARGE = 0.01, 0.03
RAYS = np.linspace(0.5, 6.0, 56)


def test_ray_scale_is_the_clipped_minimum_of_the_parabola():
    assert ray_scale(3.0, 2.0) == 1.5
    assert ray_scale(3.0, 2.0, r_max=1.2) == 1.2
    assert ray_scale(-1.0, 2.0) == 0.0  # the ray only climbs: start from 0
    assert ray_scale(0.0, 0.0) == 1.0  # α = 0: nothing to scale


def _tilde(X):
    """X with the bias feature (1) appended, dense."""
    return np.hstack([X.toarray(), np.ones((X.shape[0], 1))])


def _binary():
    X, y = load_svmlight_file(str(shared_file("heart_scale", "heart_scale")))
    return X.tocsr(), y


def _multiclass():
    X, y = load_svmlight_file(str(shared_file("dna", "dna.scale")))
    return X.tocsr()[:400], (y[:400] - 1).astype(np.int64)


def _best_on_ray(f, start, given, feasible):
    """start = r·given for some r > 0, and f(start) is the lowest of f on the feasible rays."""
    scale = start[given != 0] / given[given != 0]
    assert np.allclose(scale, scale[0], rtol=1e-12) and scale[0] > 0
    assert f(start) <= f(given) + 1e-12 * abs(f(given))
    for r in RAYS:
        if feasible(r * given):
            assert f(start) <= f(r * given) + 1e-12 * abs(f(r * given)), r
    return scale[0]


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_binary_start(loss):
    X, y = _binary()
    given = solve_binary(X, y, C=C_SMALL, loss=loss, bias=1.0, tol=1e-6).alpha
    Z = _tilde(X) * y[:, None]
    D = 0.0 if loss == "hinge" else 0.5 / C_LARGE

    def f(a):
        return 0.5 * np.sum((Z.T @ a) ** 2) + 0.5 * D * a @ a - a.sum()

    state = SolveState.build(csr_arrays(X), y, np.array([C_LARGE]), loss, 1.0, given)
    start = state.record.values[0::3].copy()
    assert np.allclose(state.w, Z.T @ start)

    def feasible(a):
        return loss != "hinge" or a.max() <= C_LARGE

    r = _best_on_ray(f, start, given, feasible)
    assert r > 1.5  # at small C the solution grows with C: the start moves most of the way


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_one_vs_rest_start(loss):
    X, y = _multiclass()
    k = 3
    given = solve_ovr(X, y, k, C=C_SMALL, loss=loss, bias=1.0, tol=1e-6).alpha  # (k, n)
    signs = np.where(y[None, :] == np.arange(k)[:, None], 1.0, -1.0)
    Xt = _tilde(X)
    alpha = np.ascontiguousarray(given.T)
    W = Xt[:, :-1].T @ (alpha * signs.T)
    wb = (alpha * signs.T).sum(axis=0)
    Cmat = np.full((X.shape[0], 1), C_LARGE)
    ovr_blocks.to_ray_optimum(alpha, Cmat, 0, loss == "hinge", W, wb)
    D = 0.0 if loss == "hinge" else 0.5 / C_LARGE
    for c in range(k):
        Z = Xt * signs[c][:, None]

        def f(a, Z=Z):
            return 0.5 * np.sum((Z.T @ a) ** 2) + 0.5 * D * a @ a - a.sum()

        def feasible(a):
            return loss != "hinge" or a.max() <= C_LARGE

        _best_on_ray(f, alpha[:, c], given[c], feasible)
        assert np.allclose(np.append(W[:, c], wb[c]), Z.T @ alpha[:, c])


@pytest.mark.parametrize("formulation", ["crammer_singer", "weston_watkins"])
def test_joint_multiclass_start(formulation):
    X, y = _multiclass()
    k = 3
    solve = solve_crammer_singer if formulation == "crammer_singer" else solve_weston_watkins
    given = solve(X, y, k, C=C_SMALL, bias=1.0, tol=1e-6).alpha  # (n, k)
    sign = 1.0 if formulation == "crammer_singer" else -1.0
    kind = CrammerSinger if formulation == "crammer_singer" else WestonWatkins
    Xt = _tilde(X)
    own = np.arange(X.shape[0]), y

    def f(a):
        linear = a[own].sum() if formulation == "crammer_singer" else -a[own].sum()
        return 0.5 * np.sum((Xt.T @ a) ** 2) - linear

    def feasible(a):
        if formulation == "crammer_singer":
            return a[own].max() <= C_LARGE
        return np.delete(a, 0, axis=1).max() <= C_LARGE and a.max() <= C_LARGE

    alpha = given.copy()
    W, wb = sign * (Xt[:, :-1].T @ alpha), sign * alpha.sum(axis=0)
    problem = check_problem(X, y, k, C_LARGE, 1.0)
    sdm._to_ray_optimum(kind.ray_terms(problem, alpha), alpha, W, wb)
    _best_on_ray(f, alpha, given, feasible)
    assert np.allclose(W, sign * (Xt[:, :-1].T @ alpha))


@pytest.mark.parametrize("loss", ["epsilon_insensitive", "squared_epsilon_insensitive"])
def test_svr_start(loss):
    X, _ = _binary()
    y = np.asarray(X @ np.linspace(-1.0, 1.0, X.shape[1])).ravel() + 0.3
    epsilon = 0.1
    given = solve_svr(X, y, loss=loss, epsilon=epsilon, C=C_SMALL, bias=1.0, tol=1e-6).alpha
    Xt = _tilde(X)
    lam = 0.0 if loss == "epsilon_insensitive" else 0.5 / C_LARGE

    def f(b):
        return 0.5 * np.sum((Xt.T @ b) ** 2) + 0.5 * lam * b @ b - y @ b + epsilon * np.abs(b).sum()

    def feasible(b):
        return loss != "epsilon_insensitive" or np.abs(b).max() <= C_LARGE

    data = csr_arrays(X)
    terms = svr._terms(data, y, np.full(X.shape[0], C_LARGE), loss, epsilon, 1.0)
    beta, w = svr._initial_beta(data, given, terms.upper, 1.0)
    svr._to_ray_optimum(beta, w, terms)
    _best_on_ray(f, beta, given, feasible)
    assert np.allclose(w, Xt.T @ beta)


def test_hinge_path_at_tiny_C_starts_at_the_next_solution():
    """At a C so small that every α_i sits at its bound, the solution at 2C is 2α: the rescaled
    start is that solution, and the solve confirms it in one pass."""
    X, y = _binary()
    first = solve_binary(X, y, C=1e-5, loss="hinge", tol=1e-3)
    assert np.allclose(first.alpha, 1e-5)
    second = solve_binary(X, y, C=2e-5, loss="hinge", tol=1e-3, warm_start=first.alpha)
    assert second.n_iter == 1 and second.status.value == "converged"
    assert np.allclose(second.alpha, 2e-5)
