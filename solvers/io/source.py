"""Opening LIBSVM sources: paths or binary file objects, plain or gzip/bzip2/xz compressed.

Compression is recognised by the stream's first bytes, not by the file name: uploads arrive as
temporary files with arbitrary names.
"""

import bz2
import gzip
import io
import lzma
import os
import zlib
from contextlib import contextmanager
from typing import NamedTuple

_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),
    (b"\xfd7zXZ\x00", "xz"),
)
_MAGIC_LEN = 6

# What the decompressors raise on corrupt or truncated input.
DECOMPRESSION_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)


class _Prefixed(io.RawIOBase):
    """A stream that replays ``head`` (bytes already read to sniff the format), then ``rest``."""

    def __init__(self, head, rest):
        self._head = memoryview(head)
        self._rest = rest

    def readable(self):
        return True

    def readinto(self, b):
        if self._head.nbytes:
            n = min(len(b), self._head.nbytes)
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return _readinto(self._rest, b)


def _readinto(stream, b):
    if hasattr(stream, "readinto"):
        return stream.readinto(b)
    chunk = stream.read(len(b))
    if isinstance(chunk, str):
        raise TypeError("expected a binary file object (opened with 'rb'), got a text stream")
    b[: len(chunk)] = chunk
    return len(chunk)


def _read_head(stream):
    head = bytearray()
    while len(head) < _MAGIC_LEN:
        chunk = stream.read(_MAGIC_LEN - len(head))
        if isinstance(chunk, str):
            raise TypeError("expected a binary file object (opened with 'rb'), got a text stream")
        if not chunk:
            break
        head += chunk
    return bytes(head)


def compression_of(head):
    """Name of the compression whose magic bytes start ``head``, or None for plain data."""
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    return None


def _decompressed(raw, compression):
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if compression == "bzip2":
        return bz2.BZ2File(raw, mode="rb")
    return lzma.LZMAFile(raw, mode="rb")


class Source(NamedTuple):
    """An opened input: ``stream`` (supports ``readinto``) yields the text; ``compression`` is
    None, "gzip", "bzip2" or "xz"; ``size`` is the byte size on disk and ``position()`` the bytes
    consumed from disk so far (both None for file objects), to extrapolate the text's size."""

    stream: object
    compression: str | None
    size: int | None
    position: object


@contextmanager
def open_source(source):
    """Open a path or a binary file object as a `Source`, decompressing it if needed."""
    if isinstance(source, io.TextIOBase):
        raise TypeError(
            "expected a path or a binary file object (opened with 'rb'), got a text stream"
        )
    if isinstance(source, str | bytes | os.PathLike):
        raw = open(source, "rb", buffering=0)  # closed in the finally below
        owned = True
        head = raw.read(_MAGIC_LEN)
        raw.seek(0)
        size, position = os.fstat(raw.fileno()).st_size, raw.tell
    elif hasattr(source, "read"):
        owned = False
        head = _read_head(source)
        raw = _Prefixed(head, source)
        size, position = None, None
    else:
        raise TypeError(f"expected a path or a binary file object, got {type(source).__name__}")
    compression = compression_of(head)
    stream = _decompressed(raw, compression) if compression else raw
    try:
        yield Source(stream, compression, size, position)
    finally:
        if stream is not raw:
            stream.close()
        if owned:
            raw.close()


def read_full(stream, view):
    """Read into the writable memoryview ``view`` until it is full or the stream ends."""
    total = 0
    while total < len(view):
        n = _readinto(stream, view[total:])
        if not n:
            break
        total += n
    return total
