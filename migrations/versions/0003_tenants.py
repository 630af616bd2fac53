"""Tenants and API keys: the api_keys and tenants tables, and a tenant on every owned resource.

Rows that existed before this step belong to the tenant 'local' (the tenant of AUTH_MODE=off).
Idempotency keys are qualified by tenant inside their `scope` column, which is widened for it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
OWNED = ("datasets", "jobs", "models", "prediction_runs")


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("max_storage_bytes", sa.BigInteger(), nullable=True),
        sa.Column("max_active_jobs", sa.Integer(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("revoked_at", TS, nullable=True),
    )
    op.create_index("ix_api_keys_key_hash", "api_keys", ["key_hash"], unique=True)
    op.create_index("ix_api_keys_tenant", "api_keys", ["tenant"])
    for table in OWNED:
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("tenant", sa.String(64), nullable=False, server_default="local")
            )
        op.create_index(f"ix_{table}_tenant", table, ["tenant"])
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.alter_column("scope", type_=sa.String(100), existing_nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("idempotency_keys") as batch:
        batch.alter_column("scope", type_=sa.String(32), existing_nullable=False)
    for table in reversed(OWNED):
        op.drop_index(f"ix_{table}_tenant", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("tenant")
    op.drop_index("ix_api_keys_tenant", table_name="api_keys")
    op.drop_index("ix_api_keys_key_hash", table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("tenants")
