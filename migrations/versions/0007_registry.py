"""Formats, lineage and the model registry: a dataset's format and column names, a model's
column names and lineage, and registered model names with numbered versions and aliases.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def _now() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("format", sa.String(16), nullable=True))
        batch.add_column(sa.Column("feature_names", sa.JSON(), nullable=True))
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("feature_names", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("lineage", sa.JSON(), nullable=True))
    op.create_table(
        "registered_models",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("tenant", sa.String(64), server_default="local", nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        sa.Column("latest_version", sa.Integer(), nullable=False),
        _now(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ux_registered_models_tenant_name", "registered_models", ["tenant", "name"], unique=True
    )
    op.create_table(
        "model_versions",
        sa.Column(
            "registered_model_id",
            sa.String(40),
            sa.ForeignKey("registered_models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("version", sa.Integer(), primary_key=True),
        sa.Column("tenant", sa.String(64), server_default="local", nullable=False),
        sa.Column(
            "model_id", sa.String(40), sa.ForeignKey("models.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("tags", sa.JSON(), nullable=False),
        _now(),
    )
    op.create_index("ix_model_versions_model_id", "model_versions", ["model_id"])
    op.create_table(
        "model_aliases",
        sa.Column(
            "registered_model_id",
            sa.String(40),
            sa.ForeignKey("registered_models.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("alias", sa.String(64), primary_key=True),
        sa.Column("tenant", sa.String(64), server_default="local", nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("model_aliases")
    op.drop_index("ix_model_versions_model_id", table_name="model_versions")
    op.drop_table("model_versions")
    op.drop_index("ux_registered_models_tenant_name", table_name="registered_models")
    op.drop_table("registered_models")
    with op.batch_alter_table("models") as batch:
        batch.drop_column("lineage")
        batch.drop_column("feature_names")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("feature_names")
        batch.drop_column("format")
