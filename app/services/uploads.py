"""Receiving an upload: stream the request body to a file in chunks, hashing and counting.

The body is either `multipart/form-data` (field `file`, optional field `name`) or the raw file with
any other content type. Nothing is held in memory beyond one chunk; a body over the limit stops
with 413 as soon as the limit is crossed, and the partial file is removed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import socket
from pathlib import Path

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request

from app.deps import check_sent_once
from app.errors import ProblemError

MAX_FIELD_BYTES = 1024
MAX_NAME_CHARS = 255  # a dataset's name, from the form field or the query
MAX_FIELDS = 32  # form fields besides the file: a handful are read, the rest ignored


def temp_name(prefix: str) -> str:
    """A temporary name that tells the sweep which process made it (host and pid)."""
    return f"{prefix}-{socket.gethostname()}-{os.getpid()}-{os.urandom(6).hex()}"


class UploadSink:
    """Writes the file part to disk, hashing and counting; enforces the size limit.

    A reader may follow the file while it grows (`dataset_files.GrowingFile`): `finish` tells it
    the final size (marker file `<path>.done`), `abort` tells it to give up (`<path>.abort`).
    """

    def __init__(self, path: Path, limit: int):
        self.path = path
        self.limit = limit
        self.size = 0
        self.hash = hashlib.sha256()
        self.file = open(path, "wb")  # noqa: SIM115 - closed in close()

    def write(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit)
        self.hash.update(data)
        try:
            self.file.write(data)
        except OSError as exc:
            raise storage_error(exc) from None

    def close(self) -> None:
        if not self.file.closed:
            try:
                self.file.close()  # flushes the last buffered bytes
            except OSError as exc:
                raise storage_error(exc) from None

    def finish(self) -> None:
        self.close()
        try:
            _write_marker(self.path, ".done", str(self.size))
        except OSError as exc:
            raise storage_error(exc) from None

    def abort(self) -> None:
        try:
            self.close()
        except (ProblemError, OSError):
            pass  # the upload is being abandoned anyway
        try:
            _write_marker(self.path, ".abort", "")
        except OSError:
            # a full disk: free the upload's space so that the reader's marker fits
            self.path.unlink(missing_ok=True)
            _write_marker(self.path, ".abort", "")

    def close_quietly(self) -> None:
        try:
            self.close()
        except (ProblemError, OSError):
            pass

    def remove(self) -> None:
        self.close_quietly()
        for suffix in ("", ".done", ".abort"):
            Path(f"{self.path}{suffix}").unlink(missing_ok=True)


class DigestSink:
    """An `UploadSink` that keeps nothing: it hashes and counts the file part, within the size
    limit (a replayed upload's body is only compared with the first one's)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.size = 0
        self.hash = hashlib.sha256()

    def write(self, data: bytes | memoryview) -> None:
        self.size += len(data)
        if self.size > self.limit:
            raise too_large(self.limit)
        self.hash.update(data)

    def close(self) -> None:
        pass


def _write_marker(path: Path, suffix: str, text: str) -> None:
    marker = Path(f"{path}{suffix}")
    staging = Path(f"{path}{suffix}.tmp")
    staging.write_text(text)
    os.replace(staging, marker)  # the reader never sees a half-written marker


