"""The SHA-256 of each decrypted Paillier request, so the very same request can be answered
again (a coordinator resumed after a crash asks once more) while any other is refused.

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
    with op.batch_alter_table("paillier_closed_rounds") as table:
        table.add_column(sa.Column("request_sha256", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("paillier_closed_rounds") as table:
        table.drop_column("request_sha256")
