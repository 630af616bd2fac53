"""Alembic migrations are the only way tables are made: upgrade gives exactly the ORM's schema,
every step downgrades cleanly, and the cycle repeats (SQLite, and PostgreSQL when configured)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import event, inspect
from sqlalchemy.orm import Session

from app import migrate
from app.db import make_engine
from app.services import idempotency
from app.tables import Base
from tests.app.conftest import ScratchDatabase, postgres_url_or_skip

ROOT = Path(__file__).resolve().parents[2]

OURS = set(Base.metadata.tables)


def schema_diff(url: str) -> list:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "compare_type": True,
                    # other components' tables (procrastinate's) are not ours to compare
                    "include_name": lambda name, kind, parent: kind != "table" or name in OURS,
                },
            )
            return compare_metadata(context, Base.metadata)
    finally:
        engine.dispose()


def tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names()) & OURS
    finally:
        engine.dispose()


def check_cycle(url: str) -> None:
    revisions = [
        s.revision
        for s in reversed(
            list(ScriptDirectory.from_config(migrate.alembic_config(url)).walk_revisions())
        )
    ]
    assert revisions[0] == "0001"
    for revision in revisions:  # one step at a time up...
        migrate.upgrade(url, revision)
        assert migrate.current(url) == revision
    assert tables(url) == OURS
    assert schema_diff(url) == []
    for previous in [*reversed(revisions[:-1]), None]:  # ...and down
        migrate.downgrade(url, previous or "base")
        assert migrate.current(url) == previous
    assert tables(url) == set()
    migrate.upgrade(url)
    assert tables(url) == OURS and schema_diff(url) == []


def test_sqlite_upgrade_downgrade_cycle(tmp_path):
    url = f"sqlite:///{tmp_path / 'm.db'}"
    check_cycle(url)
    engine = make_engine(url)
    with engine.begin() as conn:  # the comparison notices a schema that drifted
        conn.exec_driver_sql("DROP INDEX ix_jobs_status")
    engine.dispose()
    assert [d[0] for d in schema_diff(url)] == ["add_index"]


@pytest.mark.postgres
def test_margin_migrate_logs_its_revisions_not_alembics_plugins(tmp_path):
    # before: seven "setup plugin alembic.autogenerate..." lines opened every `margin serve`
    # (logged as Alembic's modules are imported: a fresh process, as a start is)
    env = {**os.environ, "DATA_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    env.pop("DATABASE_URL", None)
    done = subprocess.run([sys.executable, "-m", "app.cli", "migrate"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Running upgrade  -> 0001" in done.stderr
    assert "setup plugin" not in done.stderr, done.stderr


def test_postgres_upgrade_downgrade_cycle():
    scratch = ScratchDatabase(postgres_url_or_skip())
    try:
        check_cycle(scratch.url)
    finally:
        scratch.drop()


def test_sqlite_connections_use_wal_and_foreign_keys(tmp_path):
    url = f"sqlite:///{tmp_path / 'p.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    with engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() >= 1000
    engine.dispose()


def test_the_idempotency_sweep_reads_by_age_through_an_index(db_url):
    """The sweep that forgets expired Idempotency-Keys deletes by `created_at` alone: without an
    index on it (migration 0014), every sweep read the whole table."""
    engine = make_engine(db_url)
    executed = []

    def record(conn, cursor, statement, parameters, context, executemany):
        executed.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    with Session(engine) as session:
        idempotency.forget_expired(session, 24)
    event.remove(engine, "before_cursor_execute", record)
    [(statement, parameters)] = [s for s in executed if s[0].lstrip().startswith("DELETE")]
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters).all()
        else:  # an empty table is read whole unless that is ruled out
            conn.exec_driver_sql("SET LOCAL enable_seqscan = off")
            plan = conn.exec_driver_sql(f"EXPLAIN {statement}", parameters).all()
    engine.dispose()
    assert "ix_idempotency_keys_created_at" in str(plan), plan
