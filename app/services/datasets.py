"""Datasets: upload (stream, parse in a child process, store atomically), list, show, delete.

The API process never holds a parsed dataset: a child process parses the uploaded file and writes
the arrays under DATA_DIR/tmp/; they are stored at `datasets/<id>/` in STORAGE_URL (a rename into
DATA_DIR/datasets/<id>/ with the default file storage, an upload to the bucket otherwise) and the
row committed only when everything succeeded, so a failed upload leaves neither row nor arrays.
A crash between storing and committing leaves arrays without a row; `sweep_partial_uploads`
(app.services.sweep) removes such leftovers at start. Workers read a dataset through
`dataset_arrays`: the file storage's own directory, or a local cached copy of the objects.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import multiprocessing
import shutil
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from starlette.requests import Request

from app.config import Settings
from app.db import Database
from app.errors import ProblemError
from app.schemas.common import keyset_page
from app.services import dataset_files, formats, idempotency, quotas
from app.services.array_cache import ArrayCache
from app.services.formats.delimited import EMPTY_POLICIES
from app.services.sweep import sweep_partial_uploads  # noqa: F401 - part of this interface
from app.services.uploads import (
    DigestSink,
    UploadSink,
    check_declared_length,
    receive_into,
    temp_name,
)
from app.storage import Storage, dataset_prefix, get_storage
from app.tables import ACTIVE_STATUSES, Dataset, Job, new_id

log = logging.getLogger("margin.datasets")
PARSE_STOP_S = 5.0  # how long a failed upload waits for its parser to stop and clean up
_PARSE_TITLES = {413: "Upload too large", 422: "Invalid dataset", 507: "Insufficient storage"}


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


def dataset_arrays(settings: Settings, dataset: Dataset) -> Path:
    """A local directory with the dataset's `.npy` arrays: the storage's own directory for
    file storage, else this machine's cached copy (downloaded on first use)."""
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix)
    if local is not None:
        return local
    names = [*dataset_files.ARRAYS, *(["qid"] if dataset.has_qid else [])]
    key = dataset.content_key or f"id-{dataset.id}"
    return array_cache(settings).directory(storage, prefix, key, names)


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


