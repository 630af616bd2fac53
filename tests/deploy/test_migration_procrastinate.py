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


@pytest.mark.postgres
def test_the_queue_schema_is_pinned_and_checked(database, monkeypatch):
    """Migration 0002 applies the pinned schema file (not the installed release's), labels it,
    and the start check names both versions when the installed procrastinate expects another."""
    from app.db import Database
    from app.jobs import procrastinate_schema as schema
    from tests.deploy.conftest import ROOT

    source = (ROOT / "migrations" / "versions" / "0002_procrastinate.py").read_text()
    assert "get_schema" not in source and schema.PINNED in source
    migrate.upgrade(database.url)
    db = Database(database.url)
    try:
        with db.engine.connect() as conn:
            assert schema.database_version(conn) == schema.PINNED
        schema.check(db)  # the installed release (the locked one) matches
        monkeypatch.setattr(schema, "installed_version", lambda: "03.05.00_01")
        with pytest.raises(schema.SchemaMismatch, match="expects queue schema 03.05.00_01"):
            schema.check(db)
        monkeypatch.undo()
        with db.engine.begin() as conn:  # a database migrated by some other schema
            conn.execute(text("COMMENT ON TABLE procrastinate_jobs IS NULL"))
        with pytest.raises(schema.SchemaMismatch, match="no labelled schema"):
            schema.check(db)
        migrate.downgrade(database.url, "0007")  # 0008 labels a database migrated before
        migrate.upgrade(database.url)
        schema.check(db)
    finally:
        db.dispose()


def test_the_installed_procrastinate_expects_the_pinned_schema():
    from app.jobs import procrastinate_schema as schema

    assert schema.installed_version() == schema.PINNED
