"""Request limits: stored bytes of datasets, models and prediction runs (the storage quota counts
what is stored), a content key that finds a repeated upload within a tenant, and a per-tenant
request rate.

Models stored before this step get their size from their weights; datasets keep a NULL stored
size (the quota then counts their upload size, as before).

Revision ID: 0006
Revises: 0003
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("stored_bytes", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("content_key", sa.String(64), nullable=True))
    op.create_index(
        "ux_datasets_tenant_content_key", "datasets", ["tenant", "content_key"], unique=True
    )
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("size_bytes", sa.BigInteger(), nullable=True))
    op.execute("UPDATE models SET size_bytes = length(weights)")
    with op.batch_alter_table("prediction_runs") as batch:
        batch.add_column(sa.Column("size_bytes", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("rate_limit", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("rate_limit")
    with op.batch_alter_table("prediction_runs") as batch:
        batch.drop_column("size_bytes")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("size_bytes")
    op.drop_index("ux_datasets_tenant_content_key", table_name="datasets")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("content_key")
        batch.drop_column("stored_bytes")
