"""A tenant's own bound on its active (queued or running) prediction runs (null: the service-wide
QUOTA_ACTIVE_PREDICTION_RUNS).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_active_prediction_runs", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("max_active_prediction_runs")
