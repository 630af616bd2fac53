"""The driver's handle on the blocks: one Dask actor per partition, placed on the workers,
called together each round, and rebuilt after a worker is lost.

A call that fails because its worker is gone (Dask raises `OSError` for an actor whose worker
cannot be reached) makes the block be placed again on a live worker from its source (read
again from storage, sent again by the driver, or taken from the cluster's other copy) and its α
set from the driver's last checkpoint. The caller then rebuilds w = Σ_k A_k α_k, so that (w, α)
stay consistent and every later certificate is exact.
"""

from __future__ import annotations

import time
from concurrent.futures import CancelledError

import numpy as np

from solvers.distributed.block import Block

RECOVERY_WAIT_S = 30.0  # how long a recovery waits for a live worker


class BlockSet:
    """The actors of one solve, in partition order, with the α checkpoint kept by the driver."""

    def __init__(self, client, sources, max_recoveries: int = 3):
        self.client, self.sources = client, sources
        self.max_recoveries = max_recoveries
        self.futures = [None] * len(sources)
        self.actors = [None] * len(sources)
        self.spec = None
        self.checkpoint = [None] * len(sources)  # None: α = 0
        self.recoveries: list[dict] = []
        workers = self._live_workers()
        self._place_all([workers[k % len(workers)] for k in range(len(sources))])
        self.info, failed = self.call_all("describe")
        if failed:
            self.info, _ = self.call_all("describe")
        n_features = {info["n_features"] for info in self.info}
        if len(n_features) != 1:
            raise ValueError(f"partitions must share one feature count, got {sorted(n_features)}")
        self.n_features = n_features.pop()
        self.rows = [info["n_rows"] for info in self.info]

    @property
    def bounds(self) -> list[tuple[int, int]]:
        """Each partition's rows [start, stop) in the concatenated order."""
        ends = np.cumsum([0, *self.rows]).tolist()
        return list(zip(ends[:-1], ends[1:], strict=True))

    def _live_workers(self) -> list[str]:
        deadline = time.monotonic() + RECOVERY_WAIT_S
        while True:
            workers = sorted(self.client.scheduler_info()["workers"])
            if workers or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        if not workers:
            raise RuntimeError("the Dask cluster has no workers")
        return workers

    def _place(self, k: int, worker: str) -> None:
        self._place_all([worker], [k])

    def _place_all(self, workers: list[str], which: list[int] | None = None) -> None:
        """Start the blocks ``which`` (all by default) on ``workers``, all at once: each
        worker loads its partition while the others load theirs."""
        which = range(len(self.sources)) if which is None else which
        futures = {}
        for k, worker in zip(which, workers, strict=True):
            arg = self.sources[k].place(self.client, worker)
            futures[k] = self.client.submit(
                Block, arg, actor=True, workers=[worker], allow_other_workers=True, pure=False
            )
        for k, future in futures.items():
            self.actors[k] = future.result()
            self.futures[k] = future  # the actor lives as long as its future is held

    def setup(self, spec: dict) -> None:
        """Start a new binary problem on every block at α = 0."""
        self.spec = spec
        self.checkpoint = [None] * len(self.sources)
        self.call_all("setup", (spec,))

    def call_all(self, method: str, args: tuple | list = ()):
        """Call ``method`` on every block at once, with ``args`` (one tuple for all, or a list
        of one tuple per block); returns (results in partition order, the partitions whose
        worker was lost and that were rebuilt — their result is None)."""
        per_block = args if isinstance(args, list) else [args] * len(self.actors)
        futures = [getattr(actor, method)(*a) for actor, a in zip(self.actors, per_block,
                   strict=True)]  # fmt: skip
        results, failed = [None] * len(futures), []
        for k, future in enumerate(futures):
            try:
                results[k] = future.result()
            except OSError:
                failed.append(k)
        for k in failed:
            self._recover(k)
        return results, failed

    def _recover(self, k: int) -> None:
        for attempt in range(1, self.max_recoveries + 1):
            started = time.perf_counter()
            workers = self._live_workers()
            try:
                self._place(k, workers[(k + attempt) % len(workers)])
                if self.spec is not None:
                    self.actors[k].setup(self.spec, self.checkpoint[k]).result()
            except (OSError, CancelledError):  # the worker or the copy it read is gone too
                time.sleep(0.5)
                continue
            self.recoveries.append(
                {"partition": k, "source": self.sources[k].kind, "attempt": attempt,
                 "seconds": time.perf_counter() - started}
            )  # fmt: skip
            return
        raise RuntimeError(f"partition {k} could not be placed again after losing its worker")

    def rebuild_w(self) -> np.ndarray:
        """w = Σ_k A_k α_k from the blocks' current α (after a recovery)."""
        while True:
            parts, failed = self.call_all("contribution")
            if not failed:
                return np.sum(parts, axis=0)

    def set_sigma(self, sigma: float) -> None:
        """The σ' a block placed again starts with (the running ones get it each round)."""
        if self.spec is not None:
            self.spec = {**self.spec, "sigma": float(sigma)}

    def set_checkpoint(self, alphas) -> None:
        self.checkpoint = list(alphas)

    def close(self) -> None:
        self.actors = [None] * len(self.sources)
        for future in self.futures:
            if future is not None:
                future.release()
        self.futures = [None] * len(self.sources)
