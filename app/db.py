"""Database engine and sessions.

On SQLite the API reads while workers write progress, so every connection runs in WAL mode with a
busy timeout and foreign keys on. Transactions that write use `Database.write()`, which on SQLite
takes the write lock up front (``BEGIN IMMEDIATE``): a deferred transaction that reads first and
writes later fails at once with SQLITE_BUSY when another writer committed in between.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

SQLITE_BUSY_TIMEOUT_MS = 30_000
PG_DISK_FULL = "53100"  # SQLSTATE disk_full


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


def is_disk_full(exc: BaseException) -> bool:
    """True for "no space left": SQLite's SQLITE_FULL, PostgreSQL's disk_full, ENOSPC/EDQUOT."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    if not isinstance(exc, sa_exc.DBAPIError):
        return False
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == PG_DISK_FULL:
        return True
    return "sqlite" in type(orig).__module__ and "disk is full" in str(orig).lower()


def is_nul_text(exc: BaseException) -> bool:
    """True when PostgreSQL's driver refused a text value holding the NUL character (U+0000),
    which its text type cannot store (SQLite's can): a fault of the request, not the server."""
    return isinstance(exc, sa_exc.DataError) and "NUL (0x00)" in str(exc.orig)


def is_unavailable(exc: BaseException) -> bool:
    """True when the database could not be reached or was too busy (connection refused or
    dropped, a restart, the pool's wait for a connection timed out, SQLite locked): trying again
    later may succeed. An error of the statement itself is not one."""
    if isinstance(exc, sa_exc.TimeoutError):  # the pool had no connection to give in time
        return True
    if not isinstance(exc, sa_exc.DBAPIError) or is_disk_full(exc):
        return False
    if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError):
        return True
    if not isinstance(exc, sa_exc.OperationalError):
        return False
    text_ = str(exc.orig).lower()
    # SQLite's integrity problems are OperationalErrors too; only busy/locked means "retry"
    return "sqlite" not in type(exc.orig).__module__ or "locked" in text_ or "busy" in text_
