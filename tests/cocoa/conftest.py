"""A small Dask cluster for the distributed solver's tests: worker processes, one thread each
(the machines have 2 cores), shared by the whole folder."""

import distributed  # the `distributed` extra, part of `test`: a missing one fails
import pytest


@pytest.fixture(scope="session")
def cluster():
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit=0,
        silence_logs=40,
    ) as local:
        yield local


@pytest.fixture(scope="session")
def client(cluster):
    with distributed.Client(cluster) as c:
        yield c
