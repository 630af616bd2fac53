"""Leftovers of interrupted work: temporary files of dead processes (uploads in flight, parse
outputs, checkpoints of a worker killed mid-save), stored datasets without a row (a crash, or a
storage outage, between storing the arrays and committing the row; a delete whose objects could
not be removed), and prediction CSVs without a run (a model deleted while the store was away).
The API sweeps all of them when it starts; a worker (the local pool, a procrastinate worker)
sweeps its host's temporary files when it starts, since a worker-only host runs no API, and the
local pool again whenever one of its worker processes dies."""

from __future__ import annotations

import logging
import os
import shutil
import socket
import time
from pathlib import Path

from sqlalchemy import select

from app.config import Settings
from app.db import Database
from app.storage import Storage, dataset_prefix, get_storage, prediction_key
from app.tables import Dataset, PredictionRun

log = logging.getLogger("margin.datasets")
ORPHAN_GRACE_S = 300.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _maker(path: Path) -> int | None:
    """The pid of the process of this host that made a temp entry, from its name
    (prefix-host-pid-random; the host itself may contain dashes); None when another host's or
    not so named."""
    parts = path.name.split("-")
    if len(parts) >= 4 and "-".join(parts[1:-2]) == socket.gethostname() and parts[-2].isdigit():
        return int(parts[-2])
    return None


def _abandoned(path: Path, now: float) -> bool:
    """A temp entry is abandoned when its maker (same host) is dead, or it is a day old."""
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        return False
    if now - mtime > 86_400:
        return True
    maker = _maker(path)
    return maker is not None and maker != os.getpid() and not _pid_alive(maker)


def sweep_partial_uploads(settings: Settings, db: Database) -> list[str]:
    """Remove uploads and parse outputs left by dead processes, and dataset directories without
    a row (a crash between rename and commit), and prediction CSVs without a run. Returns the
    removed paths."""
    now = time.time()
    removed = _sweep_temp(settings, lambda path: _abandoned(path, now))
    removed += _sweep_orphan_objects(get_storage(settings), db, now)
    removed += _sweep_orphan_predictions(get_storage(settings), db, now)
    if removed:
        log.info("removed %d partial uploads: %s", len(removed), ", ".join(removed))
    return removed


def sweep_temp_files(settings: Settings, dead_pid: int | None = None) -> list[str]:
    """At a worker's start: remove the entries of DATA_DIR/tmp left by dead processes of this
    host (or a day old); with `dead_pid`, only that dead process's (the local pool's child that
    died: the day-old rule stays with starts, since a live process may keep an entry that long).
    Never raises: a sweep must not keep a worker from starting."""
    try:
        if dead_pid is None:
            removed = _sweep_temp(settings, lambda path: _abandoned(path, time.time()))
        else:
            gone = not _pid_alive(dead_pid)  # its pid not yet taken by another process
            removed = _sweep_temp(settings, lambda path: gone and _maker(path) == dead_pid)
    except Exception:
        log.exception("sweeping temporary files failed")
        return []
    if removed:
        log.info("removed %d temporary files: %s", len(removed), ", ".join(removed))
    return removed


def _sweep_temp(settings: Settings, abandoned) -> list[str]:
    removed = []
    tmp = settings.data_dir / "tmp"
    for path in sorted(tmp.iterdir()) if tmp.exists() else []:
        if abandoned(path):
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(
                missing_ok=True
            )
            removed.append(str(path))
    return removed


def _sweep_orphan_objects(storage: Storage, db: Database, now: float) -> list[str]:
    """Remove stored datasets without a row (a crash or storage outage between storing the
    arrays and committing the row, or a delete whose objects could not be removed), judged by
    when their objects last changed: an upload still storing in another process keeps its marker
    among them fresh (`dataset_commit.IN_PROGRESS`), however long its arrays take."""
    root = storage.local_path("datasets")
    newest: dict[str, float] = {}
    if root is not None:  # a directory per dataset, possibly empty
        for path in root.iterdir() if root.exists() else []:
            if path.is_dir():
                newest[path.name] = path.stat().st_mtime
    else:
        for obj in storage.list("datasets/"):
            dataset_id = obj.key.split("/")[1] if obj.key.count("/") >= 2 else None
            if dataset_id:
                newest[dataset_id] = max(newest.get(dataset_id, 0.0), obj.modified.timestamp())
    removed = []
    for dataset_id in _without_row(db, Dataset.id, newest, now):
        prefix = dataset_prefix(dataset_id)
        storage.delete_prefix(prefix)
        removed.append(_shown(storage, prefix))
    return removed


def _sweep_orphan_predictions(storage: Storage, db: Database, now: float) -> list[str]:
    """Remove prediction CSVs whose run is gone: a model's deletion removes its runs' rows,
    then their CSVs only as far as the store answers, so one that was away kept them for ever
    (stored bytes no quota counts and no route reaches)."""
    modified = {}
    for obj in storage.list("predictions/"):
        run_id = obj.key.removeprefix("predictions/").removesuffix(".csv")
        if obj.key == prediction_key(run_id) and "/" not in run_id:
            modified[run_id] = obj.modified.timestamp()
    removed = []
    for run_id in _without_row(db, PredictionRun.id, modified, now):
        key = prediction_key(run_id)
        storage.delete(key)
        removed.append(_shown(storage, key))
    return removed


def _without_row(db: Database, id_column, modified: dict[str, float], now: float) -> list[str]:
    """The ids of ``modified`` (id → when its objects last changed) that have no row in
    ``id_column``'s table and are older than ORPHAN_GRACE_S (an upload or a run may be about
    to commit its row)."""
    if not modified:
        return []
    with db.session() as session:
        known = set(session.scalars(select(id_column).where(id_column.in_(list(modified)))))
    return [i for i, stamp in modified.items() if i not in known and now - stamp > ORPHAN_GRACE_S]


def _shown(storage: Storage, key: str) -> str:
    """Where a removed object was, as the sweep reports it: a local path, or the store's URL."""
    local = storage.local_path(key)
    return str(local) if local is not None else f"{storage.url}/{key}"
