"""BLAS_THREADS: every service process runs its BLAS library with that many threads (default 1),
set at start by `margin`'s entry point and inherited by the processes it spawns."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys

import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from app.blas import ENV_NAMES, limit_blas_threads

# what `margin migrate` sees once main() has applied the settings: the threads of its BLAS
# library, loaded (with numpy) before main() when `numpy_first`, else after
PROBE = """
import json, sys
if sys.argv[2] == "1":
    import numpy
from threadpoolctl import threadpool_info
import app.cli as cli

def probe(*args):
    import numpy
    print(json.dumps([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]))

cli.cmd_migrate = probe
cli.main(["migrate", "--data-dir", sys.argv[1]])
"""


def blas_threads() -> list[int]:
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def report_blas_threads(queue) -> None:
    import numpy  # noqa: F401  (loads the BLAS library, as a worker process does)

    queue.put(blas_threads())


@pytest.fixture
def restored_blas(monkeypatch):
    for name in ENV_NAMES:
        monkeypatch.setenv(name, os.environ.get(name, ""))  # put back after the test
    with threadpool_limits(limits=max(blas_threads())):
        yield


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to tell 1 from 2")
@pytest.mark.parametrize(("threads", "numpy_first"), [(1, True), (1, False), (2, False)])
def test_margin_commands_run_blas_with_the_setting(tmp_path, threads, numpy_first):
    env = {**os.environ, "BLAS_THREADS": str(threads)}
    for name in ENV_NAMES:
        env.pop(name, None)  # the library's own default: every core
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), str(int(numpy_first))],
        env=env, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen and set(seen) == {threads}, out.stdout


def test_spawned_processes_inherit_the_limit(restored_blas):
    limit_blas_threads(1)
    assert set(blas_threads()) == {1}
    context = multiprocessing.get_context("spawn")  # as the local pool and the parsers start
    queue = context.Queue()
    child = context.Process(target=report_blas_threads, args=(queue,))
    child.start()
    seen = queue.get(timeout=60)
    child.join(60)
    assert seen and set(seen) == {1}, seen


def test_the_setting_is_at_least_one():
    from pydantic import ValidationError

    from app.config import Settings

    assert Settings().blas_threads == 1
    with pytest.raises(ValidationError):
        Settings(blas_threads=0)
