"""Warm starts that bring their weights (``warm_weights``): the solve skips the pass that rebuilds
w̃ from α, and reaches what the solve that rebuilds it reaches.

A C path hands each solve the previous C's α and the weights that α holds (its result's ``w``
and ``bias / bias``). They are trusted, so the tests check that they are used only where they
still match α: not where the bounds clip the warm start, not after a Newton finish (whose w̃ is
not Σ y α x̃ of the α(w̃) it reports).
"""

from __future__ import annotations

import numpy as np
import pytest

from solvers import LinearSVCCV
from solvers.binary import dcd, solve_binary
from solvers.multiclass import ovr_blocks, solve_ovr
from solvers.selection import search
from tests.solvers import _binary_helpers, multiclass_data


def _binary():
    return _binary_helpers.load("heart_scale")


def _multiclass():
    X, _, y, _ = multiclass_data.load("dna")
    return X[:600], y[:600]


def _rows(n, size, seed=0):
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


@pytest.fixture
def binary_rebuilds(monkeypatch):
    """Counts the passes that build w̃ from α in `solve_binary`."""
    calls = []
    original = dcd.kernels.record_weights

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(dcd.kernels, "record_weights", counted)
    return calls


@pytest.fixture
def ovr_rebuilds(monkeypatch):
    """Counts the passes that build a block's W from α in `solve_ovr`."""
    calls = []
    original = ovr_blocks.weights_from_alpha

    def counted(*args):
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(ovr_blocks, "weights_from_alpha", counted)
    return calls


def _same_solve(a, b):
    assert a.status == b.status and a.n_iter == b.n_iter
    np.testing.assert_allclose(a.alpha, b.alpha, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a.w, b.w, rtol=1e-9, atol=1e-12)
    assert a.primal == pytest.approx(b.primal, rel=1e-10)


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_binary_warm_weights_spare_the_rebuild_and_reach_the_same_solve(loss, binary_rebuilds):
    X, y = _binary()
    rows = _rows(X.shape[0], 200, seed=3)
    options = dict(loss=loss, bias=1.0, tol=1e-6, max_iter=50_000, newton=False, rows=rows)
    first = solve_binary(X, y, C=0.05, **options)
    weights = np.append(first.w, first.bias / 1.0)
    binary_rebuilds.clear()
    given = solve_binary(X, y, C=1.0, warm_start=first.alpha, warm_weights=weights, **options)
    assert binary_rebuilds == []
    rebuilt = solve_binary(X, y, C=1.0, warm_start=first.alpha, **options)
    assert binary_rebuilds == [1]
    _same_solve(given, rebuilt)
    assert given.converged and abs(given.duality_gap) < 1e-4


