"""Size limits on what clients send: request bodies (every endpoint) and the expanded size of
compressed uploads (no decompression bombs); and no NUL character in a URL.

`BodySizeLimit` is a pure ASGI middleware, cheap enough for the prediction path: a request that
declares its length is judged on the header alone (the HTTP server never delivers more than the
declared length); only a chunked body is counted as it arrives. Limits by route: uploads
MAX_UPLOAD_MB (plus room for the multipart envelope), predict MAX_PREDICT_BODY_MB, everything else
MAX_REQUEST_KB. A body must also keep arriving: the time spent waiting for it may not exceed
BODY_TIMEOUT_S plus one second per MIN_BODY_RATE_KB received, else 408 (a slowly trickled upload
would otherwise hold one of the few upload parser processes, which follow the file as it comes,
for as long as its sender likes). A URL whose path or query holds a NUL character is a 422 here:
no identifier, cursor or parameter may contain one, and PostgreSQL cannot even compare text with
it.

`open_expanded` wraps an upload stream so that a compressed upload is decompressed here, counted,
and stopped once it expands beyond MAX_EXPANDED_MB; the reader then sees plain text.
"""

from __future__ import annotations

import asyncio
import bz2
import gzip
import io
import lzma
import time
import zlib

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.config import Settings

MULTIPART_SLACK = 1024 * 1024
MAGIC = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz"}
# recognised only to say so: without a decompressor, its frame was read as text with a NUL byte
UNREAD_MAGIC = {b"\x28\xb5\x2f\xfd": "zstd"}


class BodyTooLarge(HTTPException):
    """A chunked request body crossed its limit while being read (FastAPI re-raises these). Its
    answer closes the connection: kept open, it went on reading the rest of the body, with no
    deadline once the answer was sent."""

    def __init__(self, limit: int):
        super().__init__(
            413,
            f"the request body exceeds the limit of {limit} bytes",
            headers={"Connection": "close"},
        )


class BodyTooSlow(HTTPException):
    """A request body fell behind the slowest accepted rate (FastAPI re-raises these). Its
    answer closes the connection: kept open, it went on reading what the client trickled."""

    def __init__(self, timeout_s: float, rate: float):
        super().__init__(
            408,
            f"the request body arrived too slowly: at most {timeout_s:g} s behind "
            f"{rate / 1024:g} KB/s are allowed (BODY_TIMEOUT_S, MIN_BODY_RATE_KB)",
            headers={"Connection": "close"},
        )


class RouteLimits:
    """The body limit of each kind of request, and the pace a body must keep, from the
    settings."""

    def __init__(self, settings: Settings):
        self.upload = settings.max_upload_bytes + MULTIPART_SLACK
        self.predict = int(settings.max_predict_body_mb * 1024 * 1024)
        self.default = int(settings.max_request_kb * 1024)
        self.body_timeout_s = float(settings.body_timeout_s)
        self.min_body_rate = float(settings.min_body_rate_kb) * 1024  # bytes per second

    def for_path(self, method: str, path: str) -> int:
        if method != "POST":
            return self.default
        if path.rstrip("/") == "/v1/datasets":
            return self.upload
        if path.startswith("/v1/models/") and path.endswith(("/predict", "/invocations")):
            return self.predict
        if path.startswith("/v2/models/") and path.endswith("/infer"):
            return self.predict
        return self.default


class BodySizeLimit:
    """ASGI middleware: 413 for a request body over its route's limit, 408 for one that arrives
    too slowly."""

    def __init__(self, app: ASGIApp, limits: RouteLimits):
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limits.for_path(scope["method"], scope["path"])
        declared = _content_length(scope)
        if declared != 0 and scope["method"] not in ("GET", "HEAD"):  # a body to wait for
            receive = _paced(receive, self.limits.body_timeout_s, self.limits.min_body_rate)
        if "\x00" in scope["path"] or b"%00" in scope["query_string"]:
            from app.errors import NUL_DETAIL

            await _reject(send, 422, "Invalid request", NUL_DETAIL, scope)
        elif declared is None:
            await self.app(scope, _counting(receive, limit), send)
        elif declared < 0:
            await _reject(
                send, 400, "Bad Request", "the Content-Length header is not a number", scope
            )
        elif declared > limit:
            await _reject(
                send,
                413,
                "Request too large",
                f"the request body of {declared} bytes exceeds the limit of {limit} bytes "
                "for this endpoint",
                scope,
            )
        else:
            await self.app(scope, receive, send)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else -1
    return None


