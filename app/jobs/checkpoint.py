"""Checkpoints: a running job's dual state in storage every CHECKPOINT_S, and a retried job that
resumes from it.

The solvers stop cleanly when the progress callback returns False, handing back their iterate
(α and w), and start from a given dual point (`warm_start` with a `dual_coef_` set before the
fit). So a job of a resumable estimator is trained in segments: once CHECKPOINT_S have passed the
callback stops the solve, the iterate is stored at ``checkpoints/<job id>.<attempt>.npz``
(STORAGE_URL), and the next segment starts from it, its iterations and seconds counted on from
the previous segment's (and its max_iter what is left of it, its time_limit what is left of the
attempt's). A retried attempt starts from the iterate of the latest attempt that stored one
(each attempt writes its own key, so one taken away mid-save never rewrites the next
attempt's): a warm start that reaches the same optimum as an uninterrupted solve; its time_limit
is what the earlier attempts left of the job's bound
(`app.jobs.budget`, which counts their whole running time, not only up to the checkpoint). A solve
stopped by a cancel or a shutdown hands back its iterate too (kept as a model with
`cancel?keep_model=true`, stored for the next attempt at a shutdown). A job that ends is never
resumed: its worker removes the checkpoint as it ends the job (succeeded, cancelled or failed), and
the reaper's retention pass (`app.jobs.recovery`) those of jobs that ended otherwise or are gone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np

from app.services.uploads import temp_name
from app.storage import Storage, checkpoint_owner, job_checkpoints, retry_unavailable

log = logging.getLogger("margin.training")
# Passes a segment makes at least: a restarted solve rebuilds its shrinking state and confirms
# convergence on a full pass, which one pass per segment would never reach.
MIN_SEGMENT_PASSES = 5
# Reads of a stored checkpoint while the store is unavailable: 3 tries, 0.5 s then 1 s apart (and
# STORAGE_TIMEOUT_S at most each), so that a resume rides out a hiccup and an outage still
# starts the attempt from scratch within seconds.
READ_TRIES = 3
READ_DELAY_S = 0.5


def scratch_file(scratch: Path) -> Path:
    """A local file for one save or load, named after this host and process, so that the sweep
    of temporary files (`app.services.sweep`, at the start of the API and of the workers, for
    their own host's files) removes one left by a worker killed mid-save."""
    return scratch / f"{temp_name('checkpoint')}.npz"


def attempt_keys(storage: Storage, job_id: str, up_to: int) -> list[str]:
    """The keys of the checkpoints of the job's attempts numbered up to `up_to`, the latest
    last."""
    owned = ((checkpoint_owner(obj.key), obj.key) for obj in storage.list(job_checkpoints(job_id)))
    return [key for owner, key in sorted(
        (owner, key) for owner, key in owned if owner and owner[0] == job_id and owner[1] <= up_to
    )]  # fmt: skip


def resume_key(storage: Storage, job_id: str, attempt: int) -> str | None:
    """The key of the checkpoint that `attempt` resumes (None: none stored): the latest
    attempt's up to this one's number (an attempt released at a shutdown does not count, and
    the next one takes its number: it resumes the file the released one stored before it let
    go). An earlier attempt still saving (taken away mid-save) replaces only its own file, and
    whole, so the file read is one that attempt stored, older or newer, never a mix."""
    keys = retry_unavailable(
        partial(attempt_keys, storage, job_id, attempt),
        f"listing checkpoints of {job_id}",
        READ_TRIES,
        READ_DELAY_S,
    )
    return keys[-1] if keys else None


@dataclass(frozen=True)
class Checkpoint:
    alpha: np.ndarray  # the dual variables, in the estimator's `dual_coef_` shape
    coef: np.ndarray
    intercept: np.ndarray
    iteration: int  # outer iterations done, over every segment
    elapsed_s: float  # solver seconds, over every segment

    def save(self, storage: Storage, key: str, scratch: Path) -> None:
        """Write the file on disk, array by array, and store it: built in memory first, it was
        one more copy of the dual state (up to 1 GiB at MAX_DUAL_VARIABLES)."""
        path = scratch_file(scratch)
        try:
            np.savez(
                path, alpha=self.alpha, coef=self.coef, intercept=self.intercept,
                progress=np.array([self.iteration, self.elapsed_s]),
            )  # fmt: skip
            storage.store_file(path, key)
        finally:
            path.unlink(missing_ok=True)

    @classmethod
    def load(cls, storage: Storage, key: str, scratch: Path) -> Checkpoint | None:
        """The stored checkpoint, read from a local file (the store's own where it is a local
        directory): joining its chunks in memory, then reading them, made two copies.

        A store that is unavailable is tried READ_TRIES times, READ_DELAY_S apart and more:
        one S3 hiccup lost the job's progress (the attempt started from scratch). A missing or
        bad file is not tried again."""
        path = storage.local_path(key)
        fetched = None
        if path is None:
            fetched = path = scratch_file(scratch)
        try:
            if fetched is not None:
                fetch = partial(storage.fetch, key, fetched)
                retry_unavailable(fetch, f"reading checkpoint {key}", READ_TRIES, READ_DELAY_S)
            elif not path.exists():
                raise FileNotFoundError(key)
            with np.load(path, allow_pickle=False) as data:
                iteration, elapsed = data["progress"].tolist()
                return cls(data["alpha"], data["coef"], data["intercept"], int(iteration), elapsed)
        except FileNotFoundError:
            return None
        finally:
            if fetched is not None:
                fetched.unlink(missing_ok=True)


@dataclass
class Segments:
    """How one attempt trains: checkpoint every `every_s` (0: never), starting from `start`."""

    every_s: float
    start: Checkpoint | None
    on_checkpoint: Callable[[Checkpoint], None]
    last: Checkpoint | None = None  # the iterate of the latest stop (cancel, shutdown)


def train(trainer, params: dict, X, y, qid, callback, n_jobs, segments: Segments):
    """Run `trainer` (one marked `resumable`) in segments (see the module docstring); returns
    its `Trained`, with n_iter counted over every segment."""
    done = segments.start
    before = done.elapsed_s if done else 0.0  # earlier attempts' seconds: params has its budget
    while True:
        it0 = done.iteration if done else 0
        t0 = done.elapsed_s if done else 0.0
        due, began = [False], time.monotonic()

        def segment_callback(progress, it0=it0, t0=t0, due=due, began=began):
            passes = progress.iteration
            progress = replace(
                progress, iteration=passes + it0, elapsed_s=progress.elapsed_s + t0
            )
            if callback(progress) is False:
                return False
            if (
                segments.every_s
                and passes >= MIN_SEGMENT_PASSES
                and time.monotonic() - began >= segments.every_s
            ):
                due[0] = True
                return False
            return None

        trained = trainer(
            _remaining(params, it0, t0 - before), X, y, qid, segment_callback, n_jobs,
            init_dual=None if done is None else done.alpha,
        )  # fmt: skip
        n_iter = it0 + trained.n_iter
        elapsed = t0 + (time.monotonic() - began)
        trained.n_iter = n_iter
        if trained.status != "stopped" or trained.dual is None:
            return trained
        point = Checkpoint(trained.dual, trained.coef, trained.intercept, n_iter, elapsed)
        if not due[0]:  # a cancel or a shutdown
            segments.last = point
            return trained
        try:
            segments.on_checkpoint(point)
        except Exception as exc:  # storage away: train on; the next checkpoint may succeed
            log.warning("checkpoint at iteration %d not stored: %s", n_iter, exc)
        done = point


def _remaining(params: dict, iterations: int, seconds: float) -> dict:
    out = dict(params)
    if "max_iter" in out and out["max_iter"] is not None:
        out["max_iter"] = max(1, int(out["max_iter"]) - iterations)
    if out.get("time_limit") is not None:
        out["time_limit"] = max(1e-3, float(out["time_limit"]) - seconds)
    return out