def test_binary_warm_weights_are_rebuilt_where_the_bounds_clip_the_start(binary_rebuilds):
    """A hinge start from a larger C is clipped to the smaller C's box: the weights of the
    unclipped α would be wrong, so w̃ is rebuilt, and the optimum is the cold one."""
    X, y = _binary()
    options = dict(loss="hinge", bias=1.0, tol=1e-6, max_iter=50_000, newton=False)
    large = solve_binary(X, y, C=1.0, **options)
    assert large.alpha.max() > 0.05  # the start is clipped: the test can tell
    binary_rebuilds.clear()
    weights = np.append(large.w, large.bias)
    warm = solve_binary(X, y, C=0.05, warm_start=large.alpha, warm_weights=weights, **options)
    assert binary_rebuilds == [1]
    cold = solve_binary(X, y, C=0.05, **options)
    bound = (abs(warm.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert warm.converged and abs(warm.primal - cold.primal) <= bound + 1e-9


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_ovr_warm_weights_spare_the_rebuild_and_reach_the_same_solve(loss, ovr_rebuilds):
    X, y = _multiclass()
    rows = _rows(X.shape[0], 450, seed=1)
    options = dict(loss=loss, bias=1.0, tol=1e-6, max_iter=50_000, newton=False, rows=rows)
    first = solve_ovr(X, y, 3, C=0.05, **options)
    weights = (first.w, first.bias / 1.0)
    ovr_rebuilds.clear()
    given = solve_ovr(X, y, 3, C=0.5, warm_start=first.alpha, warm_weights=weights, **options)
    assert ovr_rebuilds == []
    rebuilt = solve_ovr(X, y, 3, C=0.5, warm_start=first.alpha, **options)
    assert len(ovr_rebuilds) >= 1
    _same_solve(given, rebuilt)
    assert given.converged and abs(given.duality_gap) < 1e-4


def test_ovr_warm_weights_fill_every_block_of_classes(ovr_rebuilds, monkeypatch):
    """With the classes split into blocks (one per thread, every n_blocks-th class), each block
    takes its own columns of the given W: the same solve as the one that rebuilds them."""
    from solvers.multiclass import ovr

    monkeypatch.setattr(ovr, "WORK_PER_THREAD", 1)  # two blocks even on a small problem
    X, y = _multiclass()
    options = dict(loss="squared_hinge", bias=1.0, tol=1e-6, max_iter=50_000, newton=False,
                   n_jobs=2)  # fmt: skip
    first = solve_ovr(X, y, 3, C=0.05, **options)
    ovr_rebuilds.clear()
    given = solve_ovr(X, y, 3, C=0.5, warm_start=first.alpha, warm_weights=(first.w, first.bias),
                      **options)  # fmt: skip
    assert ovr_rebuilds == []
    rebuilt = solve_ovr(X, y, 3, C=0.5, warm_start=first.alpha, **options)
    assert len(ovr_rebuilds) == 2  # one per block: the split the test is about
    _same_solve(given, rebuilt)


def test_ovr_warm_weights_are_rebuilt_where_the_bounds_clip_the_start(ovr_rebuilds):
    X, y = _multiclass()
    options = dict(loss="hinge", bias=1.0, tol=1e-6, max_iter=50_000, newton=False)
    large = solve_ovr(X, y, 3, C=1.0, **options)
    assert large.alpha.max() > 0.05
    ovr_rebuilds.clear()
    warm = solve_ovr(X, y, 3, C=0.05, warm_start=large.alpha, warm_weights=(large.w, large.bias),
                     **options)  # fmt: skip
    assert len(ovr_rebuilds) >= 1
    cold = solve_ovr(X, y, 3, C=0.05, **options)
    bound = (abs(warm.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert warm.converged and abs(warm.primal - cold.primal) <= bound + 1e-9


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (np.zeros(5), r"warm_weights must have shape \(14,\)"),
        (np.full(14, np.nan), "warm_weights contains NaN"),
    ],
)
def test_binary_warm_weights_are_checked_at_the_door(weights, message):
    X, y = _binary()
    start = np.zeros(X.shape[0])
    with pytest.raises(ValueError, match=message):
        solve_binary(X, y, bias=1.0, warm_start=start, warm_weights=weights)
    with pytest.raises(ValueError, match="warm_weights needs the warm_start"):
        solve_binary(X, y, bias=1.0, warm_weights=np.zeros(14))


def test_ovr_warm_weights_are_checked_at_the_door():
    X, y = _multiclass()
    start = np.zeros((3, X.shape[0]))
    with pytest.raises(ValueError, match=r"shapes \(3, 180\) and \(3,\)"):
        solve_ovr(X, y, 3, warm_start=start, warm_weights=(np.zeros((3, 5)), np.zeros(3)))
    with pytest.raises(ValueError, match="NaN or infinite"):
        solve_ovr(X, y, 3, warm_start=start, warm_weights=(np.zeros((3, 180)), np.full(3, np.inf)))
    with pytest.raises(ValueError, match="warm_weights needs the warm_start"):
        solve_ovr(X, y, 3, warm_weights=(np.zeros((3, 180)), np.zeros(3)))


def test_a_path_hands_on_its_weights_and_scores_as_when_it_rebuilds(ovr_rebuilds, monkeypatch):
    """On a one-vs-rest path (hinge: no Newton finish) only the refit builds W from α; the
    table is the one of a path that rebuilds W at every solve."""
    X, y = _multiclass()
    options = dict(Cs=[0.01, 0.03, 0.1, 0.3], cv=3, loss="hinge", tol=1e-4, max_iter=20_000,
                   n_jobs=1, calibration="none")  # fmt: skip
    ovr_rebuilds.clear()
    given = LinearSVCCV(**options).fit(X, y)
    assert len(ovr_rebuilds) == 1  # the refit, from the folds' averaged α
    monkeypatch.setattr(search, "dual_weights", lambda result, bias: None)
    rebuilt = LinearSVCCV(**options).fit(X, y)
    assert len(ovr_rebuilds) > 1 + 3 * 3
    np.testing.assert_array_equal(given.scores_, rebuilt.scores_)
    assert given.C_ == rebuilt.C_


def test_a_binary_path_hands_on_its_weights_and_scores_as_when_it_rebuilds(
    binary_rebuilds, monkeypatch
):
    X, y = _binary()
    options = dict(Cs=[0.01, 0.03, 0.1, 0.3], cv=3, loss="hinge", tol=1e-4, max_iter=20_000,
                   n_jobs=1, calibration="none")  # fmt: skip
    binary_rebuilds.clear()
    given = LinearSVCCV(**options).fit(X, y)
    assert binary_rebuilds == [1]  # the refit
    monkeypatch.setattr(search, "dual_weights", lambda result, bias: None)
    rebuilt = LinearSVCCV(**options).fit(X, y)
    assert len(binary_rebuilds) == 1 + 1 + 3 * 3
    np.testing.assert_array_equal(given.scores_, rebuilt.scores_)
    assert given.C_ == rebuilt.C_


@pytest.mark.parametrize("solver", ["binary", "ovr"])
def test_the_next_solve_leaves_the_previous_result_alone(solver):
    """The solve writes w̃ in place: the weights it was handed are copied, so the previous
    result, which the caller still holds, is unchanged."""
    if solver == "binary":
        X, y = _binary()
        first = solve_binary(X, y, C=0.05, bias=1.0)
        weights = np.append(first.w, first.bias)
        kept = [first.w.copy(), first.alpha.copy(), weights.copy()]
        solve_binary(X, y, C=1.0, bias=1.0, warm_start=first.alpha, warm_weights=weights)
        now = [first.w, first.alpha, weights]
    else:
        X, y = _multiclass()
        first = solve_ovr(X, y, 3, C=0.05, bias=1.0)
        kept = [first.w.copy(), first.alpha.copy(), first.bias.copy()]
        solve_ovr(X, y, 3, C=1.0, bias=1.0, warm_start=first.alpha,
                  warm_weights=(first.w, first.bias))  # fmt: skip
        now = [first.w, first.alpha, first.bias]
    for before, after in zip(kept, now, strict=True):
        np.testing.assert_array_equal(before, after)


def test_threaded_binary_solves_take_the_weights_too(binary_rebuilds, monkeypatch):
    from solvers.binary import crowding, parallel

    monkeypatch.setattr(parallel, "threads_for", lambda csr, n_kept, n_jobs, *mode: n_jobs)
    monkeypatch.setattr(crowding, "CPU_SHARE_FLOOR", 0.0)
    X, y = _binary()
    options = dict(loss="squared_hinge", bias=1.0, tol=1e-8, max_iter=50_000, newton=False,
                   n_jobs=2, deterministic=True)  # fmt: skip
    first = solve_binary(X, y, C=0.05, **options)
    binary_rebuilds.clear()
    given = solve_binary(X, y, C=1.0, warm_start=first.alpha,
                         warm_weights=np.append(first.w, first.bias), **options)  # fmt: skip
    assert binary_rebuilds == []
    cold = solve_binary(X, y, C=1.0, **options)
    bound = (abs(given.duality_gap) + abs(cold.duality_gap)) * max(1.0, abs(cold.primal))
    assert given.converged and abs(given.duality_gap) < 1e-6
    assert abs(given.primal - cold.primal) <= bound + 1e-9


def test_a_path_rebuilds_after_a_newton_finish():
    """The weights of a solve finished by Newton are its w̃, not those of the α(w̃) it reports:
    they are not handed on."""

    class Finished:
        method, w, bias = "newton", np.ones(3), 0.5

    assert search.dual_weights(Finished(), 1.0) is None
    Finished.method = "dcd"
    np.testing.assert_array_equal(search.dual_weights(Finished(), 2.0), [1.0, 1.0, 1.0, 0.25])
    assert search.dual_weights(None, 1.0) is None
