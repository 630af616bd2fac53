"""The distributed job queue's schema (procrastinate's tables, types, functions and triggers).

Applied on PostgreSQL only: the queue runs there (WORKER_BACKEND=procrastinate); on SQLite the
step does nothing, so one migration history serves both. The SQL is a pinned copy of the schema
of procrastinate 3.10 (migrations/procrastinate/schema-03.04.00_50.sql), never the installed
release's, and the queue's table is labelled with its version, which `margin api` and `margin
worker` compare with the installed procrastinate at start (app/jobs/procrastinate_schema.py). A
procrastinate release whose schema changes needs a new step that applies its migration files.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from pathlib import Path

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

SCHEMA_VERSION = "03.04.00_50"
SCHEMA_FILE = Path(__file__).resolve().parents[1] / "procrastinate" / f"schema-{SCHEMA_VERSION}.sql"
LABEL = f"COMMENT ON TABLE procrastinate_jobs IS 'margin: procrastinate schema {SCHEMA_VERSION}'"

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
    raw = _raw_connection()
    raw.execute(SCHEMA_FILE.read_text())
    raw.execute(LABEL)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    raw = _raw_connection()
    raw.execute(f"DROP TABLE IF EXISTS {', '.join(TABLES)} CASCADE")
    raw.execute(DROP_FUNCTIONS)
    raw.execute(f"DROP TYPE IF EXISTS {', '.join(TYPES)} CASCADE")