def _counting(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def counted() -> Message:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return counted


def _paced(receive: Receive, timeout_s: float, rate: float) -> Receive:
    """`receive`, raising BodyTooSlow once the time spent waiting for the body exceeds
    `timeout_s` + received bytes / `rate`. Only waits count (not the time the endpoint takes
    between reads), and only until the body's last part: a later receive (a streaming response
    listening for the client's disconnect) waits as long as it needs."""
    waited, received, done = 0.0, 0, False

    async def paced() -> Message:
        nonlocal waited, received, done
        if done:
            return await receive()
        start = time.monotonic()
        try:
            async with asyncio.timeout(max(timeout_s + received / rate - waited, 0.0)):
                message = await receive()
        except TimeoutError:
            raise BodyTooSlow(timeout_s, rate) from None
        finally:
            waited += time.monotonic() - start
        received += len(message.get("body", b""))
        done = message["type"] != "http.request" or not message.get("more_body", False)
        return message

    return paced


async def _reject(send: Send, status: int, title: str, detail: str, scope: Scope) -> None:
    from app.errors import error_response

    response = error_response(scope["path"], status, title, detail)
    body = response.body
    media = response.media_type.encode()
    headers = [
        (b"content-type", media), (b"connection", b"close"),
        (b"content-length", str(len(body)).encode()),
    ]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# ------------------------------------------------------------------------------------------
# Compressed uploads


class ExpansionTooLarge(ValueError):
    """A compressed upload expands beyond the limit."""

    def __init__(self, limit: int):
        super().__init__(
            f"the compressed upload expands beyond the limit of {limit / 2**20:g} MB "
            "(MAX_EXPANDED_MB)"
        )
        self.limit = limit


class NestedCompression(ValueError):
    """A compressed upload whose content is compressed again (a classic bomb shape)."""

    def __init__(self, outer: str, inner: str):
        super().__init__(f"the {outer} upload contains {inner} data: nested compression is refused")


class UnreadCompression(ValueError):
    """An upload compressed in a format the service does not decompress."""

    def __init__(self, kind: str):
        super().__init__(
            f"a {kind}-compressed upload: send it uncompressed, or compressed with gzip, bzip2 "
            "or xz"
        )


class _Limited(io.RawIOBase):
    """Counts the bytes read from a decompressing stream; raises past `limit`. Corrupt data
    becomes a ValueError naming the format (the decompressors raise OSError, EOFError, ...)."""

    def __init__(self, inner, kind: str, limit: int):
        self.inner = inner
        self.kind = kind
        self.limit = limit
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self.inner.readinto(buffer)
        except (EOFError, lzma.LZMAError, zlib.error) as exc:
            raise CorruptCompressed(self.kind, exc) from None
        except OSError as exc:
            if exc.errno is not None:  # a real I/O error, not a format one
                raise
            raise CorruptCompressed(self.kind, exc) from None
        self.total += n or 0
        if self.total > self.limit:
            raise ExpansionTooLarge(self.limit)
        return n

    def close(self) -> None:
        self.inner.close()
        super().close()


def compression_of(head: bytes, magics: dict[bytes, str] = MAGIC) -> str | None:
    for magic, name in magics.items():
        if head.startswith(magic):
            return name
    return None


def _decompressor(raw, kind: str):
    if kind == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "bzip2":
        return bz2.BZ2File(raw, mode="rb")
    return lzma.LZMAFile(raw, mode="rb")


class CorruptCompressed(ValueError):
    def __init__(self, kind: str, exc: BaseException):
        reason = str(exc) or type(exc).__name__
        super().__init__(f"the {kind} upload is corrupt or truncated: {reason}")


class _Prefixed(io.RawIOBase):
    """`head` followed by the rest of `raw` (the head was read to recognise the format)."""

    def __init__(self, head: bytes, raw):
        self.head = memoryview(head)
        self.raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        return self.raw.readinto(buffer)


# bytes read ahead of the parse: a compression's magic bytes, and the first bytes that recognise
# an unnamed format (`app.services.dataset_files`); the stream hands them back in one read, so
# that a peek sees them all (with 8 it saw 8, and an unnamed CSV whose first column name
# was 8 characters or longer was taken for LIBSVM)
READ_AHEAD = 4096


def _read_head(stream, n: int) -> bytes:
    head = b""
    while len(head) < n:
        chunk = stream.read(n - len(head))
        if not chunk:
            break
        head += chunk
    return head


def open_expanded(raw, limit: int) -> io.BufferedReader:
    """A plain-text view of an upload stream (`raw`: a binary stream with `readinto`).

    Compressed uploads (gzip, bzip2, xz, recognised by their magic bytes) are decompressed with
    their expanded size limited to `limit` bytes (ExpansionTooLarge beyond it); a compressed
    payload inside a compressed upload is refused (NestedCompression).
    """
    head = _read_head(raw, READ_AHEAD)
    stream = io.BufferedReader(_Prefixed(head, raw), 1 << 20)
    kind = compression_of(head)
    if kind is None:
        unread = compression_of(head, UNREAD_MAGIC)
        if unread is not None:
            raise UnreadCompression(unread)
        return stream
    plain = _Limited(_decompressor(stream, kind), kind, limit)
    inner_head = _read_head(plain, READ_AHEAD)
    inner = compression_of(inner_head) or compression_of(inner_head, UNREAD_MAGIC)
    if inner is not None:
        raise NestedCompression(kind, inner)
    return io.BufferedReader(_Prefixed(inner_head, plain), 1 << 20)
