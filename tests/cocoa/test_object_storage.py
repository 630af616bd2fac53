"""Partitions read by the Dask workers straight from object storage (moto's S3 server): each
worker fetches the byte ranges of its own rows (`app.services.stored_ranges.ObjectArrays`), and
the solve reaches the single-machine optimum."""

from __future__ import annotations

import boto3
import numpy as np
import pytest

from app.services.stored_ranges import ObjectArrays
from solvers.distributed import solve_binary, stored_partitions
from tests.cocoa.test_faults import store
from tests.cocoa.test_optimum import reference_primal, synthetic_set


@pytest.fixture
def s3_client_cluster(s3_env):
    """A cluster started after the S3 variables are set, so that its workers reach the bucket."""
    import distributed

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
        memory_limit=0, silence_logs=50,
    ) as cluster, distributed.Client(cluster) as c:  # fmt: skip
        yield c


def upload(tmp_path, bucket, dataset_id, X, y):
    directory = store(tmp_path / dataset_id, X, y)
    s3 = boto3.client("s3")
    for path in sorted(directory.iterdir()):
        s3.upload_file(str(path), bucket, f"margin/datasets/{dataset_id}/{path.name}")


def test_workers_read_their_rows_from_the_bucket(s3_env, s3_client_cluster, tmp_path):
    _, bucket = s3_env
    X, y = synthetic_set()
    upload(tmp_path, bucket, "ds_s3", X, y)
    arrays = ObjectArrays(f"s3://{bucket}/margin", 5.0, "ds_s3")
    parts = stored_partitions(arrays, 2, X.shape[1])
    # the opener reads exactly the stored rows
    first = parts[0].load()
    rows = slice(parts[0].start, parts[0].stop)
    assert (first.X != X[rows]).nnz == 0 and np.array_equal(first.y, y[rows])
    result = solve_binary(parts, client=s3_client_cluster, loss="squared_hinge", C=0.03,
                          tol=1e-6, max_rounds=3000, local_passes=2)  # fmt: skip
    assert result.status == "converged" and result.duality_gap <= 1e-6
    P_ref = reference_primal(X, y, "squared_hinge", 0.03, 0.0)
    assert abs(result.primal - P_ref) <= 1e-5 * abs(P_ref)
