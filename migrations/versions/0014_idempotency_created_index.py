"""An index on idempotency_keys.created_at: the sweep that forgets records past
IDEMPOTENCY_TTL_HOURS deletes by age alone, and without it read the whole table each time.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27
"""

from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_idempotency_keys_created_at", "idempotency_keys", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_keys_created_at", table_name="idempotency_keys")
