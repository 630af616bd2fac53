"""A client of the session's Dask LocalCluster (`tests.conftest.dask_cluster`)."""

import distributed
import pytest


@pytest.fixture(scope="session")
def client(dask_cluster):
    with distributed.Client(dask_cluster) as c:  # the default client: actors look it up
        yield c
