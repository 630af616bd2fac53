"""How a round is run: the adaptive σ' (every step taken descends), the local time budget,
and partitions given as Dask collections — each still reaching the certified optimum."""

import dask.array as da
import dask.bag as db
import numpy as np
import pytest

from benchmarks._common import synthetic_sparse
from solvers.distributed import solve_binary, split_rows
from tests.solvers._binary_helpers import certify


@pytest.fixture(scope="module")
def problem():
    X, y = synthetic_sparse(2400, 1500, 15, seed=11)
    return X, y, split_rows(X, y, 4)


def test_adaptive_sigma_descends_every_round_and_beats_the_safe_bound(client, problem):
    X, y, parts = problem
    runs = {}
    for sigma in ("adaptive", 4.0):
        seen = []
        runs[sigma] = solve_binary(
            [p.X for p in parts], [p.y for p in parts], client=client, C=0.1, tol=1e-6,
            sigma=sigma, max_rounds=3000, callback=seen.append,
        )  # fmt: skip
        duals = np.array([p.dual for p in seen])  # f(α), minimisation form
        # a rejected step is undone, so f never rises from one measured state to the next
        assert np.all(np.diff(duals) <= 1e-12 * np.abs(duals[:-1]).max())
    adaptive, safe = runs["adaptive"], runs[4.0]
    assert adaptive.converged and safe.converged
    assert adaptive.extra["rejected_rounds"] >= 1 and safe.extra["rejected_rounds"] == 0
    assert 1.0 <= adaptive.extra["sigma"] <= 4.0 and safe.extra["sigma"] == 4.0
    assert adaptive.n_iter < safe.n_iter
    for result in runs.values():
        gap, _, drift = certify(X, y, result, 0.1, "squared_hinge", 0.0)
        assert gap <= 1.01e-6 and drift < 1e-8
    assert abs(adaptive.primal - safe.primal) <= 2e-6 * abs(safe.primal)


def test_local_time_budget_cuts_a_round_short_and_still_certifies(client, problem):
    X, y, parts = problem
    result = solve_binary(
        [p.X for p in parts], [p.y for p in parts], client=client, C=0.1, tol=1e-4,
        local_passes=50, local_time=1e-9, max_rounds=5000,
    )  # fmt: skip
    # each block stops after its first sixteenth of a pass, far short of 50 passes
    steps = np.array(result.extra["local_steps"])
    assert steps.max() <= X.shape[0] // 8
    assert result.converged
    gap, _, drift = certify(X, y, result, 0.1, "squared_hinge", 0.0)
    assert gap <= 1.01e-4 and drift < 1e-8


def _reference(client, parts):
    return solve_binary([p.X for p in parts], [p.y for p in parts], client=client, C=0.1,
                        tol=1e-6, max_rounds=3000)  # fmt: skip


def test_a_dask_bag_of_partitions(client, problem):
    X, y, parts = problem
    bag = db.from_sequence([(p.X, p.y) for p in parts], npartitions=2)  # 2 elements each
    result = solve_binary(bag, client=client, C=0.1, tol=1e-6, max_rounds=3000)
    assert result.converged and len(result.extra["partitions"]) == 4
    assert all(s["kind"] == "future" for s in result.extra["sources"])
    gap, _, drift = certify(X, y, result, 0.1, "squared_hinge", 0.0)
    assert gap <= 1.01e-6 and drift < 1e-8
    ref = _reference(client, parts)
    assert abs(result.primal - ref.primal) <= 2e-6 * abs(ref.primal)


def test_a_dask_array_chunked_by_rows(client):
    X, y = synthetic_sparse(2400, 200, 15, seed=12)  # dense chunks, small enough to send
    dense = X.toarray()
    Xd = da.from_array(dense, chunks=(600, dense.shape[1]))
    yd = da.from_array(y, chunks=600)
    result = solve_binary(Xd, yd, client=client, C=0.1, tol=1e-6, max_rounds=3000)
    assert result.converged and result.extra["partitions"] == [(0, 600), (600, 1200),
                                                               (1200, 1800), (1800, 2400)]
    gap, _, drift = certify(X, y, result, 0.1, "squared_hinge", 0.0)
    assert gap <= 1.01e-6 and drift < 1e-8
    with pytest.raises(ValueError, match="row chunks"):
        solve_binary(Xd, da.from_array(y, chunks=800), client=client)
    with pytest.raises(ValueError, match="needs its labels"):  # weights never taken as labels
        solve_binary(Xd, None, client=client, sample_weight=da.from_array(y, chunks=600))
    from_numpy = solve_binary(Xd, y, client=client, C=0.1, tol=1e-6, max_rounds=3000)
    assert from_numpy.converged and from_numpy.primal == pytest.approx(result.primal, rel=1e-5)
    with pytest.raises(ValueError, match="chunked by rows only"):
        solve_binary(da.from_array(dense, chunks=(600, 100)), yd, client=client)


@pytest.mark.parametrize("local_time", [None, 1.0])
def test_a_partition_without_active_rows(client, problem, local_time):
    """A partition whose rows all weigh 0 takes no steps and the others still converge."""
    X, y, parts = problem
    weights = [np.ones(p.X.shape[0]) for p in parts]
    weights[1][:] = 0.0
    result = solve_binary(
        [p.X for p in parts], [p.y for p in parts], client=client, C=0.1, tol=1e-6,
        sample_weight=weights, local_time=local_time, max_rounds=3000,
    )  # fmt: skip
    assert result.converged
    C_i = 0.1 * np.concatenate(weights)
    gap, _, drift = certify(X, y, result, C_i, "squared_hinge", 0.0)
    assert gap <= 1.01e-6 and drift < 1e-8


def test_a_block_lost_while_a_step_is_undone(client, problem, monkeypatch):
    """The block comes back from a checkpoint older than the round (checkpoints every 5th
    round): w is rebuilt from the blocks, so the state stays consistent and certifies."""
    from solvers.distributed import cluster

    X, y, parts = problem
    original, lost = cluster.BlockSet.call_all, []

    def call_all(self, method, args=()):
        results, failed = original(self, method, args)
        if method == "revert" and not lost:
            self._recover(0)  # as after its worker died: placed again from the checkpoint
            lost.append(0)
            failed = [0]
        return results, failed

    monkeypatch.setattr(cluster.BlockSet, "call_all", call_all)
    result = solve_binary(
        [p.X for p in parts], [p.y for p in parts], client=client, C=0.1, tol=1e-6,
        checkpoint_every=5, max_rounds=3000,
    )  # fmt: skip
    assert lost and result.converged
    gap, _, drift = certify(X, y, result, 0.1, "squared_hinge", 0.0)
    assert gap <= 1.01e-6 and drift < 1e-8


def test_bad_round_options_are_refused(client, problem):
    _, _, parts = problem
    for bad in ({"sigma": 0.5}, {"sigma": "fast"}, {"local_time": 0.0}, {"local_time": "1"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            solve_binary([p.X for p in parts], [p.y for p in parts], client=client, **bad)
