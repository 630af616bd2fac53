"""Database engine and sessions.

On SQLite the API reads while workers write progress, so every connection runs in WAL mode with a
busy timeout and foreign keys on. Transactions that write use `Database.write()`, which on SQLite
takes the write lock up front (``BEGIN IMMEDIATE``): a deferred transaction that reads first and
writes later fails at once with SQLITE_BUSY when another writer committed in between.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000


def make_engine(url: str, **kwargs) -> Engine:
    """An engine for `url`, with the SQLite pragmas and transaction handling described above."""
    if not url.startswith("sqlite"):
        kwargs.setdefault("pool_pre_ping", True)
        return create_engine(url, **kwargs)
    engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record):
        # Let SQLAlchemy's "begin" hook below issue BEGIN itself (pysqlite's own is deferred-only).
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):
        immediate = conn.get_execution_options().get("sqlite_immediate", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """An engine with two session factories: plain (reads) and write (locks early on SQLite)."""

    def __init__(self, url: str, **engine_kwargs):
        self.url = url
        self.engine = make_engine(url, **engine_kwargs)
        self.is_sqlite = url.startswith("sqlite")
        writer = (
            self.engine.execution_options(sqlite_immediate=True) if self.is_sqlite else self.engine
        )
        self._reader = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = sessionmaker(writer, expire_on_commit=False)

    def session(self) -> Session:
        """A session for reading (and for writes that start with a write)."""
        return self._reader()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on any error."""
        with self._writer() as session, session.begin():
            yield session

    def ping(self) -> None:
        with self.engine.connect() as conn:
            conn.execute(text("SELECT 1"))

    def dispose(self) -> None:
        self.engine.dispose()
