"""Revision 0002: the queue's schema comes with `margin migrate` on PostgreSQL, and only there."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text

from app import migrate
from tests.deploy.cluster import FreshDatabase

QUEUE_OBJECTS = """
SELECT (SELECT count(*) FROM pg_tables WHERE tablename LIKE 'procrastinate%'),
       (SELECT count(*) FROM pg_proc WHERE proname LIKE 'procrastinate%'),
       (SELECT count(*) FROM pg_type WHERE typname LIKE 'procrastinate%')
"""


@pytest.fixture
def database():
    db = FreshDatabase()
    try:
        yield db
    finally:
        db.drop()


def _queue_objects(url: str) -> tuple[int, int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return tuple(conn.execute(text(QUEUE_OBJECTS)).one())
    finally:
        engine.dispose()


@pytest.mark.postgres
def test_upgrade_installs_and_downgrade_removes_the_queue_schema(database):
    migrate.upgrade(database.url, "0002")
    assert migrate.current(database.url) == "0002"
    tables, functions, types = _queue_objects(database.url)
    assert tables == 4 and functions > 10 and types >= 3
    # procrastinate itself finds its schema usable: a job can be deferred and read back.
    engine = create_engine(database.url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW('q', 't', 0, NULL, NULL,"
                " '{}'::jsonb, NULL)::procrastinate_job_to_defer_v1])"
            )
        )
        assert conn.execute(text("SELECT status::text FROM procrastinate_jobs")).scalar() == "todo"
    engine.dispose()

    migrate.downgrade(database.url, "0001")
    assert migrate.current(database.url) == "0001"
    assert _queue_objects(database.url) == (0, 0, 0)
    migrate.upgrade(database.url)  # and up to the head: the step is repeatable
    assert _queue_objects(database.url)[0] == 4


def test_sqlite_gets_no_queue_tables(tmp_path):
    url = f"sqlite:///{tmp_path / 'margin.db'}"
    migrate.upgrade(url)
    engine = create_engine(url)
    try:
        names = inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert "jobs" in names
    assert not [n for n in names if n.startswith("procrastinate")]
    migrate.downgrade(url, "0001")
    assert migrate.current(url) == "0001"
