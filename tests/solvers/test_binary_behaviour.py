"""solve_binary's loop policy: callback, stop, time budget, seeds, warm start, edge cases."""

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from solvers import Progress, Status
from solvers.binary import solve_binary
from solvers.binary.state import SolveState
from tests.solvers._binary_helpers import (
    augmented,
    certify,
    dual,
    load,
    primal,
    synthetic,
    w_tilde_of,
)


def test_callback_once_per_iteration_with_non_increasing_dual():
    X, y = load("heart_scale")
    seen = []
    result = solve_binary(
        X,
        y,
        loss="hinge",
        bias=1.0,
        tol=1e-3,
        max_iter=5000,
        callback=seen.append,
        objective_every=1,
    )
    assert result.status is Status.CONVERGED
    assert [p.iteration for p in seen] == list(range(1, result.n_iter + 1))
    assert seen == result.history
    assert all(isinstance(p, Progress) for p in seen)
    duals = [p.dual for p in seen]
    assert all(d is not None for d in duals)
    # every coordinate step decreases f(α); allow rounding noise only
    assert all(b <= a + 1e-9 * abs(a) for a, b in zip(duals, duals[1:], strict=False))
    assert all(p.primal >= -p.dual - 1e-9 for p in seen)  # weak duality
    assert seen[-1].gap == pytest.approx(result.gap)
    assert all(p.gap == pytest.approx(p.M - p.m) for p in seen)
    assert all(0 < p.active <= X.shape[0] for p in seen)
    assert seen[-1].elapsed_s >= seen[0].elapsed_s >= 0


def test_objectives_only_every_k_passes_of_work():
    X, y = load("heart_scale")
    plain = solve_binary(X, y, tol=1e-6, objective_every=7, max_iter=50, shrinking=False)
    passes = plain.history[: plain.n_iter]  # then one record of the returned state
    with_objectives = [p.iteration for p in passes if p.primal is not None]
    assert with_objectives == [i for i in range(1, plain.n_iter + 1) if i % 7 == 0]
    assert plain.primal is not None and plain.dual is not None
    # with shrinking a pass counts the fraction of samples it visited: the objective pass
    # (over all samples) then costs at most about 1/k of the work
    X, y = load("a9a")
    shrunk = solve_binary(X, y, loss="hinge", tol=1e-3, objective_every=5, max_iter=300)
    at = [p.iteration for p in shrunk.history if p.primal is not None]
    assert len(at) >= 3
    assert min(np.diff([0, *at])) >= 5  # a pass counts at most 1
    assert len(at) < shrunk.n_iter / 10  # shrunk passes count less


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
@pytest.mark.parametrize("watched", [False, True])
def test_a_converged_solve_ends_on_a_record_of_its_objectives(loss, watched):
    # The last record (the one a callback sees last) describes the returned (w̃, α): with its
    # primal, dual and duality gap, as the parallel rounds' converged record has them, not only
    # the result.
    X, y = synthetic(n=300, d=40, seed=0)
    seen = []
    result = solve_binary(X, y, loss=loss, C=0.5, bias=1.0, tol=1e-3, max_iter=10_000,
                          newton=False, callback=seen.append if watched else None)  # fmt: skip
    assert result.status is Status.CONVERGED and result.method == "dcd"
    last = result.history[-1]
    if watched:
        assert seen[-1] is last
    w_tilde = w_tilde_of(result, 1.0)
    sign = np.where(y >= 0, 1.0, -1.0)
    np.testing.assert_allclose(w_tilde, augmented(X, 1.0).T @ (sign * result.alpha), atol=1e-9)
    assert last.primal == pytest.approx(primal(X, y, w_tilde, 0.5, loss, 1.0), rel=1e-9)
    assert last.dual == pytest.approx(dual(result.alpha, y, w_tilde, np.full(y.shape, 0.5), loss),
                                      rel=1e-9)  # fmt: skip
    assert (last.primal, last.dual, last.duality_gap) == (
        result.primal, result.dual, result.duality_gap
    )


def test_callback_returning_false_stops_cleanly():
    X, y = load("breast-cancer")
    result = solve_binary(X, y, tol=1e-9, callback=lambda p: p.iteration < 3)
    assert result.status is Status.STOPPED
    # three passes, then the measure of the returned state (the callback stopped a shrunk pass)
    assert result.n_iter == 3 and len(result.history) == 4
    assert result.history[-1].iteration == 3 and result.history[-1].gap == result.gap
    assert np.isfinite(result.primal) and np.isfinite(result.w).all()


def test_time_limit():
    X, y = load("a9a")
    result = solve_binary(X, y, loss="hinge", tol=1e-12, max_iter=100_000, time_limit=0.05)
    assert result.status is Status.TIME_LIMIT
    assert 1 <= result.n_iter < 100_000


