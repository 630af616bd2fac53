"""Explicit gap names on progress records: pg_range, max_violation and duality_gap columns.

The largest and smallest projected gradients keep their columns (max_pg, min_pg), now named
pg_max and pg_min in the records. Earlier rows have the new columns empty.

Revision ID: 0005
Revises: 0003
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

COLUMNS = ("pg_range", "max_violation", "duality_gap")


def upgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        for name in COLUMNS:
            batch.add_column(sa.Column(name, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        for name in reversed(COLUMNS):
            batch.drop_column(name)
