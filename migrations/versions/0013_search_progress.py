"""Where on its path a search job's progress records are: stage, fold, C index, C and the
solves done of the whole path, stored on every record (the job kept them only on its latest).

Earlier rows, and the records of a single solve, have these columns empty.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

COLUMNS = (
    ("stage", sa.String(8)),
    ("fold", sa.Integer()),
    ("folds_total", sa.Integer()),
    ("c_index", sa.Integer()),
    ("cs_total", sa.Integer()),
    ("c", sa.Float()),
    ("solves_done", sa.Integer()),
    ("solves_total", sa.Integer()),
)


def upgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        for name, type_ in COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_progress") as batch:
        for name, _ in reversed(COLUMNS):
            batch.drop_column(name)
