"""Model selection: a model's probability calibration and the cross-validation table of the
search that chose its C.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("calibration", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("selection", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("selection")
        batch.drop_column("calibration")
