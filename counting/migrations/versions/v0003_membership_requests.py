"""Membership requests: a credential the coordinator asks for waits for the counting
operator's approval (``fedclust counter members approve``) before it is accepted; and the
cohorts of masked sums the participants announce (the differencing guard counts them as
released).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "membership_requests",
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "announced_cohorts",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("cohort_sha256", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("announced_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("announced_cohorts")
    op.drop_table("membership_requests")
