"""Stored datasets: finding one (`named_dataset`), listing, showing and deleting them, and
reading their arrays.

A dataset's arrays are stored at `datasets/<id>/` in STORAGE_URL (`dataset_commit` puts them
there). Workers read them through `dataset_arrays`: the file storage's own directory, or a local
cached copy of the objects. Deleting a dataset removes its row, then its objects; objects left
behind (the store is away) are removed by the next sweep (`app.services.sweep`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.config import Settings
from app.db import Database
from app.errors import ProblemError
from app.schemas.common import sized_page
from app.services import dataset_files
from app.services.array_cache import DOWNLOAD_TRIES, ArrayCache
from app.storage import Storage, dataset_prefix, get_storage
from app.tables import ACTIVE_STATUSES, Dataset, Job

log = logging.getLogger("margin.datasets")


def dataset_dir(settings: Settings, dataset_id: str) -> Path:
    """The dataset's directory when STORAGE_URL is the data directory (the default)."""
    return settings.data_dir / "datasets" / dataset_id


_caches: dict[tuple[Path, int], ArrayCache] = {}


def array_cache(settings: Settings) -> ArrayCache:
    """This process's cache of downloaded datasets (one per cache directory)."""
    key = (settings.cache_path, settings.cache_max_bytes)
    if key not in _caches:
        _caches[key] = ArrayCache(*key)
    return _caches[key]


def dataset_arrays(settings: Settings, dataset: Dataset, tries: int = DOWNLOAD_TRIES) -> Path:
    """A local directory with the dataset's `.npy` arrays: the storage's own directory for
    file storage, else this machine's cached copy (downloaded on first use; `tries`: how many
    times while the store is unavailable, the workers' several by default, 1 in a request)."""
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix)
    if local is not None:
        return local
    names = [*dataset_files.ARRAYS, *(["qid"] if dataset.has_qid else [])]
    key = dataset.content_key or f"id-{dataset.id}"
    return array_cache(settings).directory(storage, prefix, key, names, tries=tries)


def dataset_array(settings: Settings, dataset: Dataset, name: str, tries: int = 1) -> Path:
    """The path of one of the dataset's arrays (``<name>.npy``), for a request that checks it:
    with an object store only that array is fetched into this machine's cache (under its own
    key), not the whole dataset, which may be many times larger."""
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix)
    if local is not None:
        return local / f"{name}.npy"
    key = f"{dataset.content_key or f'id-{dataset.id}'}.{name}"
    directory = array_cache(settings).directory(storage, prefix, key, [name], tries=tries)
    return directory / f"{name}.npy"


def remove_objects(storage: Storage, prefix: str) -> None:
    """Best effort: objects left behind (the store is away) are removed by the next sweep."""
    try:
        storage.delete_prefix(prefix)
    except Exception as exc:
        log.warning("could not remove %s from storage (%s); the sweep will", prefix, exc)


def named_dataset(
    session, dataset_id: str, field: str = "dataset_id", *, lock: bool = False
) -> Dataset:
    """The dataset a request body names in ``field``, or 404 saying which field named it. With
    ``lock``, it is locked against deletion until the transaction ends (PostgreSQL: FOR KEY SHARE,
    which a deletion's FOR UPDATE waits for; a deletion committed first leaves no row, and 404):
    a row referring to it would otherwise meet the deleted row's foreign key (500)."""
    locking = {"key_share": True} if lock else None
    dataset = session.get(Dataset, dataset_id, with_for_update=locking)
    if dataset is None:
        raise ProblemError(404, "Dataset not found", f"{field}: no dataset with id {dataset_id!r}")
    return dataset


def list_datasets(
    session: Session, limit: int, cursor: str | None
) -> tuple[list[Dataset], str | None]:
    # a dataset's classes are its text labels' names too: 1,000 of 255 characters make 265 kB
    bulk = (Dataset.feature_names, Dataset.classes)
    return sized_page(session, select(Dataset), Dataset.id, limit, cursor, bulk=bulk)


def delete_dataset(db: Database, settings: Settings, dataset_id: str) -> None:
    """Remove a dataset's row and files; 409 while a queued or running job uses it."""
    with db.write() as session:
        dataset = session.get(Dataset, dataset_id, with_for_update=True)
        if dataset is None:
            raise ProblemError(404, "Dataset not found", f"no dataset with id {dataset_id!r}")
        busy = session.scalars(
            select(Job.id)
            .where(
                or_(Job.dataset_id == dataset_id, Job.validation_dataset_id == dataset_id),
                Job.status.in_(ACTIVE_STATUSES),
            )
            .limit(5)
        ).all()
        if busy:
            raise ProblemError(
                409,
                "Dataset in use",
                f"dataset {dataset_id!r} is used by queued or running jobs: {', '.join(busy)}",
                jobs=busy,
            )
        session.delete(dataset)
    remove_objects(get_storage(settings), dataset_prefix(dataset_id))


def load_dataset(settings: Settings, dataset: Dataset):
    """(X, y, qid or None) of a stored dataset, X with the dataset's own feature count."""
    return dataset_files.load_arrays(dataset_arrays(settings, dataset), dataset.n_features)


def name_index(dataset: Dataset) -> dict[str, int] | None:
    """The column of each of a table's feature names (None: no names)."""
    names = dataset.feature_names
    return None if names is None else {name: j for j, name in enumerate(names)}


def load_dataset_as(
    settings: Settings, dataset: Dataset, n_features: int, zero_based: bool, index=None
):
    """(X, y, qid), X numbered like a training file of (`n_features`, `zero_based`), whose
    columns are named by `index` (name -> column; see `column_placement`)."""
    from app.services.dataset_source import by_name, column_placement

    X, y, qid = load_dataset(settings, dataset)
    placement = column_placement(dataset.feature_names, index)
    if placement is not None:
        X = by_name(X, placement, n_features)
    elif dataset.zero_based != zero_based or dataset.n_features != n_features:
        X = dataset_files.align_columns(X, dataset.zero_based, zero_based, n_features)
    return X, y, qid


def dataset_view(dataset: Dataset) -> dict[str, Any]:
    if dataset.label_kind == "classes":
        labels = {"kind": "classes", "classes": dataset.classes}
    else:
        labels = {"kind": "real", **dataset.target}
    return {
        "id": dataset.id,
        "name": dataset.name,
        "filename": dataset.filename,
        "n_rows": dataset.n_rows,
        "n_features": dataset.n_features,
        "nnz": dataset.nnz,
        "zero_based": dataset.zero_based,
        "has_qid": dataset.has_qid,
        "format": dataset.format,
        "feature_names": dataset.feature_names,
        "labels": labels,
        "sha256": dataset.sha256,
        "size_bytes": dataset.size_bytes,
        "stored_bytes": dataset.stored_bytes,
        "created_at": dataset.created_at,
    }
