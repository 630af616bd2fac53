"""How many threads the BLAS library (OpenBLAS under numpy) may use in each service process.

The service runs its own concurrency: requests in threads, jobs in worker processes whose solver
threads take the cores (`SOLVER_THREADS`). A BLAS call that splits itself over threads then waits
until each of its threads gets a core: on the 2-core development machine, with its cores taken by
training and concurrent requests, a dense prediction of 5,000 rows x 100 features took 5 times as
long with a thread per core as with one, while alone on an idle machine it was a quarter faster
(`benchmarks/bench_blas_threads.py`, BENCHMARKS.md). So each process gets `BLAS_THREADS`
(default 1), set in its BLAS library at once and in the environment the processes it spawns
(local workers, parsers) start from.
"""

from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

# read by OpenBLAS, MKL and BLIS when a process loads them
ENV_NAMES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def limit_blas_threads(threads: int) -> None:
    """At most ``threads`` BLAS threads in this process and in the processes it spawns."""
    for name in ENV_NAMES:
        os.environ[name] = str(threads)
    threadpool_limits(limits=threads, user_api="blas")
