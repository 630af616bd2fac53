"""The spawned child processes that parse uploads, so the API process never holds a parsed dataset.

`ParserPool.parse` runs `dataset_files.parse_to_arrays` in a child, which writes the arrays under
the directory it is given; a child that dies is a 500 for its upload, and the pool is started anew
on the next use. `warm` starts the children at the API's start; `shutdown` stops them.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from app.errors import ProblemError
from app.services import dataset_files


class ParserPool:
    """Spawned child processes that parse uploads (started on first use, replaced if they die)."""

    def __init__(self, max_workers: int = 2):
        self.max_workers = max_workers
        self._executor: ProcessPoolExecutor | None = None

    def _pool(self) -> ProcessPoolExecutor:
        if self._executor is None:
            self._executor = ProcessPoolExecutor(
                self.max_workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=dataset_files.watch_parent,
            )
        return self._executor

    async def parse(
        self,
        source: Path,
        out_dir: Path,
        growing: bool = False,
        limits: dict | None = None,
        fmt: str | None = None,
        options: dict | None = None,
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(
                self._pool(),
                dataset_files.parse_to_arrays,
                str(source),
                str(out_dir),
                growing,
                limits,
                fmt,
                options,
            )
        except BrokenProcessPool:
            self._executor = None
            raise ProblemError(
                500, "Parser failed", "the parser process died while reading the upload"
            ) from None

    def warm(self) -> None:
        """Start the parser processes now so that the first upload does not wait for them."""
        pool = self._pool()
        for _ in range(self.max_workers):
            pool.submit(dataset_files.warm_up)

    def shutdown(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
