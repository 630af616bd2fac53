"""Subset solves (``rows=``) and warm starts in every driver.

A solve on ``rows`` is the solve on the copied rows ``X[rows]`` (the same iterates when the rows
are increasing, so the same α and w bit for bit); a solve warm-started from the α of a smaller C
reaches the optimum a cold solve reaches, both certified by their duality gaps.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_svmlight_file

from solvers.binary import solve_binary
from solvers.multiclass import solve_crammer_singer, solve_ovr, solve_weston_watkins
from solvers.regression import solve_svr
from tests.conftest import shared_file


def _binary():
    X, y = load_svmlight_file(str(shared_file("heart_scale", "heart_scale")))
    return X.tocsr(), y


def _multiclass():
    X, y = load_svmlight_file(str(shared_file("dna", "dna.scale")))
    X, y = X.tocsr()[:600], (y[:600] - 1).astype(np.int64)
    return X, y


def _regression():
    X, _ = _binary()
    return X, np.asarray(X @ np.linspace(-1.0, 1.0, X.shape[1])).ravel() + 0.3


def _subset(n, size, seed=0):
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def _solvers():
    """(name, data loader, solve(X, y, C, **options))."""
    out = []
    for loss in ("hinge", "squared_hinge", "squared_error"):
        out.append((f"binary-{loss}", _binary, lambda X, y, C, loss=loss, **o: solve_binary(
            X, y, loss=loss, C=C, bias=1.0, **o)))  # fmt: skip
    for loss in ("hinge", "squared_hinge"):
        out.append((f"ovr-{loss}", _multiclass, lambda X, y, C, loss=loss, **o: solve_ovr(
            X, y, 3, loss=loss, C=C, bias=1.0, **o)))  # fmt: skip
    out.append(("crammer_singer", _multiclass,
                lambda X, y, C, **o: solve_crammer_singer(X, y, 3, C=C, bias=1.0, **o)))
    out.append(("weston_watkins", _multiclass,
                lambda X, y, C, **o: solve_weston_watkins(X, y, 3, C=C, bias=1.0, **o)))
    for loss in ("epsilon_insensitive", "squared_epsilon_insensitive"):
        out.append((f"svr-{loss}", _regression, lambda X, y, C, loss=loss, **o: solve_svr(
            X, y, loss=loss, epsilon=0.1, C=C, bias=1.0, **o)))  # fmt: skip
    return out


SOLVERS = {name: (load, solve) for name, load, solve in _solvers()}


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_subset_solve_equals_the_solve_on_the_copied_rows(name):
    load, solve = SOLVERS[name]
    X, y = load()
    rows = _subset(X.shape[0], (3 * X.shape[0]) // 4)
    options = {"tol": 1e-3, "max_iter": 200}
    on_rows = solve(X, y, 0.1, rows=rows, **options)
    copied = solve(X[rows], y[rows], 0.1, **options)
    assert on_rows.n_iter == copied.n_iter
    np.testing.assert_array_equal(on_rows.w, copied.w)
    np.testing.assert_array_equal(on_rows.alpha, copied.alpha)
    assert on_rows.primal == pytest.approx(copied.primal, rel=1e-12)
    # per-sample C: the whole vector is given, the subset's entries are used
    C = np.random.default_rng(1).uniform(0.02, 0.2, X.shape[0])
    on_rows = solve(X, y, C, rows=rows, **options)
    copied = solve(X[rows], y[rows], C[rows], **options)
    np.testing.assert_array_equal(on_rows.alpha, copied.alpha)
    np.testing.assert_array_equal(on_rows.w, copied.w)


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_unordered_rows_reach_the_same_optimum(name):
    load, solve = SOLVERS[name]
    X, y = load()
    rows = np.random.default_rng(2).permutation(X.shape[0])[: X.shape[0] // 2]
    options = {"tol": 1e-6, "max_iter": 20_000}
    C = 0.05 if name.startswith(("binary-hinge", "ovr-hinge", "crammer", "weston")) else 0.5
    on_rows = solve(X, y, C, rows=rows, **options)
    copied = solve(X[rows], y[rows], C, **options)
    assert on_rows.converged and copied.converged
    bound = (abs(on_rows.duality_gap) + abs(copied.duality_gap)) * max(1.0, abs(copied.primal))
    assert abs(on_rows.primal - copied.primal) <= bound + 1e-9


# (C1, C2) where the solve converges at tol 1e-6 on these sets
PATHS = {"binary-hinge": (0.01, 0.05), "ovr-hinge": (0.01, 0.05),
         "crammer_singer": (0.01, 0.05), "weston_watkins": (0.01, 0.05)}  # fmt: skip


@pytest.mark.parametrize("name", sorted(SOLVERS))
def test_warm_start_from_a_smaller_C_reaches_the_certified_optimum(name):
    load, solve = SOLVERS[name]
    X, y = load()
    rows = _subset(X.shape[0], (4 * X.shape[0]) // 5, seed=3)
    C1, C2 = PATHS.get(name, (0.1, 0.5))
    options = {"tol": 1e-6, "max_iter": 50_000}
    first = solve(X, y, C1, rows=rows, **options)
    warm = solve(X, y, C2, rows=rows, warm_start=first.alpha, **options)
    cold = solve(X, y, C2, rows=rows, **options)
    assert first.converged and warm.converged and cold.converged
    for result in (warm, cold):
        assert result.duality_gap is not None and abs(result.duality_gap) < 1e-3
    # the relative duality gap bounds each primal objective's distance from the optimum
    bound = (abs(warm.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert abs(warm.primal - cold.primal) <= bound + 1e-9
    # the primal objective is strictly convex in w: both reach the same w
    scale = max(1.0, float(np.abs(cold.w).max()))
    assert np.abs(warm.w - cold.w).max() <= 1e-3 * scale


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (np.array([0, 1, 1]), "distinct"),
        (np.array([0, 270]), r"\[0, 270\)"),
        (np.array([-1, 3]), r"\[0, 270\)"),
        (np.array([0.0, 1.0]), "integers"),
        (np.zeros((2, 2), dtype=np.int64), "1-D"),
    ],
)
def test_rows_are_checked_at_the_door(rows, message):
    X, y = _binary()
    with pytest.raises(ValueError, match=message):
        solve_binary(X, y, rows=rows)
    with pytest.raises(ValueError, match=message):
        solve_svr(X, y, rows=rows)


def test_a_subset_warm_start_has_the_subset_shape():
    X, y = _binary()
    rows = _subset(X.shape[0], 100)
    with pytest.raises(ValueError, match=r"warm_start must have shape \(100,\)"):
        solve_binary(X, y, rows=rows, warm_start=np.zeros(X.shape[0]))
    Xm, ym = _multiclass()
    rows = _subset(Xm.shape[0], 50)
    with pytest.raises(ValueError, match=r"warm_start must have shape \(3, 50\)"):
        solve_ovr(Xm, ym, 3, rows=rows, warm_start=np.zeros((3, 600)))
    with pytest.raises(ValueError, match=r"warm_start must have shape \(50, 3\)"):
        solve_crammer_singer(Xm, ym, 3, rows=rows, warm_start=np.zeros((600, 3)))


def test_empty_rows_give_the_zero_model():
    X, y = _binary()
    result = solve_binary(X, y, rows=np.empty(0, dtype=np.int64))
    assert result.converged and not result.w.any() and result.alpha.shape == (0,)


def test_an_ovr_warm_start_on_a_path_begins_on_its_support():
    """On a C path, the first pass of a warm-started one-vs-rest solve visits only the (row,
    class) pairs with α > 0 (the rest start shrunk), and the solve still ends on a pass over
    every row. Any other warm start (a resumed checkpoint) begins with a full pass."""
    X, y = _multiclass()
    first = solve_ovr(X, y, 3, C=0.1, bias=1.0, tol=1e-6, max_iter=50_000)
    reports, resumed = [], []
    options = dict(C=0.5, bias=1.0, tol=1e-6, max_iter=50_000, warm_start=first.alpha)
    warm = solve_ovr(X, y, 3, start_on_support=True, callback=reports.append, **options)
    solve_ovr(X, y, 3, callback=resumed.append, **options)
    support = int(np.count_nonzero(first.alpha))
    assert 0 < support < first.alpha.size // 2  # a sparse support: the test can tell
    assert reports[0].active <= support
    assert resumed[0].active == first.alpha.size
    assert warm.converged and abs(warm.duality_gap) < 1e-3
    cold = solve_ovr(X, y, 3, C=0.5, bias=1.0, tol=1e-6, max_iter=50_000)
    bound = (abs(warm.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert abs(warm.primal - cold.primal) <= bound + 1e-9


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_a_binary_warm_start_on_a_path_begins_on_its_support(loss):
    """As one-vs-rest's: on a path (a fold's rows, the previous C's α) the first pass visits
    only the rows of α > 0, the solve converges on a pass over every row of the fold, and it
    reaches the optimum of the cold solve on the copied rows."""
    X, y = _binary()
    rows = _subset(X.shape[0], 200, seed=3)
    options = dict(loss=loss, bias=1.0, tol=1e-6, max_iter=50_000, newton=False, rows=rows)
    first = solve_binary(X, y, C=0.05, **options)
    reports, resumed = [], []
    later = dict(C=1.0, warm_start=first.alpha, **options)
    warm = solve_binary(X, y, start_on_support=True, callback=reports.append, **later)
    solve_binary(X, y, callback=resumed.append, **later)
    support = int(np.count_nonzero(first.alpha))
    assert 0 < support < len(rows)  # some rows start shrunk: the test can tell
    assert reports[0].active <= support
    assert resumed[0].active == len(rows)
    assert warm.converged and reports[-1].active == len(rows)
    cold = solve_binary(X[rows], y[rows], C=1.0, **{**options, "rows": None})
    bound = (abs(warm.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert abs(warm.primal - cold.primal) <= bound + 1e-9


def test_the_squared_error_support_counts_its_negative_dual_variables():
    """Under the squared error α is unbounded below: the rows of α < 0 are support as well, and
    a path's solve begins on every row of α ≠ 0 (the squared error shrinks nothing, so the first
    pass visits exactly those)."""
    X, y = _regression()
    first = solve_binary(X, y, loss="squared_error", C=0.1, bias=1.0, tol=1e-6)
    warm = first.alpha.copy()
    warm[::3] = 0.0  # some rows off the support
    assert (warm < 0).any() and (warm > 0).any()
    reports = []
    solve_binary(X, y, loss="squared_error", C=0.3, bias=1.0, tol=1e-6, warm_start=warm,
                 start_on_support=True, callback=reports.append)  # fmt: skip
    assert reports[0].active == np.count_nonzero(warm)
