"""Progress bars (rich): a training job's convergence, and a file upload.

The job bar's position is the gap on a log scale: 0 % at the first reported gap, 100 % at the
job's tolerance, as the service computes `percent`; the ETA extrapolates the average rate at
which log(gap) has fallen so far. A search job (or probability=true) solves one problem per fold
and C, each from its own gap, so its bar is the whole path instead: the solves done of all (the
records' `percent`), the fold and C being solved, and that solve's gap as text.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from margin_client.jobs import Job


def estimate(
    first_gap: float | None, first_elapsed: float, gap: float | None, elapsed: float, tol
) -> tuple[float | None, float | None]:
    """(percent in [0, 100], seconds left) of a solve whose log(gap) falls from `first_gap`
    towards `tol`; None where unknown."""
    if first_gap is None or gap is None or not tol or tol <= 0:
        return None, None
    if not (math.isfinite(first_gap) and math.isfinite(gap)):
        return None, None
    if gap <= tol:
        return 100.0, 0.0
    if first_gap <= tol:
        return 0.0, None
    total = math.log(first_gap / tol)
    done = math.log(first_gap / gap) if gap > 0 else total
    percent = min(100.0, max(0.0, 100.0 * done / total))
    if done <= 0 or elapsed <= first_elapsed:
        return percent, None
    return percent, max(0.0, (total - done) / (done / (elapsed - first_elapsed)))


def _clock(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-:--"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _job_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("gap {task.fields[gap]}"),
        TextColumn("iter {task.fields[iteration]}"),
        TextColumn("{task.fields[elapsed]} elapsed"),
        TextColumn("ETA {task.fields[eta]}"),
        console=console,
        disable=not console.is_terminal,  # a log or a pipe gets the summary, not the frames
    )


class _Tracker:
    """Turns progress records into the bar's fields."""

    def __init__(self, tol: float | None):
        self.tol = tol
        self.first: tuple[float, float] | None = None

    def fields(self, record: dict[str, Any]) -> dict[str, Any]:
        gap, elapsed = record.get("gap"), float(record.get("elapsed_s") or 0.0)
        if self.first is None and gap is not None and gap > 0:
            self.first = (gap, elapsed)
        first_gap, first_elapsed = self.first or (None, 0.0)
        percent, eta = estimate(first_gap, first_elapsed, gap, elapsed, self.tol)
        return {
            "completed": percent or 0.0,
            "gap": _gap(gap),
            "iteration": record.get("iteration", "-"),
            "elapsed": _clock(elapsed),
            "eta": _clock(eta),
        }


def _gap(gap: float | None) -> str:
    return "-" if gap is None else f"{gap:.3g}"


def _path_bar(console: Console) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("solves {task.fields[solves]}"),
        TextColumn("{task.fields[where]}"),
        TextColumn("gap {task.fields[gap]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )


def _of(index: int | None, total: int | None) -> str:
    """A 0-based index shown from 1, out of its total where known."""
    if index is None:
        return "-"
    return f"{index + 1}/{total}" if total else str(index + 1)


class _PathTracker:
    """Turns a search's progress records into the path bar's fields: the share of solves done
    (never moving back), where on the path the solve is, and its gap."""

    def __init__(self):
        self.percent = 0.0

    def fields(self, record: dict[str, Any]) -> dict[str, Any]:
        done, total = record.get("solves_done"), record.get("solves_total")
        if done is not None and total:
            self.percent = max(self.percent, 100.0 * done / total)
        C = record.get("C")
        value = "-" if C is None else f"{C:.4g}"
        if record.get("stage") == "refit":
            where = f"refit at C {value}"
        else:
            fold = _of(record.get("fold"), record.get("folds_total"))
            where = f"fold {fold}  C {_of(record.get('c_index'), record.get('cs_total'))} = {value}"
        return {
            "completed": self.percent,
            "solves": "-" if done is None else f"{done}/{total}",
            "where": where,
            "gap": _gap(record.get("gap")),
        }


def is_path(info: dict[str, Any]) -> bool:
    """Whether a job solves a path (a search, or probability=true's internal folds)."""
    params = info.get("params") or {}
    return params.get("search") is not None or bool(params.get("probability"))


def follow(job: Job, console: Console | None = None) -> None:
    """Draw `job`'s progress until it ends. Ctrl-C asks (on a terminal) whether to cancel it:
    yes cancels and waits for the end; no stops following and re-raises KeyboardInterrupt."""
    console = console or Console(stderr=True)
    if job.info.get("status") == "queued" and job.info.get("waiting"):
        console.print(f"{job.id} is queued: {job.info['waiting']}", markup=False)
    if is_path(job.info):
        bar, tracker = _path_bar(console), _PathTracker()
        blank = {"solves": "-", "where": "", "gap": "-"}
        finished = {}
    else:
        bar = _job_bar(console)
        tracker = _Tracker(job.info.get("tol") or (job.info.get("params") or {}).get("tol"))
        blank = {"gap": "-", "iteration": "-", "elapsed": "0:00", "eta": "-:--"}
        finished = {"eta": "0:00"}
    with bar:
        task = bar.add_task(job.id, total=100, **blank)
        try:
            for record in job.events():
                bar.update(task, **tracker.fields(record))
        except KeyboardInterrupt:
            bar.stop()
            if not _ask_cancel(console, job):
                raise
            job.cancel()
            console.print(f"cancelling {job.id} ...")
            for _ in job.events():
                pass
        if job.status == "succeeded":
            bar.update(task, completed=100.0, **finished)
        bar.update(task, description=f"{job.id} {job.status}")


def _ask_cancel(console: Console, job: Job) -> bool:
    if not sys.stdin or not sys.stdin.isatty():
        return False
    from rich.prompt import Confirm

    try:
        return Confirm.ask(f"\nCancel job {job.id} on the server?", console=console, default=False)
    except (KeyboardInterrupt, EOFError):
        return False


@contextmanager
def upload_bar(path: Path, console: Console | None = None) -> Iterator[Callable[[int], None]]:
    """A byte-count bar for uploading `path`; yields the callback to give `on_bytes`."""
    console = console or Console(stderr=True)
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    ) as bar:
        task = bar.add_task(f"uploading {path.name}", total=path.stat().st_size)
        yield lambda n: bar.advance(task, n)
