"""The job queue's schema, pinned: which procrastinate schema the database holds, and a check at
start that the installed procrastinate expects the same one.

Migration 0002 applies the schema file shipped in `migrations/procrastinate/` (a copy of the
schema of the procrastinate release in requirements/service.txt), not whatever release happens
to be installed, and labels the queue's table with its version. Each procrastinate release ships
its schema changes as numbered migration files; the newest file's number is the schema version
it expects. A release whose schema differs from the database's would fail at run time in
obscure ways, so `margin api` and `margin worker` refuse to start with a clear message instead.
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

PINNED = "03.04.00_50"  # the newest migration of procrastinate 3.10's schema
LABEL = "margin: procrastinate schema "
_DATABASE = text("SELECT obj_description(to_regclass('procrastinate_jobs'), 'pg_class')")


class SchemaMismatch(RuntimeError):
    """The installed procrastinate and the database's queue schema do not match."""


def installed_version() -> str:
    """The schema version the installed procrastinate expects (its newest migration file)."""
    import procrastinate

    migrations = Path(procrastinate.__file__).parent / "sql" / "migrations"
    names = sorted(p.name[:11] for p in migrations.glob("[0-9]*.sql"))
    return names[-1] if names else "none"


def database_version(connection) -> str | None:
    """The queue schema's version the database was migrated to (None: no label)."""
    label = connection.execute(_DATABASE).scalar()
    return label[len(LABEL) :] if label and label.startswith(LABEL) else None


def check(db) -> None:
    """Raise SchemaMismatch unless procrastinate's expected schema is the database's."""
    import procrastinate

    installed = installed_version()
    with db.engine.connect() as connection:
        database = database_version(connection)
    if installed == PINNED and database == PINNED:
        return
    raise SchemaMismatch(
        f"procrastinate {procrastinate.__version__} is installed, which expects queue schema "
        f"{installed}; the database holds {database or 'no labelled schema'} and this release of "
        f"Margin ships schema {PINNED} (run `margin migrate`). Install the procrastinate version "
        "of requirements/service.txt, or add a migration that applies procrastinate's schema "
        f"changes from {PINNED} to {installed}."
    )
