"""Baseline: the counting service's schema when migrations began.

On an empty database it creates every table; a database written before migrations gets the
tables it lacks (the Paillier key holder's, the release record and onboarding's
``memberships`` came later), as the service used to at start-up.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _roster_entries() -> None:
    op.create_table(
        "roster_entries",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def _counts() -> None:
    op.create_table(
        "counts",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["job_id", "participant_id"],
            ["roster_entries.job_id", "roster_entries.participant_id"],
        ),
    )


def _released_rosters() -> None:
    op.create_table(
        "released_rosters",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("job_id", sa.String(64), nullable=False, unique=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=False),
    )


def _paillier_keys() -> None:
    op.create_table(
        "paillier_keys",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("private_key", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def _paillier_contributions() -> None:
    op.create_table(
        "paillier_contributions",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("round", sa.Integer(), primary_key=True),
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("announced_at", sa.DateTime(timezone=True), nullable=False),
    )


def _paillier_closed_rounds() -> None:
    op.create_table(
        "paillier_closed_rounds",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("round", sa.Integer(), primary_key=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=False),
    )


def _memberships() -> None:
    op.create_table(
        "memberships",
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=True),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )


_TABLES: dict[str, Callable[[], None]] = {  # in foreign-key order
    "roster_entries": _roster_entries,
    "counts": _counts,
    "released_rosters": _released_rosters,
    "paillier_keys": _paillier_keys,
    "paillier_contributions": _paillier_contributions,
    "paillier_closed_rounds": _paillier_closed_rounds,
    "memberships": _memberships,
}


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    for name, create in _TABLES.items():
        if name not in existing:
            create()


def downgrade() -> None:
    for name in reversed(list(_TABLES)):
        op.drop_table(name)
