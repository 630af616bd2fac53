"""Operations: the queue schema's version label on databases migrated before it was pinned; a
job's checkpoint (when and at which iteration its iterate was last stored, the iteration an
attempt resumed from) and whether a cancel keeps the current iterate as a model.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

SCHEMA_LABEL = "margin: procrastinate schema 03.04.00_50"


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "DO $$ BEGIN IF to_regclass('procrastinate_jobs') IS NOT NULL AND"
            " obj_description(to_regclass('procrastinate_jobs'), 'pg_class') IS NULL THEN"
            f" COMMENT ON TABLE procrastinate_jobs IS '{SCHEMA_LABEL}'; END IF; END $$"
        )
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("checkpoint_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("checkpoint_iteration", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("resumed_from", sa.Integer(), nullable=True))
        batch.add_column(
            sa.Column("keep_model", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("keep_model")
        batch.drop_column("resumed_from")
        batch.drop_column("checkpoint_iteration")
        batch.drop_column("checkpoint_at")
