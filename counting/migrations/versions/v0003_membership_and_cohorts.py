"""Membership requests: a credential the coordinator asks for waits for the counting
operator's approval (``fedclust counter members approve``) before it is accepted. Released
cohorts: every distinct cohort whose statistic the coordinator may have learned (totals'
rosters, decrypted Paillier rounds' contributors, announced masked sums' cohorts), which the
differencing guard reads alone; filled here from the totals and rounds released before.
Admitted rosters: the roster each count and Paillier contribution was reported under (a total
or round is released only within each of them); a count or contribution of before is taken
as reported under its job's roster (with the job's contributors). Unmasking views: the first
view (survivors, dropouts) of each masked sum, the only one the participants unmask.

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


def _name(group: set[str]) -> str:
    return hashlib.sha256("\n".join(sorted(group)).encode()).hexdigest()


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
    rows = {(_name(group), p) for group in groups.values() for p in group}
    if rows:
        op.bulk_insert(released, [
            {"cohort_sha256": key, "participant_id": p, "released_at": now}
            for key, p in sorted(rows)
        ])
    _admitted_rosters(connection, now)
    op.create_table(
        "unmask_views",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("setup", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("round", sa.BigInteger, primary_key=True, autoincrement=False),
        sa.Column("view_sha256", sa.String(64), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
    )


def _admitted_rosters(connection: sa.Connection, now: datetime) -> None:
    """The admitted_rosters table, and each count's and contribution's admitted roster: for
    those of before, their job's roster with the job's contributors."""
    admitted = op.create_table(
        "admitted_rosters",
        sa.Column("roster_sha256", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("admitted_at", sa.DateTime(timezone=True), nullable=False),
    )
    for table in ("counts", "paillier_contributions"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("admitted_sha256", sa.String(64), nullable=True))
    jobs: dict[str, set[str]] = {}
    for job, participant in connection.execute(sa.text(
        "SELECT job_id, participant_id FROM roster_entries UNION "
        "SELECT job_id, participant_id FROM paillier_contributions"
    )):
        jobs.setdefault(job, set()).add(participant)
    rows = {(_name(group), p) for group in jobs.values() for p in group}
    if rows:
        op.bulk_insert(admitted, [
            {"roster_sha256": key, "participant_id": p, "admitted_at": now}
            for key, p in sorted(rows)
        ])
    for table in ("counts", "paillier_contributions"):
        for job, group in sorted(jobs.items()):
            connection.execute(
                sa.text(f"UPDATE {table} SET admitted_sha256 = :key WHERE job_id = :job"),
                {"key": _name(group), "job": job},
            )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("admitted_sha256", existing_type=sa.String(64), nullable=False)


def downgrade() -> None:
    op.drop_table("unmask_views")
    for table in ("paillier_contributions", "counts"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("admitted_sha256")
    op.drop_table("admitted_rosters")
    op.drop_table("released_cohorts")
    op.drop_table("membership_requests")
