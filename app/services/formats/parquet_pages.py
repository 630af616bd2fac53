"""The page headers of a Parquet column chunk, read without decompressing anything.

A Parquet file's footer declares each column chunk's sizes, but a reader allocates what each
*page header* declares (``uncompressed_page_size``) and decodes as many values as it says
(``num_values``). Both are attacker-controlled in an upload, so before pyarrow reads a row group
its pages are walked here and their declared sizes checked against the footer and the limits: a
page cannot then expand to more than the checks allowed (a decompressor writes into a buffer of
the declared size).

Page headers are Thrift structs in the compact protocol (Parquet's ``PageHeader``: 1 type, 2
uncompressed_page_size, 3 compressed_page_size, 4 crc, 5 data_page_header, 6 index_page_header,
7 dictionary_page_header, 8 data_page_header_v2; the first field of 5, 7 and 8 is num_values,
a data page's encoding is field 2 of 5 and 4 of 8). Only those fields are read; every other
field is skipped by its type.
"""

from __future__ import annotations

from typing import BinaryIO, NamedTuple

from solvers.io import LibsvmLimitError

MAX_HEADER_BYTES = 1 << 20  # a page header larger than this is refused
FIRST_READ_BYTES = 256  # a header is read through a window this large, grown when it is longer
MIN_PAGE_BUDGET = 10_000  # pages beyond the first two of each column chunk a file may hold,
PAGE_BYTES = 512  # or one per PAGE_BYTES of it where that is more
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY = 0, 1, 2, 3, 4, 5, 6, 7, 8
_LIST, _SET, _MAP, _STRUCT = 9, 10, 11, 12
_NESTED_VALUES = {5, 7, 8}  # PageHeader fields whose struct starts with num_values
_ENCODING_FIELD = {5: 2, 8: 4}  # where a data page header (v1, v2) holds its values' encoding


class CorruptPages(ValueError):
    """A page header that cannot be read, or pages that disagree with the footer."""


class _EndsEarly(CorruptPages):
    """The header runs past the bytes given (past the window, or past the chunk)."""


def page_budget(file_size: int) -> int:
    """The most pages a file of this size may hold beyond the first two of each column chunk
    (a dictionary page and a data page, which every chunk may have however small): walking a
    header costs microseconds, so a file of one-byte pages would cost minutes of the API's time
    for a few megabytes."""
    return max(MIN_PAGE_BUDGET, file_size // PAGE_BYTES)


class Page(NamedTuple):
    header_bytes: int
    uncompressed: int
    compressed: int
    num_values: int
    encoding: int  # a data page's values' encoding (Parquet's enum), -1 for other pages


class _Reader:
    def __init__(self, data: bytes):
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise _EndsEarly("a page header ends early")
        value = self.data[self.pos]
        self.pos += 1
        return value

    def varint(self) -> int:
        shift = value = 0
        while True:
            b = self.byte()
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise CorruptPages("a page header holds an overlong number")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def skip(self, kind: int, depth: int = 0) -> None:
        if depth > 16:
            raise CorruptPages("a page header nests too deeply")
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, _I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before pos is used: varint() moves it
            self.pos += length
        elif kind in (_LIST, _SET):
            head = self.byte()
            size = head >> 4 if head >> 4 != 15 else self.varint()
            for _ in range(size):
                if head & 0x0F in (_TRUE, _FALSE):
                    self.byte()  # a boolean element is a byte of its own
                else:
                    self.skip(head & 0x0F, depth + 1)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4, depth + 1)
                    self.skip(types & 0x0F, depth + 1)
        elif kind == _STRUCT:
            self.struct(lambda field, kind: self.skip(kind, depth + 1))
        else:
            raise CorruptPages(f"a page header holds an unknown field type {kind}")
        if self.pos > len(self.data):
            raise _EndsEarly("a page header ends early")

    def struct(self, on_field) -> None:
        field = 0
        while True:
            head = self.byte()
            kind = head & 0x0F
            if kind == _STOP:
                return
            delta = head >> 4
            field = field + delta if delta else self.zigzag()
            on_field(field, kind)