def test_max_iter_status():
    X, y = load("breast-cancer")
    result = solve_binary(X, y, tol=1e-12, max_iter=4)
    assert result.status is Status.MAX_ITER and result.n_iter == 4


@pytest.mark.parametrize("order", ["permute", "random"])
def test_same_seed_same_result_other_seed_other_path(order):
    X, y = load("heart_scale")
    a = solve_binary(X, y, loss="hinge", random_state=5, order=order, max_iter=20)
    b = solve_binary(X, y, loss="hinge", random_state=5, order=order, max_iter=20)
    c = solve_binary(X, y, loss="hinge", random_state=6, order=order, max_iter=20)
    np.testing.assert_array_equal(a.alpha, b.alpha)
    np.testing.assert_array_equal(a.w, b.w)
    assert [p.gap for p in a.history] == [p.gap for p in b.history]
    assert not np.array_equal(a.alpha, c.alpha)


def test_global_rng_is_not_used():
    X, y = load("heart_scale")
    np.random.seed(0)  # noqa: NPY002
    state = np.random.get_state()[1].copy()  # noqa: NPY002
    solve_binary(X, y, max_iter=5)
    np.testing.assert_array_equal(np.random.get_state()[1], state)  # noqa: NPY002


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge", "squared_error"])
def test_warm_start_from_C_is_faster_for_2C(loss):
    X, y = load("mushrooms")
    first = solve_binary(X, y, loss=loss, C=0.5, tol=1e-3, max_iter=10_000)
    cold = solve_binary(X, y, loss=loss, C=1.0, tol=1e-3, max_iter=10_000)
    warm = solve_binary(X, y, loss=loss, C=1.0, tol=1e-3, max_iter=10_000, warm_start=first.alpha)
    assert warm.status is Status.CONVERGED
    assert warm.n_iter < cold.n_iter
    assert warm.primal == pytest.approx(cold.primal, rel=1e-3)
    assert first.alpha is not warm.alpha


def test_warm_start_rebuilds_w_and_clips():
    X, y = load("heart_scale")
    ref = solve_binary(X, y, loss="hinge", C=1.0, tol=1e-6, max_iter=100_000)
    again = solve_binary(
        X, y, loss="hinge", C=1.0, tol=1e-6, max_iter=100_000, warm_start=ref.alpha
    )
    assert again.n_iter <= 10
    np.testing.assert_allclose(again.w, ref.w, atol=1e-6)
    clipped = solve_binary(X, y, loss="hinge", C=1.0, max_iter=1, warm_start=np.full(270, 9.0))
    assert clipped.alpha.max() <= 1.0
    with pytest.raises(ValueError, match=r"warm_start must have shape \(270,\)"):
        solve_binary(X, y, warm_start=np.zeros(3))


def test_zero_weight_rows_are_dropped():
    X, y = synthetic(n=200, seed=2)
    C = np.ones(200)
    C[::3] = 0.0
    keep = C > 0
    full = solve_binary(X, y, loss="squared_hinge", C=C, bias=1.0, tol=1e-8, max_iter=100_000)
    sub = solve_binary(
        X[keep], y[keep], loss="squared_hinge", C=1.0, bias=1.0, tol=1e-8, max_iter=100_000
    )
    np.testing.assert_array_equal(full.alpha[~keep], 0.0)
    np.testing.assert_allclose(full.w, sub.w, rtol=1e-6, atol=1e-8)
    assert full.primal == pytest.approx(sub.primal, rel=1e-9)


def test_all_rows_dropped_gives_zero_model():
    X, y = synthetic(n=50, seed=2)
    result = solve_binary(X, y, C=np.zeros(50), bias=1.0)
    assert result.status is Status.CONVERGED and result.n_iter == 0
    assert not result.w.any() and result.bias == 0.0 and result.primal == 0.0


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_all_zero_rows(loss):
    X = sp.csr_matrix((30, 4))
    y = np.where(np.arange(30) % 3 == 0, 1.0, -1.0)
    result = solve_binary(X, y, loss=loss, C=2.0, tol=1e-8)
    assert result.status is Status.CONVERGED
    assert not result.w.any()
    if loss == "hinge":
        np.testing.assert_array_equal(result.alpha, 2.0)  # x_i = 0: α_i → U (the paper)
    else:
        np.testing.assert_allclose(result.alpha, 4.0)  # α = 1 / D_ii = 2C
    with_bias = solve_binary(X, y, loss=loss, C=2.0, bias=1.0, tol=1e-8, max_iter=10_000)
    rel_gap, _, _ = certify(X, y, with_bias, 2.0, loss, 1.0)
    assert with_bias.status is Status.CONVERGED and abs(rel_gap) < 1e-6


