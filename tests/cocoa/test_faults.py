"""Losing a worker mid-solve, and what each worker holds.

A worker process is killed (SIGKILL) between two rounds; its partitions come back on another
worker from their source — read again from storage, sent again by the driver, or taken from
the cluster's second copy — with α from the last checkpoint, and the solve still reaches the
certified optimum. The memory test reads a stored dataset row range by row range and checks
each worker's peak RSS against what it holds and against the whole CSR matrix.
"""

import os
import signal

import numpy as np
import pytest
import scipy.sparse as sp

import solvers
from benchmarks._common import synthetic_sparse
from solvers.distributed import Partition, solve_binary, split_rows, stored_partitions
from tests.solvers._binary_helpers import certify


def store(directory, X, y):
    """A dataset in the service's stored layout: one 1-D `.npy` file per CSR array."""
    directory.mkdir(parents=True, exist_ok=True)
    X = sp.csr_matrix(X)
    np.save(directory / "data.npy", X.data)
    np.save(directory / "indices.npy", X.indices.astype(np.int32))
    np.save(directory / "indptr.npy", X.indptr.astype(np.int64))
    np.save(directory / "y.npy", np.asarray(y, dtype=np.float64))
    return directory


def partitions(kind, client, X, y, tmp_path, K):
    if kind == "stored":
        return stored_partitions(store(tmp_path / "set", X, y), K, X.shape[1]), None
    parts = split_rows(X, y, K)
    if kind == "future":
        return client.scatter([Partition(p.X, p.y) for p in parts]), None
    return [p.X for p in parts], [p.y for p in parts]


@pytest.fixture
def fresh_client():
    """A cluster of its own for a test that kills one of its workers (the session's cluster
    stays whole whether or not the nanny brings the killed worker back in time)."""
    import distributed

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        memory_limit=0, silence_logs=50,
    ) as cluster, distributed.Client(cluster) as c:  # fmt: skip
        yield c


class KillOnce:
    """A progress callback that kills one worker process after round `at`."""

    def __init__(self, client, at):
        self.client, self.at, self.killed = client, at, None

    def __call__(self, progress):
        if self.killed is None and progress.iteration >= self.at:
            address, pid = sorted(self.client.run(os.getpid).items())[0]
            os.kill(pid, signal.SIGKILL)
            self.killed = address


@pytest.mark.parametrize("kind", ["memory", "stored", "future"])
def test_a_worker_killed_mid_solve_and_the_solve_still_certifies(fresh_client, tmp_path, kind):
    client = fresh_client
    X, y = synthetic_sparse(3000, 2000, 20, seed=1)
    X_parts, y_parts = partitions(kind, client, X, y, tmp_path, 4)
    kill = KillOnce(client, at=3)
    result = solve_binary(
        X_parts, y_parts, client=client, loss="squared_hinge", C=0.03, tol=1e-6,
        max_rounds=2000, local_passes=2, callback=kill,
    )  # fmt: skip
    assert kill.killed is not None
    recoveries = result.extra["recoveries"]
    assert recoveries and {r["source"] for r in recoveries} == {kind}
    assert result.converged and result.duality_gap <= 1e-6
    gap, _, drift = certify(X, y, result, 0.03, "squared_hinge", 0.0)
    assert gap <= 1.01e-6 and drift < 1e-8
    ref = solvers.solve_binary(X, y, C=0.03, tol=1e-9, max_iter=100_000)
    assert abs(result.primal - ref.primal) <= 1e-5 * ref.primal


def test_a_lost_stored_partition_is_read_again_from_storage(client, tmp_path):
    """No copy of a stored partition is kept anywhere but on its worker and in storage."""
    X, y = synthetic_sparse(2000, 1000, 15, seed=2)
    parts = stored_partitions(store(tmp_path / "set", X, y), 2, X.shape[1])
    assert [(p.start, p.stop) for p in parts][0][0] == 0 and parts[-1].stop == 2000
    assert sp.issparse(parts[0].load().X) and (parts[0].load().X != X[: parts[0].stop]).nnz == 0


def worker_memory(client):
    def status():
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields

    return client.run(status)


def reset_peak(client):
    def reset():
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # VmHWM := VmRSS

    client.run(reset)


def wide_rows(n, d, per_row, seed=0):
    """A CSR matrix of sorted distinct indices made directly (no sort of n·per_row keys)."""
    rng = np.random.default_rng(seed)
    stride = d // per_row
    indices = (rng.integers(0, stride, size=(n, 1)) + stride * np.arange(per_row)).astype(np.int32)
    data = rng.random(n * per_row) / np.sqrt(per_row)
    indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
    X = sp.csr_matrix((data, indices.ravel(), indptr), shape=(n, d))
    y = np.where(X @ rng.standard_normal(d) > 0, 1.0, -1.0)
    return X, y


def test_each_worker_holds_only_its_partitions(client, tmp_path):
    X, y = wide_rows(250_000, 5000, 50)  # 151 MB of CSR arrays
    whole = X.data.nbytes + X.indices.nbytes + X.indptr.nbytes
    directory = store(tmp_path / "big", X, y)
    del X
    warm = split_rows(*synthetic_sparse(200, 50, 5, seed=0), 2)  # kernels loaded everywhere
    solve_binary([p.X for p in warm], [p.y for p in warm], client=client, max_rounds=2)
    client.run(__import__("gc").collect)
    before = worker_memory(client)
    reset_peak(client)
    parts = stored_partitions(directory, 2, 5000)
    result = solve_binary(parts, client=client, C=0.1, max_rounds=3)
    assert result.n_iter == 3
    peak = worker_memory(client)
    share = whole / 2  # two partitions of about equal non-zeros, one per worker
    for address, now in peak.items():
        grew = now["VmHWM"] - before[address]["VmRSS"]
        # its CSR rows plus the record (24 bytes a row), w and Δw; never the whole matrix
        assert grew <= 1.2 * share + 40e6, (address, grew, share)
        assert grew < 0.8 * whole, (address, grew, whole)


def test_an_older_checkpoint_still_gives_a_consistent_state(fresh_client):
    """With α checkpointed every 5 rounds a lost block restarts from up to 4 rounds back; w is
    rebuilt from every block's α, so the certificate stays exact."""
    X, y = synthetic_sparse(3000, 2000, 20, seed=1)
    parts = split_rows(X, y, 4)
    client = fresh_client
    kill = KillOnce(client, at=7)
    result = solve_binary(
        [p.X for p in parts], [p.y for p in parts], client=client, C=0.03, tol=1e-6,
        max_rounds=2000, checkpoint_every=5, callback=kill,
    )  # fmt: skip
    assert kill.killed is not None and result.extra["recoveries"]
    gap, _, drift = certify(X, y, result, 0.03, "squared_hinge", 0.0)
    assert result.converged and gap <= 1.01e-6 and drift < 1e-8
    assert result.extra["bytes"]["checkpoints"] < result.n_iter * X.shape[0] * 8 / 2