def read_page(data: bytes) -> Page:
    """The page whose header starts `data` (which holds at least the whole header)."""
    reader = _Reader(data)
    found = {"values": 0, "encoding": -1}

    def nested(encoding_field: int | None):
        def on_field(field: int, kind: int) -> None:
            if field == 1 and kind == _I32:
                found["values"] = reader.zigzag()
            elif field == encoding_field and kind == _I32:
                found["encoding"] = reader.zigzag()
            else:
                reader.skip(kind)

        return on_field

    def top(field: int, kind: int) -> None:
        if field in (2, 3) and kind == _I32:
            found[field] = reader.zigzag()
        elif field in _NESTED_VALUES and kind == _STRUCT:
            reader.struct(nested(_ENCODING_FIELD.get(field)))
        else:
            reader.skip(kind)

    reader.struct(top)
    if 2 not in found or 3 not in found:
        raise CorruptPages("a page header lacks its sizes")
    if found[2] < 0 or found[3] < 0 or found["values"] < 0:
        raise CorruptPages("a page header declares a negative size")
    return Page(reader.pos, found[2], found[3], found["values"], found["encoding"])


def walk_chunk(raw: BinaryIO, start: int, length: int, file_size: int):
    """The pages of the column chunk of `length` bytes at `start` (`raw`: the file)."""
    end = start + length
    if start < 4 or length < 0 or end > file_size:
        raise CorruptPages("a column chunk lies outside the file")
    pos = start
    while pos < end:
        page = _page_at(raw, pos, end - pos)
        yield page
        pos += page.header_bytes + page.compressed
    if pos != end:
        raise CorruptPages("the pages of a column chunk overrun it")


def _page_at(raw: BinaryIO, pos: int, left: int) -> Page:
    """The page whose header starts at `pos`, read through a small window grown as needed (a
    header is tens of bytes: reading MAX_HEADER_BYTES for each cost most of the walk)."""
    window = FIRST_READ_BYTES
    while True:
        raw.seek(pos)
        size = min(window, left, MAX_HEADER_BYTES)
        try:
            return read_page(raw.read(size))
        except _EndsEarly:
            if size == min(left, MAX_HEADER_BYTES):
                raise
        window *= 16


class PageCount:
    """Pages walked so far in a file beyond the first two of each column chunk, against the
    file's `page_budget`."""

    def __init__(self, budget: int):
        self.budget, self.seen = budget, 0

    def add(self, index_in_chunk: int) -> None:
        self.seen += index_in_chunk >= 2
        if self.seen > self.budget:
            raise LibsvmLimitError(
                f"parquet: more than {self.budget} pages beyond the first two of each column "
                "chunk; pages this small cost more to check than their data is worth: write "
                "the file with larger pages (pyarrow.parquet.write_table(..., "
                "data_page_size=1 << 20), its default)",
                None,
            )


def column_cost(raw, column, file_size: int, pages: PageCount, encodings: set[int]) -> int:
    """Bytes a column chunk may take decoded: its pages' declared uncompressed sizes, or 8 bytes
    a value (a dictionary or run-length encoding decodes to more than it stores), whichever is
    more. The pages must agree with the footer and fit the file's page budget. The encodings
    of its data pages are added to `encodings`."""
    start = column.data_page_offset
    if column.has_dictionary_page and column.dictionary_page_offset:
        start = min(start, column.dictionary_page_offset)
    declared = column.total_uncompressed_size
    unpacked = values = 0
    try:
        chunk = walk_chunk(raw, start, column.total_compressed_size, file_size)
        for index, page in enumerate(chunk):
            pages.add(index)
            unpacked += page.header_bytes + page.uncompressed
            values += page.num_values
            if page.encoding >= 0:
                encodings.add(page.encoding)
            if unpacked > declared:
                raise CorruptPages("the pages declare more data than the footer")
    except CorruptPages as exc:
        raise ValueError(f"parquet: column {column.path_in_schema}: {exc}") from None
    return max(unpacked, 8 * values)
