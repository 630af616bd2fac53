"""The distributed job queue's schema (procrastinate's tables, types, functions and triggers).

Applied on PostgreSQL only: the queue runs there (WORKER_BACKEND=procrastinate); on SQLite the
step does nothing, so one migration history serves both. The SQL is the schema shipped with the
installed procrastinate release, applied as it is (procrastinate keeps no version table of its
own). A later procrastinate release whose schema changes needs a new step here that applies its
files from `procrastinate.schema.SchemaManager.get_migrations_path()`.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TABLES = (
    "procrastinate_events",
    "procrastinate_periodic_defers",
    "procrastinate_jobs",
    "procrastinate_workers",
)
TYPES = (
    "procrastinate_job_status",
    "procrastinate_job_event_type",
    "procrastinate_job_to_defer_v1",
)

# Functions are many and versioned (`_v1`, `_v2`, ...): drop whatever this schema holds.
DROP_FUNCTIONS = r"""
DO $$
DECLARE f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.proname LIKE 'procrastinate\_%' AND p.pronamespace = current_schema()::regnamespace
    LOOP
        EXECUTE 'DROP FUNCTION ' || f || ' CASCADE';
    END LOOP;
END;
$$;
"""


def _raw_connection():
    """The driver's connection: the schema is many statements with `%` in them (no params)."""
    return op.get_bind().connection.driver_connection


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    from procrastinate.schema import SchemaManager

    _raw_connection().execute(SchemaManager.get_schema())


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    raw = _raw_connection()
    raw.execute(f"DROP TABLE IF EXISTS {', '.join(TABLES)} CASCADE")
    raw.execute(DROP_FUNCTIONS)
    raw.execute(f"DROP TYPE IF EXISTS {', '.join(TYPES)} CASCADE")