def storage_error(exc: OSError) -> ProblemError | OSError:
    """507 for a full disk or quota (the message names no path); other I/O errors unchanged."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ProblemError(
            507,
            "Insufficient storage",
            "the server's disk is full: the upload could not be stored; nothing was kept",
        )
    return exc


def too_large(limit: int) -> ProblemError:
    return ProblemError(
        413,
        "Upload too large",
        f"the upload exceeds the limit of {limit / 2**20:g} MB (MAX_UPLOAD_MB)",
        limit_bytes=limit,
    )


def _display_name(raw: bytes | None) -> str | None:
    if not raw:
        return None
    text = raw.decode("utf-8", "replace").replace("\x00", "")  # PostgreSQL's text holds no NUL
    # Only the last path component is kept, and only for display: storage uses generated names.
    return text.replace("\\", "/").rsplit("/", 1)[-1][:255] or None


def _sent_twice(name: str) -> str:
    if name:
        return f"{name}: send each form field once"
    return "two form parts have no name: name each part (Content-Disposition: form-data; name=...)"


class _MultipartReader:
    """Callbacks for python-multipart's streaming parser: one file part, small text fields.
    `on_file(filename, fields)` is called when the file part begins, with the fields sent
    before it; a field of `early` sent after the file part is refused (too late to matter)."""

    def __init__(self, sink: UploadSink, on_file=None, early: tuple[str, ...] = ()):
        self.sink = sink
        self.on_file = on_file
        self.early = early
        self.fields: dict[str, bytearray] = {}
        self.filename: str | None = None
        self.saw_file = False
        self.ended = False  # the closing boundary was read
        self.field_parts = 0
        self._header_field = bytearray()
        self._header_value = bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._target: str | None = None

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self._part_begin,
            "on_header_field": lambda d, s, e: self._header_field.extend(d[s:e]),
            "on_header_value": lambda d, s, e: self._header_value.extend(d[s:e]),
            "on_header_end": self._header_end,
            "on_headers_finished": self._headers_finished,
            "on_part_data": self._part_data,
            "on_end": self._end,
        }

    def _end(self) -> None:
        self.ended = True

    def _part_begin(self) -> None:
        self._headers = {}
        self._target = None

    def _header_end(self) -> None:
        self._headers[bytes(self._header_field).lower()] = bytes(self._header_value)
        self._header_field.clear()
        self._header_value.clear()

    def _headers_finished(self) -> None:
        _, options = parse_options_header(self._headers.get(b"content-disposition", b""))
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == "file":
            if self.saw_file:
                raise ProblemError(422, "Invalid upload", "file: send exactly one file part")
            self.saw_file = True
            self.filename = _display_name(options.get(b"filename"))
            if self.on_file is not None:
                self.on_file(self.filename, self.text_fields())
        else:
            if self.saw_file and name in self.early:
                raise ProblemError(
                    422,
                    "Invalid upload",
                    f"{name}: send it before the file part (or in the query string): the "
                    "upload is parsed as it arrives",
                )
            if name in self.fields:  # its parts were joined: two label_columns 'y', 'x' read 'yx'
                raise ProblemError(422, "Invalid upload", _sent_twice(name))
            self.fields[name] = bytearray()
            self.field_parts += 1
            if self.field_parts > MAX_FIELDS:  # each kept a buffer: 40 MB of them took 400 MB
                raise ProblemError(
                    422,
                    "Invalid upload",
                    f"at most {MAX_FIELDS} form fields besides 'file' may be sent",
                )
        self._target = name

    def _part_data(self, data: bytes, start: int, end: int) -> None:
        if self._target == "file":
            self.sink.write(memoryview(data)[start:end])
            return
        buffer = self.fields.get(self._target)
        if buffer is None:
            return
        buffer.extend(data[start:end])
        if len(buffer) > MAX_FIELD_BYTES:
            raise ProblemError(
                422, "Invalid upload", f"{self._target}: expected at most {MAX_FIELD_BYTES} bytes"
            )

    def text_fields(self) -> dict[str, str]:
        return {k: bytes(v).decode("utf-8", "replace").strip() for k, v in self.fields.items()}


def check_declared_length(request: Request, limit: int) -> None:
    """413 at once when the declared body is over the limit (the stream is checked too)."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit + 64 * 1024:
        raise too_large(limit)


async def receive_into(
    request: Request, sink: UploadSink, on_file=None, early: tuple[str, ...] = ()
) -> tuple[str | None, str | None]:
    """Stream the request's file into `sink`; returns (file name, `name` field) as sent.
    `on_file(filename, fields)` is called once, before the file's first byte is written."""
    try:
        return await _stream_into(request, sink, on_file, early)
    finally:
        sink.close()


async def _stream_into(
    request: Request, sink: UploadSink, on_file, early: tuple[str, ...]
) -> tuple[str | None, str | None]:
    content_type, options = parse_options_header(request.headers.get("content-type", ""))
    try:
        if content_type != b"multipart/form-data":
            check_sent_once(request.query_params, ("filename",))  # read here, not declared
            filename = _display_name(request.query_params.get("filename", "").encode())
            if on_file is not None:
                on_file(filename, {})
            async for chunk in request.stream():
                sink.write(chunk)
            return filename, None
        boundary = options.get(b"boundary")
        if not boundary:
            raise ProblemError(422, "Invalid upload", "multipart body without a boundary")
        reader = _MultipartReader(sink, on_file, early)
        parser = MultipartParser(boundary, reader.callbacks())
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
        if not reader.ended:  # a body cut short: its last part's data may end mid-value
            raise ProblemError(
                422,
                "Invalid upload",
                f"multipart body without its closing boundary (--{boundary.decode('latin-1')}--):"
                " the upload was cut short",
            )
    except ClientDisconnect:
        raise ProblemError(400, "Upload interrupted", "the client closed the connection") from None
    except (ProblemError, HTTPException):  # ours, or the body size limit (app.limits)
        raise
    except Exception as exc:  # python-multipart's MultipartParseError and friends
        raise ProblemError(422, "Invalid upload", f"malformed multipart body: {exc}") from None
    if not reader.saw_file:
        raise ProblemError(
            422, "Invalid upload", "file: a multipart field named 'file' is required"
        )
    name = bytes(reader.fields.get("name") or b"").decode("utf-8", "replace").strip()
    if len(name) > MAX_NAME_CHARS:  # as the query's name: it was cut to its first 255 silently
        raise ProblemError(
            422, "Invalid upload", f"name: expected at most {MAX_NAME_CHARS} characters"
        )
    return reader.filename, name or None
