"""Progress and status-event ids as 64-bit integers on PostgreSQL.

Every progress report of every job takes an id from one sequence, and PostgreSQL's INTEGER ends
at 2^31 − 1: a busy service would one day fail every progress write. SQLite's INTEGER PRIMARY
KEY is already a 64-bit rowid, so there is nothing to do there.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TABLES = ("job_progress", "job_events")


def _retype(old, new, sequence_type: str) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table in TABLES:
        op.alter_column(table, "id", type_=new, existing_type=old, existing_nullable=False)
        op.execute(f"ALTER SEQUENCE {table}_id_seq AS {sequence_type}")


def upgrade() -> None:
    _retype(sa.Integer(), sa.BigInteger(), "bigint")


def downgrade() -> None:
    _retype(sa.BigInteger(), sa.Integer(), "integer")
