"""Receiving a dataset upload: stream the body, parse it while it arrives, commit it once.

The API process never holds a parsed dataset: the body is streamed to a file under DATA_DIR/tmp/
(`uploads`), and a child process (`parser_pool`) follows that file while it grows and writes the
arrays beside it; they are committed (`dataset_commit`) only when everything succeeded, so a failed
upload leaves neither row nor arrays. An upload whose Idempotency-Key already created a dataset,
or whose content the tenant already stores, stores nothing: that dataset is the answer.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from starlette.requests import Request

from app.config import Settings
from app.db import Database
from app.errors import ProblemError
from app.services import formats, quotas
from app.services.dataset_commit import (
    check_same_upload,
    commit_dataset,
    content_key,
    replayed,
    same_content,
)
from app.services.dataset_files import recognised_format
from app.services.formats.delimited import EMPTY_POLICIES
from app.services.parser_pool import ParserPool
from app.services.uploads import (
    DigestSink,
    UploadSink,
    check_declared_length,
    receive_into,
    temp_name,
)
from app.tables import Dataset, new_id

PARSE_STOP_S = 5.0  # how long a failed upload waits for its parser to stop and clean up
_PARSE_TITLES = {413: "Upload too large", 422: "Invalid dataset", 507: "Insufficient storage"}


class UploadOptions:
    """How an upload is parsed: its format and the options of csv, tsv and parquet, from the
    query string, completed by multipart fields sent before the file part."""

    FIELDS = ("format", "label_column", "empty_cells")

    def __init__(self, **query: str | None):
        self.values = {k: v for k, v in query.items() if k in self.FIELDS and v is not None}

    def complete(self, fields: dict[str, str], filename: str | None) -> None:
        for key in self.FIELDS:
            if key in self.values and fields.get(key) and fields[key] != self.values[key]:
                # the query's value was taken silently: refused, as a form field sent twice
                raise ProblemError(
                    422,
                    "Invalid upload",
                    f"{key}: sent in the query string and as a form field with different "
                    "values; send it once",
                )
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

    def content_key(self, sha256: str, recognised: str) -> str:
        """The content key of these bytes parsed with these options, an unnamed format being
        the one they are `recognised` as: the same bytes with their format named or left to be
        recognised are one upload."""
        key = {**(self.key_options() or {}), "format": self.format or recognised}
        return content_key(sha256, key)

    def legacy_content_key(self, sha256: str) -> str | None:
        """The content key an earlier release stored for these bytes when no format was named
        (it recorded "libsvm" whatever they were read as); None when a format is named."""
        return None if self.format else content_key(sha256, self.key_options())


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
        existing = replayed(db, idempotency_key, settings.idempotency_ttl_hours)
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
        filename, field_name, duplicate = await _receive(request, db, sink, parse, options)
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
            content_key=options.content_key(sink.hash.hexdigest(), meta["format"]),
            **meta,
        )
        return await asyncio.to_thread(
            commit_dataset, db, settings, dataset, parse.out_dir, idempotency_key
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
) -> tuple[str | None, str | None, Dataset | None]:
    """Receive the body into `sink`: (file name, field name, the tenant's dataset with the same
    content or None). The sink is finished, or aborted (the parser then stops) when the content
    is already stored or the request fails."""
    try:
        filename, field_name = await receive_into(request, sink, parse.start, UploadOptions.FIELDS)
        sink.close()  # flushed: an unnamed format is recognised from the file's first bytes
        max_expanded = parse.limits.get("max_expanded") or 2**62
        duplicate = await asyncio.to_thread(_stored_copy, db, sink, options, max_expanded)
        if duplicate is not None:
            sink.abort()  # the parser stops; nothing is stored
            return filename, field_name, duplicate
        sink.finish()
    except BaseException:
        sink.abort()
        raise
    return filename, field_name, None


def _stored_copy(
    db: Database, sink: UploadSink, options: UploadOptions, max_expanded: int
) -> Dataset | None:
    """The tenant's dataset of the same bytes parsed the same way, or None."""
    fmt = options.format or recognised_format(sink.path, max_expanded)
    if fmt is None:  # compressed bytes that cannot be read: the parse says why
        return None
    sha256 = sink.hash.hexdigest()
    stored = same_content(db, options.content_key(sha256, fmt))
    legacy = options.legacy_content_key(sha256)
    if stored is None and legacy is not None:
        stored = same_content(db, legacy)  # stored before the format was in the key
    return stored


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
    # an unnamed format is compared as the one the dataset was read in: these bytes are not
    # kept to be recognised, and the same bytes are recognised the same way
    key = options.content_key(sha256, existing.format or "libsvm")
    check_same_upload(existing, sha256, key, options.legacy_content_key(sha256))
