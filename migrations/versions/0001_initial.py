"""Initial schema: datasets, jobs and their progress, models, prediction runs, idempotency keys,
worker heartbeats.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("filename", sa.String(255), nullable=True),
        sa.Column("n_rows", sa.Integer(), nullable=False),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("nnz", sa.BigInteger(), nullable=False),
        sa.Column("zero_based", sa.Boolean(), nullable=False),
        sa.Column("has_qid", sa.Boolean(), nullable=False),
        sa.Column("label_kind", sa.String(16), nullable=False),
        sa.Column("classes", sa.JSON(), nullable=True),
        sa.Column("target", sa.JSON(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "dataset_id",
            sa.String(40),
            sa.ForeignKey("datasets.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "validation_dataset_id",
            sa.String(40),
            sa.ForeignKey("datasets.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("estimator", sa.String(40), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("first_gap", sa.Float(), nullable=True),
        sa.Column("percent", sa.Float(), nullable=True),
        sa.Column("eta_s", sa.Float(), nullable=True),
        sa.Column("converged", sa.Boolean(), nullable=True),
        sa.Column("stop_reason", sa.String(16), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_jobs_dataset_id", "jobs", ["dataset_id"])
    op.create_index("ix_jobs_validation_dataset_id", "jobs", ["validation_dataset_id"])
    op.create_index("ix_jobs_status", "jobs", ["status"])
    op.create_table(
        "job_progress",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("elapsed_s", sa.Float(), nullable=False),
        sa.Column("gap", sa.Float(), nullable=True),
        sa.Column("max_pg", sa.Float(), nullable=True),
        sa.Column("min_pg", sa.Float(), nullable=True),
        sa.Column("active", sa.Integer(), nullable=True),
        sa.Column("primal", sa.Float(), nullable=True),
        sa.Column("dual", sa.Float(), nullable=True),
        sa.Column("lower_bound", sa.Float(), nullable=True),
        sa.Column("upper_bound", sa.Float(), nullable=True),
    )
    op.create_index("ix_job_progress_job_id_id", "job_progress", ["job_id", "id"])
    op.create_table(
        "models",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "job_id",
            sa.String(40),
            sa.ForeignKey("jobs.id", ondelete="SET NULL"),
            nullable=True,
            unique=True,
        ),
        sa.Column(
            "dataset_id",
            sa.String(40),
            sa.ForeignKey("datasets.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("estimator", sa.String(40), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("classes", sa.JSON(), nullable=True),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("zero_based", sa.Boolean(), nullable=False),
        sa.Column("weights", sa.LargeBinary(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("gap", sa.Float(), nullable=True),
        sa.Column("n_iter", sa.Integer(), nullable=False),
        sa.Column("train_time_s", sa.Float(), nullable=False),
        sa.Column("train_accuracy", sa.Float(), nullable=True),
        sa.Column("validation_accuracy", sa.Float(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "prediction_runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column(
            "model_id",
            sa.String(40),
            sa.ForeignKey("models.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column(
            "dataset_id",
            sa.String(40),
            sa.ForeignKey("datasets.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("n_rows", sa.Integer(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
    )
    op.create_index("ix_prediction_runs_model_id", "prediction_runs", ["model_id"])
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(32), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("resource_id", sa.String(40), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "workers",
        sa.Column("id", sa.String(255), primary_key=True),
        sa.Column("backend", sa.String(16), nullable=False),
        sa.Column("job_id", sa.String(40), nullable=True),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("heartbeat_at", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("workers")
    op.drop_table("idempotency_keys")
    op.drop_index("ix_prediction_runs_model_id", table_name="prediction_runs")
    op.drop_table("prediction_runs")
    op.drop_table("models")
    op.drop_index("ix_job_progress_job_id_id", table_name="job_progress")
    op.drop_table("job_progress")
    op.drop_index("ix_jobs_status", table_name="jobs")
    op.drop_index("ix_jobs_validation_dataset_id", table_name="jobs")
    op.drop_index("ix_jobs_dataset_id", table_name="jobs")
    op.drop_table("jobs")
    op.drop_table("datasets")
