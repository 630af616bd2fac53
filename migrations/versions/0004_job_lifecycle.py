"""Job lifecycle: each job's history of status changes, and claims with heartbeats on background
prediction runs (so that a run whose process stopped is recovered like a job).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "job_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.String(40), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("at", TS, nullable=False),
        sa.Column("from_status", sa.String(16), nullable=True),
        sa.Column("to_status", sa.String(16), nullable=False),
        sa.Column("actor", sa.String(255), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])
    with op.batch_alter_table("prediction_runs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("worker", sa.String(255), nullable=True))
        batch.add_column(sa.Column("started_at", TS, nullable=True))
        batch.add_column(sa.Column("heartbeat_at", TS, nullable=True))
    op.create_index("ix_prediction_runs_status", "prediction_runs", ["status"])


def downgrade() -> None:
    op.drop_index("ix_prediction_runs_status", table_name="prediction_runs")
    with op.batch_alter_table("prediction_runs") as batch:
        for column in ("heartbeat_at", "started_at", "worker", "attempt"):
            batch.drop_column(column)
    op.drop_index("ix_job_events_job_id_id", table_name="job_events")
    op.drop_table("job_events")