def content_key(sha256: str, options: dict | None = None) -> str:
    """What makes two uploads the same dataset: the bytes received and how they are parsed."""
    text = json.dumps({"sha256": sha256, "format": "libsvm", **(options or {})}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class UploadOptions:
    """How an upload is parsed: its format and the options of csv, tsv and parquet, from the
    query string, completed by multipart fields sent before the file part."""

    FIELDS = ("format", "label_column", "empty_cells")

    def __init__(self, **query: str | None):
        self.values = {k: v for k, v in query.items() if k in self.FIELDS and v is not None}

    def complete(self, fields: dict[str, str], filename: str | None) -> None:
        for key in self.FIELDS:
            if key not in self.values and fields.get(key):
                self.values[key] = fields[key]
        fmt = self.values.get("format")
        if fmt is not None and fmt not in formats.FORMATS:
            raise ProblemError(
                422, "Invalid upload", f"format: expected one of {', '.join(formats.FORMATS)}"
            )
        if self.values.get("empty_cells", "error") not in EMPTY_POLICIES:
            raise ProblemError(
                422, "Invalid upload", f"empty_cells: expected one of {', '.join(EMPTY_POLICIES)}"
            )
        if len(self.values.get("label_column", "")) > 255:
            raise ProblemError(422, "Invalid upload", "label_column: at most 255 characters")
        if fmt is None and formats.from_name(filename):
            self.values["format"] = formats.from_name(filename)

    @property
    def format(self) -> str | None:
        return self.values.get("format")

    def parse_options(self) -> dict:
        return {k: v for k, v in self.values.items() if k != "format"}

    def key_options(self) -> dict | None:
        """The options in the content key (none for a plain LIBSVM upload, as before)."""
        key = dict(self.values)
        if key.get("empty_cells") == "error":
            del key["empty_cells"]
        return key or None


async def create_dataset(
    request: Request,
    db: Database,
    settings: Settings,
    parser: ParserPool,
    name: str | None,
    idempotency_key: str | None,
    options: UploadOptions | None = None,
) -> tuple[Dataset, str]:
    """Receive, parse and store an upload (`options`: its format and parse options). Returns
    (dataset, how): "created"; "replayed" when the Idempotency-Key had already created it;
    "duplicate" when the tenant already stores the same bytes parsed the same way (that dataset
    is returned, nothing is stored twice)."""
    options = options or UploadOptions()
    if idempotency_key:
        existing = _replay(db, idempotency_key, settings.idempotency_ttl_hours)
        if existing is not None:
            await _check_replayed_body(request, existing, options, settings.max_upload_bytes)
            return existing, "replayed"
    tmp = settings.data_dir / "tmp"
    check_declared_length(request, settings.max_upload_bytes)
    room = await asyncio.to_thread(_storage_room, db)
    sink = UploadSink(tmp / (temp_name("upload") + ".part"), settings.max_upload_bytes)
    parse = _FollowingParse(
        parser, sink, tmp / temp_name("parsed"), settings.upload_limits(room), options
    )
    try:
        filename, field_name, key, duplicate = await _receive(request, db, sink, parse, options)
        if duplicate is not None:
            return duplicate, "duplicate"
        meta = await parse.future
        _check_parsed(sink, meta)
        dataset = Dataset(
            id=new_id("ds"),
            name=(name or field_name or filename or "dataset")[:255],
            filename=filename,
            sha256=sink.hash.hexdigest(),
            size_bytes=sink.size,
            content_key=key,
            **meta,
        )
        return await asyncio.to_thread(
            _commit, db, settings, dataset, parse.out_dir, idempotency_key
        )
    finally:
        sink.close_quietly()
        await parse.settle()


class _FollowingParse:
    """The parse of an upload, started when the file begins (its name and the fields before it
    are known then): the parser follows the file while it arrives, so receiving and parsing
    overlap."""

    def __init__(
        self,
        parser: ParserPool,
        sink: UploadSink,
        out_dir: Path,
        limits: dict,
        options: UploadOptions,
    ):
        self.parser = parser
        self.sink = sink
        self.out_dir = out_dir
        self.limits = limits
        self.options = options
        self.future: asyncio.Future | None = None  # None until the file begins

    def start(self, filename: str | None, fields: dict[str, str]) -> None:
        self.options.complete(fields, filename)
        self.future = asyncio.ensure_future(
            self.parser.parse(
                self.sink.path, self.out_dir, growing=True, limits=self.limits,
                fmt=self.options.format, options=self.options.parse_options(),
            )
        )  # fmt: skip

    async def settle(self) -> None:
        """Once the request is answered: remove the temporary files, after the parser stopped."""
        parse, out_dir, sink = self.future, self.out_dir, self.sink
        if parse is None:  # the file never began
            sink.remove()
            shutil.rmtree(out_dir, ignore_errors=True)
            return
        if not parse.done():  # the parser stops at the abort marker within a poll or two
            await asyncio.wait({parse}, timeout=PARSE_STOP_S)
        if parse.done():
            _discard(parse, out_dir, sink)
        else:  # clean up after it, keeping the marker it waits for
            parse.add_done_callback(lambda task: _discard(task, out_dir, sink))


async def _receive(
    request: Request, db: Database, sink: UploadSink, parse: _FollowingParse, options: UploadOptions
) -> tuple[str | None, str | None, str, Dataset | None]:
    """Receive the body into `sink`: (file name, field name, content key, the tenant's dataset
    with the same content or None). The sink is finished, or aborted (the parser then stops)
    when the content is already stored or the request fails."""
    try:
        filename, field_name = await receive_into(request, sink, parse.start, UploadOptions.FIELDS)
        key = content_key(sink.hash.hexdigest(), options.key_options())
        duplicate = await asyncio.to_thread(_same_content, db, key)
        if duplicate is not None:
            sink.abort()  # the parser stops; nothing is stored
            return filename, field_name, key, duplicate
        sink.finish()
    except BaseException:
        sink.abort()
        raise
    return filename, field_name, key, None


def _check_parsed(sink: UploadSink, meta: dict) -> None:
    if sink.size == 0:
        raise ProblemError(422, "Invalid dataset", "file: the uploaded file is empty")
    if "error" in meta:
        raise _parse_problem(meta)


def _parse_problem(meta: dict) -> ProblemError:
    status = meta.get("status", 422)
    if status == 429:
        return ProblemError(
            429,
            "Storage quota exceeded",
            meta["error"],
            room_bytes=meta.get("quota_room"),
            headers={"Retry-After": str(quotas.STORAGE_RETRY_AFTER_S)},
        )
    line = {"line": meta["line"]} if meta.get("line") else {}
    return ProblemError(status, _PARSE_TITLES.get(status, "Invalid dataset"), meta["error"], **line)


def _storage_room(db: Database) -> int | None:
    with db.session() as session:
        return quotas.storage_room(session)


def _same_content(db: Database, key: str) -> Dataset | None:
    """The current tenant's dataset with this content key (the tenant filter applies)."""
    with db.session() as session:
        return session.scalar(select(Dataset).where(Dataset.content_key == key).limit(1))


def _discard(task: asyncio.Future, out_dir: Path, sink: UploadSink) -> None:
    """Drop an abandoned parse: its outcome no longer matters (the request already ended)."""
    if not task.cancelled():
        task.exception()  # marks it retrieved, so it is not logged as lost
    sink.remove()
    shutil.rmtree(out_dir, ignore_errors=True)


async def _check_replayed_body(
    request: Request, existing: Dataset, options: UploadOptions, limit: int
) -> None:
    """422 unless a retried upload sends the file and parse options its Idempotency-Key first
    came with. The body is hashed as it arrives and nothing is kept or parsed."""
    sink = DigestSink(limit)
    await receive_into(
        request, sink, lambda name, fields: options.complete(fields, name), UploadOptions.FIELDS
    )
    sha256 = sink.hash.hexdigest()
    _check_same_upload(existing, sha256, content_key(sha256, options.key_options()))


def _check_same_upload(existing: Dataset, sha256: str, key: str) -> None:
    """422 when a dataset found by Idempotency-Key holds other bytes, or the same bytes parsed
    with other options, than the upload that named the key again."""
    same = existing.content_key == key if existing.content_key else existing.sha256 == sha256
    if not same:
        raise idempotency.reused()


def _replay(db: Database, key: str, ttl_hours: float) -> Dataset | None:
    with db.session() as session:
        resource_id = idempotency.lookup(session, "datasets", key, None, ttl_hours)
        if resource_id is None:
            return None
        dataset = session.get(Dataset, resource_id)
        if dataset is None:  # deleted since
            raise idempotency.deleted("dataset", resource_id)
        return dataset


def _commit(
    db: Database, settings: Settings, dataset: Dataset, out_dir: Path, key: str | None
) -> tuple[Dataset, str]:
    """Store the parsed arrays and commit the row. File storage renames the directory inside
    the transaction; object storage uploads the arrays before it (an upload that fails or
    times out is a 503 with nothing stored) and removes them again if the row is not made."""
    storage = get_storage(settings)
    prefix = dataset_prefix(dataset.id)
    local = storage.local_path(prefix) is not None
    if not local:
        try:
            storage.store_dir(out_dir, prefix)
        except BaseException:
            # in the background: the store may be away, and the answer must not wait for it
            threading.Thread(target=_remove_objects, args=(storage, prefix), daemon=True).start()
            raise
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
    except IntegrityError:  # the same Idempotency-Key or content, committed meanwhile
        _remove_objects(storage, prefix)
        existing = _replay(db, key, settings.idempotency_ttl_hours) if key else None
        if existing is not None:
            _check_same_upload(existing, dataset.sha256, dataset.content_key)
            return existing, "replayed"
        existing = _same_content(db, dataset.content_key) if dataset.content_key else None
        if existing is None:
            raise
        return existing, "duplicate"
    except BaseException:
        _remove_objects(storage, prefix)
        raise
    return dataset, "created"


def _remove_objects(storage: Storage, prefix: str) -> None:
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
    return keyset_page(session, select(Dataset), Dataset.id, limit, cursor)


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
    _remove_objects(get_storage(settings), dataset_prefix(dataset_id))


def load_dataset(settings: Settings, dataset: Dataset):
    """(X, y, qid or None) of a stored dataset, X with the dataset's own feature count."""
    return dataset_files.load_arrays(dataset_arrays(settings, dataset), dataset.n_features)


def load_dataset_as(settings: Settings, dataset: Dataset, n_features: int, zero_based: bool):
    """(X, y, qid), X numbered like a training file of (`n_features`, `zero_based`)."""
    X, y, qid = load_dataset(settings, dataset)
    if dataset.zero_based != zero_based or dataset.n_features != n_features:
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


def import_file(db: Database, settings: Settings, path: Path, name: str) -> tuple[Dataset, str]:
    """Store a local file as a dataset, parsing it in this process (for small files such as the
    demo). A file already stored with the same content is not stored twice."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    key = content_key(digest)
    existing = _same_content(db, key)
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
        return _commit(db, settings, dataset, out_dir, None)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
