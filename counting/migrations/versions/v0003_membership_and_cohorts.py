"""Membership requests: a credential the coordinator asks for waits for the counting
operator's approval (``fedclust counter members approve``) before it is accepted. Released
cohorts: every distinct cohort whose statistic the coordinator may have learned (totals'
rosters, decrypted Paillier rounds' contributors, announced masked sums' cohorts), which the
differencing guard reads alone; filled here from the totals and rounds released before.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

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
    released = op.create_table(
        "released_cohorts",
        sa.Column("cohort_sha256", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=False),
    )
    connection = op.get_bind()
    groups: dict[tuple[str, int], set[str]] = {}
    for job, participant in connection.execute(sa.text(
        "SELECT r.job_id, r.participant_id FROM roster_entries r "
        "JOIN released_rosters d ON d.job_id = r.job_id"
    )):
        groups.setdefault((job, -1), set()).add(participant)
    for job, round_no, participant in connection.execute(sa.text(
        "SELECT c.job_id, c.round, c.participant_id FROM paillier_contributions c "
        "JOIN paillier_closed_rounds d ON d.job_id = c.job_id AND d.round = c.round"
    )):
        groups.setdefault((job, round_no), set()).add(participant)
    now = datetime.now(UTC)
    rows = {
        (hashlib.sha256("\n".join(sorted(group)).encode()).hexdigest(), p)
        for group in groups.values() for p in group
    }
    if rows:
        op.bulk_insert(released, [
            {"cohort_sha256": key, "participant_id": p, "released_at": now}
            for key, p in sorted(rows)
        ])


def downgrade() -> None:
    op.drop_table("released_cohorts")
    op.drop_table("membership_requests")