def test_a_pass_that_shrinks_everything_restores_the_full_set(monkeypatch):
    X, y = load("heart_scale")
    ref = solve_binary(X, y, loss="hinge", tol=1e-4, max_iter=10_000)
    original = SolveState.epoch
    calls = []

    def epoch(self, order_index, active_size, M_bar, m_bar):
        calls.append(active_size)
        if len(calls) == 3:  # pretend the third pass shrank every coordinate
            return 0, -np.inf, np.inf
        return original(self, order_index, active_size, M_bar, m_bar)

    monkeypatch.setattr(SolveState, "epoch", epoch)
    result = solve_binary(X, y, loss="hinge", tol=1e-4, max_iter=10_000)
    assert result.status is Status.CONVERGED
    assert result.history[2].active == 0
    assert calls[3] == X.shape[0]  # the next pass runs over the full set again
    assert result.primal == pytest.approx(ref.primal, rel=1e-4)


def test_shrinking_changes_the_active_set_but_not_the_optimum():
    X, y = load("a9a")
    shrunk = solve_binary(X, y, loss="squared_hinge", tol=1e-3, max_iter=10_000)
    plain = solve_binary(X, y, loss="squared_hinge", tol=1e-3, max_iter=10_000, shrinking=False)
    assert min(p.active for p in shrunk.history) < 0.7 * X.shape[0]
    assert all(p.active == X.shape[0] for p in plain.history)
    assert shrunk.history[-1].active == X.shape[0]  # converged on a full pass
    assert shrunk.primal == pytest.approx(plain.primal, rel=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"loss": "log"}, "loss must be one of"),
        ({"order": "sorted"}, "order must be one of"),
        ({"tol": 0}, "tol must be a finite number > 0"),
        ({"max_iter": 0}, "max_iter must be an integer >= 1"),
        ({"bias": -1.0}, "bias must be a finite number >= 0"),
        ({"bias": 1e160}, r"bias must be at most 1e\+100"),  # its square overflowed: zeros
        ({"C": -1.0}, "C must be a finite number > 0"),
        ({"C": np.ones(3)}, r"C must be a scalar or have one value per sample, shape \(20,\)"),
        ({"objective_every": 0}, "objective_every must be an integer >= 1"),
        ({"time_limit": 0}, "time_limit must be a positive number"),
    ],
)
def test_invalid_parameters(kwargs, message):
    X, y = synthetic(n=20, seed=1)
    with pytest.raises(ValueError, match=message):
        solve_binary(X, y, **kwargs)


def test_invalid_labels_and_data():
    X, y = synthetic(n=20, seed=1)
    with pytest.raises(ValueError, match="binary labels must be -1 or \\+1"):
        solve_binary(X, np.arange(20.0))
    with pytest.raises(ValueError, match=r"y must have shape \(20,\)"):
        solve_binary(X, y[:5])
    with pytest.raises(ValueError, match="real numbers"):
        solve_binary(X.astype(np.complex128), y)


def test_exported_lazily():
    assert solvers.solve_binary is solve_binary


@pytest.mark.parametrize("loss", ["hinge", "squared_hinge"])
def test_prefetching_whole_rows_does_not_change_the_result(monkeypatch, loss):
    import solvers.binary.state as binary

    X, y = load("a9a")  # rows of 14 entries: only their first and last lines by default
    ref = solve_binary(X, y, loss=loss, tol=1e-3, max_iter=10_000)
    monkeypatch.setattr(binary, "LONG_ROW_ENTRIES", 1)  # every row prefetched whole
    got = solve_binary(X, y, loss=loss, tol=1e-3, max_iter=10_000)
    np.testing.assert_array_equal(got.alpha, ref.alpha)
    np.testing.assert_array_equal(got.w, ref.w)
    assert got.primal == ref.primal and got.n_iter == ref.n_iter


def test_objectives_by_default_only_with_a_callback():
    X, y = load("heart_scale")
    quiet = solve_binary(X, y, tol=1e-6, max_iter=40, shrinking=False)
    passes = quiet.history[:40]  # then one record of the returned state, with its objectives
    assert quiet.n_iter == 40 and all(p.primal is None and p.dual is None for p in passes)
    # the result still reports both objectives, equal to those of a fresh evaluation
    watched = solve_binary(X, y, tol=1e-6, max_iter=40, shrinking=False, callback=lambda p: None)
    np.testing.assert_array_equal(watched.alpha, quiet.alpha)
    assert quiet.primal == watched.primal and quiet.dual == watched.dual
    at = [p.iteration for p in watched.history[:40] if p.primal is not None]
    assert at == [10, 20, 30, 40]
    explicit = solve_binary(X, y, tol=1e-6, max_iter=40, shrinking=False, objective_every=20)
    assert [p.iteration for p in explicit.history[:40] if p.primal is not None] == [20, 40]
