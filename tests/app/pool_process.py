"""`python -m tests.app.pool_process SETTINGS_JSON`: `margin worker` for tests — a local pool of
one worker process on the given settings (the test's data directory and database), run until
SIGTERM or SIGKILL.

With STALLING_TRAINER_ENV set, the LinearSVC trainer of the pool's workers sleeps for an hour
without calling its callback: a solver inside a long compiled call, which hears neither a cancel
nor a shutdown. The trainer is replaced at import: each spawned worker imports this module again
(as the `__mp_main__` of its pool), so the replacement reaches the process that runs the job.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from app.jobs.workers import process_state
from app.services import trainers

STALLING_TRAINER_ENV = "MARGIN_TEST_STALLING_TRAINER"
STALL_S = 3600.0


def stalling_trainer(params, X, y, qid, callback, n_jobs, init_dual=None):
    time.sleep(STALL_S)  # releases the GIL, as the solvers' compiled (nogil) kernels do
    raise AssertionError("the stalling trainer was meant to be stopped from outside")


if os.environ.get(STALLING_TRAINER_ENV):
    trainers.TRAINERS["LinearSVC"] = stalling_trainer


def start(settings, log_path: Path, **env: str) -> subprocess.Popen:
    """This module's pool in a subprocess on `settings`, its output in `log_path`."""
    root = Path(__file__).resolve().parents[2]
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.app.pool_process", settings.model_dump_json()],
            cwd=root,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def running(pid: int) -> bool:
    """Whether process `pid` exists and has not exited (a zombie waiting for its parent to
    reap it has exited)."""
    state = process_state(pid)
    return state is not None and state != "Z"


def main(settings_json: str) -> None:
    from app.config import Settings
    from app.jobs.local_pool import LocalPool

    LocalPool(Settings(**json.loads(settings_json)), size=1).run_forever()


if __name__ == "__main__":
    main(sys.argv[1])
