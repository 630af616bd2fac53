"""A client of the shared Dask LocalCluster (`tests.shared_dask.SharedDask`)."""

import pytest

from tests.shared_dask import SharedDask


@pytest.fixture
def client(dask_cluster):
    """The default client of the shared cluster (actors look it up), closed with it after the
    last test that needs it."""
    return SharedDask.get_client()
