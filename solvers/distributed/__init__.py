"""Training on rows split over a Dask cluster: CoCoA+ with the binary DCD kernel as the local
solver (`cocoa`) with its σ' chosen round by round (`sigma`), one-vs-rest on top (`ovr`), the
worker-side blocks (`block`), their placement and recovery (`cluster`) and where partitions
come from (`sources`).

Needs the ``distributed`` extra (dask.distributed).
"""

from solvers.distributed.cocoa import solve_binary
from solvers.distributed.ovr import solve_ovr
from solvers.distributed.sources import (
    LocalArrays,
    Partition,
    StoredRows,
    balanced_cuts,
    dask_partitions,
    split_rows,
    stored_partitions,
)

__all__ = [
    "LocalArrays",
    "Partition",
    "StoredRows",
    "balanced_cuts",
    "dask_partitions",
    "solve_binary",
    "solve_ovr",
    "split_rows",
    "stored_partitions",
]
