"""Pieces shared by every resource's schemas: the base of JSON request bodies, the list envelope,
its opaque cursors, and plain decimal numbers read from URLs and headers."""

from __future__ import annotations

import base64
import binascii
from typing import Generic, TypeVar

from pydantic import BaseModel, ConfigDict

from app.errors import ProblemError

T = TypeVar("T")

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
# A list page's bulky JSON (datasets' and models' feature names) in bytes at most (a page holds
# one item however large): a table's 100,000 column names take 889 kB, and 40 such datasets made one
# GET /v1/datasets a 36 MB answer and 390 MB of the API's memory (500 of them: 450 MB, 5 GB).
MAX_PAGE_BULK = 4 << 20


class RequestBody(BaseModel):
    """A JSON request body, validated strictly: an unknown field is refused, and a value is taken
    only as its own JSON type (`true` is not the integer 1, nor `"1"`; an integer field refuses
    1.5), so that a client's slip is a 422 naming the field, not a silent coercion. A float field
    still takes an integer."""

    model_config = ConfigDict(extra="forbid", strict=True)


class Page(BaseModel, Generic[T]):
    """`{"items": [...], "next": cursor or null}`: pass `next` back as `?cursor=` for more."""

    items: list[T]
    next: str | None = None


def decimal(text: str, maximum: int) -> int | None:
    """The integer that `text` spells in plain ASCII decimal digits, if at most `maximum`; else
    None. (`str.isdigit` alone also takes '²' or '٣', which `int` refuses, and a number of
    thousands of digits, which `int` refuses too or the database cannot bind.)"""
    if not (text.isascii() and text.isdigit()) or len(text) > len(str(maximum)):
        return None
    value = int(text)
    return value if value <= maximum else None


def encode_cursor(value: str | int) -> str:
    return base64.urlsafe_b64encode(str(value).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The position a cursor stands for; a malformed cursor is a 422."""
    if cursor is None or cursor == "":
        return None
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        position = base64.b64decode(padded.encode(), altchars=b"-_", validate=True).decode()
        if "\x00" in position:  # never in an id; PostgreSQL cannot compare text holding one
            raise ValueError(position)
        return position
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ProblemError(
            422,
            "Invalid cursor",
            f"cursor: expected a value from a previous 'next', got {cursor!r}",
        ) from None


def keyset_page(
    session, query, column, limit: int, cursor: str | None, *, descending=True, position=str
) -> tuple[list, str | None]:
    """One page of `query` ordered by the unique `column`: the rows past the cursor's position
    (`position` turns the decoded cursor into a value of the column), and the next cursor.
    Rows are found by the column's value rather than an offset, so a page never skips or
    repeats rows that were added or removed meanwhile."""
    query = query.order_by(column.desc() if descending else column).limit(limit + 1)
    after = decode_cursor(cursor)
    if after is not None:
        after = position(after)
        query = query.where(column < after if descending else column > after)
    return page_of(list(session.scalars(query)), limit, lambda row: getattr(row, column.key))


def sized_page(
    session, query, column, limit: int, cursor: str | None, *, bulk
) -> tuple[list, str | None]:
    """`keyset_page`, newest first, whose page also ends before its rows' `bulk` (JSON columns,
    counted as their text) passes MAX_PAGE_BULK; a page holds one row at least. The sizes are
    read first, without the rows, so that no more bulk is loaded than the page sends."""
    from sqlalchemy import Text, cast, func

    ordered = query.order_by(column.desc()).limit(limit + 1)
    after = decode_cursor(cursor)
    if after is not None:
        ordered = ordered.where(column < after)
    size = sum(func.coalesce(func.length(cast(part, Text)), 0) for part in bulk)
    sizes = session.execute(ordered.with_only_columns(column, size)).all()
    keys, total = [], 0
    for key, row_size in sizes[:limit]:
        if keys and total + row_size > MAX_PAGE_BULK:
            break
        keys.append(key)
        total += row_size
    items = list(session.scalars(query.where(column.in_(keys)).order_by(column.desc())))
    return items, encode_cursor(keys[-1]) if len(keys) < len(sizes) else None


def page_of(items: list, limit: int, key) -> tuple[list, str | None]:
    """Split a query result fetched with limit + 1 rows into (items, next cursor)."""
    if len(items) > limit:
        items = items[:limit]
        return items, encode_cursor(key(items[-1]))
    return items, None
