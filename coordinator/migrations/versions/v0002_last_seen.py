"""Each member's last authenticated request (``last_seen``), so the member list shows when
a participant last polled or answered across coordinator restarts. Cheap by design: the
coordinator keeps contacts in memory and writes the changed ones every 30 s.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "last_seen" in sa.inspect(op.get_bind()).get_table_names():
        return  # a database from before migrations, written with every table of its version
    op.create_table(
        "last_seen",
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("last_seen")
