"""The Dask cluster shared by the tests that need one (`tests.conftest.dask_cluster`, the
cocoa tests' `client`), in a module of its own so that both conftests see one state."""

from __future__ import annotations


class SharedDask:
    """The Dask LocalCluster of 2 worker processes with one thread each (the machines have 2
    cores) shared by every test that needs one, and its default client; `distributed` is part of
    the test extra. Started by the first test that asks for it and closed after the last one:
    as a session fixture it kept its scheduler and two worker processes to the end of the run,
    through every later module."""

    cluster = None
    client = None
    last_user: str | None = None  # the node id of the last test to run that needs the cluster

    @classmethod
    def get_cluster(cls):
        if cls.cluster is None:
            import distributed

            cls.cluster = distributed.LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=":0",
                memory_limit=0,
                silence_logs=40,
            )
        return cls.cluster

    @classmethod
    def get_client(cls):
        """A client of the cluster, the process's default one (actors look it up)."""
        if cls.client is None:
            import distributed

            cls.client = distributed.Client(cls.get_cluster())
        return cls.client

    @classmethod
    def close(cls) -> None:
        if cls.client is not None:
            cls.client.close()
            cls.client = None
        if cls.cluster is not None:
            cls.cluster.close()
            cls.cluster = None
