"""Keyset pages (`schemas.common.keyset_page`): walking every page of a table visits each row once,
in order, in both directions, with the cursor turned into the column's type; a bad cursor is a
422. On an in-memory SQLite table of its own, so that no service is needed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sqlalchemy import Integer, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from app.errors import ProblemError
from app.schemas.common import encode_cursor, keyset_page


class Base(DeclarativeBase):
    pass


class Row(Base):
    __tablename__ = "rows"
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String)


@pytest.fixture
def session():
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        # numbers 2, 4, ..., 20 so that 10 sorts before 9 as text: the int position matters
        session.add_all(Row(number=n, name=f"r{n:02d}") for n in range(2, 21, 2))
        session.commit()
        yield session
    engine.dispose()


def walk(session, column, limit, query=None, **options) -> list:
    query = select(Row) if query is None else query
    seen, cursor = [], None
    while True:
        page, cursor = keyset_page(session, query, column, limit, cursor, **options)
        assert len(page) <= limit
        seen.extend(getattr(row, column.key) for row in page)
        assert len(seen) <= 10, "a row came on two pages"  # (and the walk would never end)
        if cursor is None:
            return seen


@pytest.mark.parametrize("limit", [1, 3, 10, 11])
def test_every_row_once_newest_first(session, limit):
    assert walk(session, Row.number, limit, position=int) == list(range(20, 1, -2))


@pytest.mark.parametrize("limit", [1, 4, 10])
def test_every_row_once_in_ascending_order(session, limit):
    names = [f"r{n:02d}" for n in range(2, 21, 2)]
    assert walk(session, Row.name, limit, descending=False) == names


def test_a_filter_is_kept_across_pages(session):
    query = select(Row).where(Row.number > 10)
    assert walk(session, Row.number, 2, query, position=int) == [20, 18, 16, 14, 12]


def test_the_cursor_is_the_last_row_shown(session):
    page, cursor = keyset_page(session, select(Row), Row.number, 3, None, position=int)
    assert [r.number for r in page] == [20, 18, 16] and cursor == encode_cursor(16)
    page, cursor = keyset_page(session, select(Row), Row.number, 3, cursor, position=int)
    assert [r.number for r in page] == [14, 12, 10]


def test_a_bad_cursor_is_a_422(session):
    with pytest.raises(ProblemError) as info:
        keyset_page(session, select(Row), Row.number, 3, "%%%")
    assert info.value.status == 422


def test_ids_one_process_makes_in_one_millisecond_still_sort_in_creation_order(monkeypatch):
    """Lists page by id, newest first: three models made within one millisecond listed in a random
    order (the random part decided), and a step back of the clock put a later id before earlier
    ones. Time is frozen, then stepped back; ids keep growing and keep their length."""
    from app import tables

    now = [1_800_000_000.0]  # the id generator's clock only (not the process's), and its
    # latest id put back after: a later test's ids must not carry this future millisecond
    monkeypatch.setattr(tables, "time", SimpleNamespace(time=lambda: now[0]))
    monkeypatch.setattr(tables, "_last_id", [0, 0])
    made = [tables.new_id("model") for _ in range(1000)]
    now[0] -= 5.0
    made += [tables.new_id("model") for _ in range(10)]
    assert made == sorted(made) and len(set(made)) == len(made)
    assert {len(one) for one in made} == {len("model_") + 22}
