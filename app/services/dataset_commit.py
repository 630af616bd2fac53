"""Committing a parsed dataset: its arrays into storage, its row into the database, once.

The arrays are stored at `datasets/<id>/` in STORAGE_URL (a rename into DATA_DIR/datasets/<id>/
with the default file storage, an upload to the bucket otherwise) and the row committed only when
everything succeeded, so a failed commit leaves neither row nor arrays. A crash between storing
and committing leaves arrays without a row; a commit whose answer was lost (the connection dropped
during it) keeps the arrays, since its row may exist. `app.services.sweep.sweep_partial_uploads`
removes arrays without a row at start, once nothing under their prefix has changed for its grace.
An upload to object storage may take longer than that grace (a big array on a slow link), so
while it stores and commits it rewrites a marker object among its arrays (`IN_PROGRESS`) every
`MARKER_EVERY_S`, and removes it when done: another API process starting meanwhile sees the
prefix as fresh. A process that dies leaves a marker that ages like the arrays.

A dataset is stored once per tenant and content (`content_key`: the bytes received and how they
are parsed) and once per Idempotency-Key: a commit that meets either, committed meanwhile, returns
that dataset instead. `import_file` stores a local file through the same commit.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.config import Settings
from app.db import Database, is_unavailable
from app.services import dataset_files, idempotency, quotas
from app.services.datasets import remove_objects
from app.services.uploads import temp_name
from app.storage import Storage, dataset_prefix, get_storage
from app.tables import Dataset, new_id

log = logging.getLogger("margin.datasets")
IN_PROGRESS = ".uploading"  # no array's name: arrays are <name>.npy
# well within the sweep's grace (ORPHAN_GRACE_S, 300 s), so that a slow put or two still lands
# in time
MARKER_EVERY_S = 60.0


def content_key(sha256: str, options: dict | None = None) -> str:
    """What makes two uploads the same dataset: the bytes received and how they are parsed."""
    text = json.dumps({"sha256": sha256, "format": "libsvm", **(options or {})}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def same_content(db: Database, key: str) -> Dataset | None:
    """The current tenant's dataset with this content key (the tenant filter applies)."""
    with db.session() as session:
        return session.scalar(select(Dataset).where(Dataset.content_key == key).limit(1))


def replayed(db: Database, key: str, ttl_hours: float) -> Dataset | None:
    """The dataset an Idempotency-Key already created within ``ttl_hours``, or None; 409 when it
    was deleted since."""
    with db.session() as session:
        resource_id = idempotency.lookup(session, "datasets", key, None, ttl_hours)
        if resource_id is None:
            return None
        dataset = session.get(Dataset, resource_id)
        if dataset is None:  # deleted since
            raise idempotency.deleted("dataset", resource_id)
        return dataset


def check_same_upload(existing: Dataset, sha256: str, *keys: str | None) -> None:
    """422 when a dataset found by Idempotency-Key holds other bytes, or the same bytes parsed
    with other options, than the upload that named the key again (`keys`: the upload's content
    key, and the one an earlier release stored for it, if any)."""
    same = existing.content_key in keys if existing.content_key else existing.sha256 == sha256
    if not same:
        raise idempotency.reused()


def commit_dataset(
    db: Database, settings: Settings, dataset: Dataset, out_dir: Path, key: str | None
) -> tuple[Dataset, str]:
    """Store the parsed arrays and commit the row. File storage renames the directory inside
    the transaction; object storage uploads the arrays before it (an upload that fails or
    times out is a 503 with nothing stored) and removes them again if the row is not made."""
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix) is not None  # a rename within the transaction: no marker
    with nullcontext() if local else _marked_in_progress(storage, prefix):
        return _store_and_commit(db, settings, dataset, out_dir, key)


def _store_and_commit(
    db: Database, settings: Settings, dataset: Dataset, out_dir: Path, key: str | None
) -> tuple[Dataset, str]:
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix) is not None
    if not local:
        try:
            storage.store_dir(out_dir, prefix)
        except BaseException:
            # in the background: the store may be away, and the answer must not wait for it
            threading.Thread(target=remove_objects, args=(storage, prefix), daemon=True).start()
            raise
    committing = False
    try:
        with db.write() as session:
            quotas.check_storage(session, dataset.stored_bytes)
            session.add(dataset)
            if key:
                idempotency.remember(
                    session, "datasets", key, None, dataset.id, settings.idempotency_ttl_hours
                )
            session.flush()
            if local:
                storage.store_dir(out_dir, prefix)
            committing = True
    except IntegrityError:  # the same Idempotency-Key or content, committed meanwhile
        remove_objects(storage, prefix)
        existing = replayed(db, key, settings.idempotency_ttl_hours) if key else None
        if existing is not None:
            check_same_upload(existing, dataset.sha256, dataset.content_key)
            return existing, "replayed"
        existing = same_content(db, dataset.content_key) if dataset.content_key else None
        if existing is None:
            raise
        return existing, "duplicate"
    except BaseException as exc:
        if committing and is_unavailable(exc):
            # the connection was lost during the commit: the row may have been committed, and
            # removing its arrays would leave it pointing at nothing; the start-up sweep
            # removes them if it was not
            log.warning("dataset %s: commit outcome unknown (%s); arrays kept", dataset.id, exc)
            raise
        remove_objects(storage, prefix)
        raise
    return dataset, "created"


@contextmanager
def _marked_in_progress(storage: Storage, prefix: str) -> Iterator[None]:
    """Keep `prefix/IN_PROGRESS` fresh while the block runs, then remove it: waiting for the
    removal when the block succeeded (the dataset's objects are then its arrays alone), not when
    it failed (the store may be away, and the answer must not wait for it)."""
    stop = threading.Event()
    marker = f"{prefix}/{IN_PROGRESS}"
    keeper = threading.Thread(target=_keep_fresh, args=(storage, marker, stop), daemon=True)
    keeper.start()
    try:
        yield
    except BaseException:
        stop.set()
        raise
    stop.set()
    keeper.join()


def _keep_fresh(storage: Storage, marker: str, stop: threading.Event) -> None:
    """Rewrite `marker` until `stop`, then remove it; the only writer of the marker, so that no
    rewrite can land after the removal."""
    while True:
        try:
            storage.put(marker, b"")
        except Exception as exc:  # the arrays' own puts answer for the store
            log.warning("could not refresh %s (%s)", marker, exc)
        if stop.wait(MARKER_EVERY_S):
            break
    try:
        storage.delete(marker)
    except Exception as exc:
        log.warning("could not remove %s (%s); the sweep will", marker, exc)


def import_file(db: Database, settings: Settings, path: Path, name: str) -> tuple[Dataset, str]:
    """Store a local file as a dataset, parsing it in this process (for small files such as the
    demo). A file already stored with the same content is not stored twice."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    key = content_key(digest)
    existing = same_content(db, key)
    if existing is not None:
        return existing, "duplicate"
    out_dir = settings.data_dir / "tmp" / temp_name("parsed")
    try:
        limits = settings.upload_limits()
        meta = dataset_files.parse_to_arrays(str(path), str(out_dir), limits=limits)
        if "error" in meta:
            raise ValueError(f"{path.name}: {meta['error']}")
        dataset = Dataset(
            id=new_id("ds"),
            name=name,
            filename=path.name,
            sha256=digest,
            size_bytes=path.stat().st_size,
            content_key=key,
            **meta,
        )
        return commit_dataset(db, settings, dataset, out_dir, None)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
