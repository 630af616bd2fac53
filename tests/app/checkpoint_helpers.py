"""Helpers of the checkpoint tests (tests/app/test_checkpoint_*.py, test_local_pool_recovery.py):
a job on the heart data, settings that checkpoint at every segment, the keys of its stored
checkpoints, its model's weights, a shutdown signal that stops a worker mid-solve, and temporary
files of a dead process and of this one."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from app.services.model_cache import model_from_row
from app.services.uploads import temp_name
from app.storage import get_storage, job_checkpoints
from app.tables import Model

PARAMS = {"C": 4.0, "tol": 1e-6, "max_iter": 100000}


def checkpoint_every_segment(settings) -> None:
    """Checkpoint as often as the segments allow (every MIN_SEGMENT_PASSES passes: the heart
    job makes about 300 segments), and write progress records once a second, not at the
    tests' 0.01 s: a write at nearly every pass was most of these tests' time. The records
    are buffered, and all written when the attempt ends."""
    settings.checkpoint_s = 1e-4
    settings.progress_interval_s = 1.0


class StopAfter(threading.Event):
    """A shutdown signal that turns on after `n` looks (the worker is stopped mid-solve)."""

    def __init__(self, n: int):
        super().__init__()
        self.left = n

    def is_set(self) -> bool:
        self.left -= 1
        return self.left < 0 or super().is_set()


def new_job(client, heart, **params) -> str:
    """The id of a job created on the heart data with PARAMS (and `params` over them)."""
    body = {"dataset_id": heart["id"], "params": {**PARAMS, **params}}
    return client.post("/v1/jobs", json=body).json()["id"]


def stored_keys(settings, job_id) -> list[str]:
    """The keys of the job's checkpoints, of every attempt."""
    return [obj.key for obj in get_storage(settings).list(job_checkpoints(job_id))]


def model_coef(db, job_id):
    """The weights of the job's model, and its row."""
    with db.session() as session:
        model = session.query(Model).filter_by(job_id=job_id).one()
        return model_from_row(model).coef, model


def left_by_a_dead_process(tmp: Path) -> Path:
    """A partial checkpoint file in `tmp`, written by a process that is gone (as a worker killed
    mid-save is)."""
    tmp.mkdir(parents=True, exist_ok=True)
    writes = (
        "import sys; from pathlib import Path; from app.jobs.checkpoint import scratch_file; "
        "path = scratch_file(Path(sys.argv[1])); path.write_bytes(b'PK partial'); print(path)"
    )
    made = subprocess.run(
        [sys.executable, "-c", writes, str(tmp)], check=True, capture_output=True, text=True
    )
    left = Path(made.stdout.strip())
    assert left.parent == tmp and left.exists()
    return left


def in_flight(tmp: Path) -> Path:
    """A temporary file of this (live) process: no sweep may take it."""
    path = tmp / temp_name("upload")
    path.write_bytes(b"in flight")
    return path
