"""prediction_runs.probabilities: a background run asked for the calibrated class probabilities
(its CSV then has a column per class); runs made before it did not.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("prediction_runs") as batch:
        batch.add_column(
            sa.Column("probabilities", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("prediction_runs") as batch:
        batch.drop_column("probabilities")
