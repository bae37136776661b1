"""Baseline: the coordinator's schema when migrations began.

On an empty database it creates every table (those of onboarding too: ``invitations``,
``memberships``, ``admin_events``). A database written before migrations is brought
to the same schema, as the coordinator used to at start-up: missing tables are created, a
``tasks`` table that still holds replies has them moved into ``replies``, and the nullable
columns added later (``participants.identity_key``, ``jobs.owner``) are added.

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


def _participants() -> None:
    op.create_table(
        "participants",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("allowed_algorithms", sa.JSON(), nullable=False),
        sa.Column("agent_version", sa.String(64), nullable=False),
        sa.Column("enrolled_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("identity_key", sa.String(64), nullable=True),
    )


def _jobs() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("algorithm", sa.String(32), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("n_features", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("progress", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
    )
    op.create_index("ix_jobs_state", "jobs", ["state"])


def _tasks() -> None:
    op.create_table(
        "tasks",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("participant", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("spec", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def _replies() -> None:
    op.create_table(
        "replies",
        sa.Column("job_id", sa.String(64), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("participant", sa.String(64), primary_key=True),
        sa.Column("task_id", sa.Integer(), primary_key=True),
        sa.Column("reply", sa.Text(), nullable=False),
        sa.Column("answered_at", sa.DateTime(timezone=True), nullable=False),
    )


def _blobs() -> None:
    op.create_table(
        "blobs",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("data", sa.LargeBinary(), nullable=False),
    )


def _audit_heads() -> None:
    op.create_table(
        "audit_heads",
        sa.Column("participant", sa.String(64), primary_key=True),
        sa.Column("seq", sa.Integer(), primary_key=True),
        sa.Column("line_sha256", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(96), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )


def _invitations() -> None:
    op.create_table(
        "invitations",
        sa.Column("invite_sha256", sa.String(64), primary_key=True),
        sa.Column("participant_id", sa.String(64), nullable=False),
        sa.Column("created_by", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_invitations_participant_id", "invitations", ["participant_id"])


def _memberships() -> None:
    op.create_table(
        "memberships",
        sa.Column("participant_id", sa.String(64), primary_key=True),
        sa.Column("token_sha256", sa.String(64), nullable=True),
        sa.Column("identity_key", sa.String(64), nullable=True),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
    )


def _admin_events() -> None:
    op.create_table(
        "admin_events",
        sa.Column("seq", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(80), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("participant_id", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
    )


_TABLES: dict[str, Callable[[], None]] = {  # in foreign-key order
    "participants": _participants,
    "jobs": _jobs,
    "tasks": _tasks,
    "replies": _replies,
    "blobs": _blobs,
    "audit_heads": _audit_heads,
    "invitations": _invitations,
    "memberships": _memberships,
    "admin_events": _admin_events,
}

_MOVE_REPLIES = (
    "INSERT INTO tasks (job_id, participant, task_id, kind, spec, created_at) "
    "SELECT job_id, participant, task_id, kind, spec, created_at FROM tasks_with_replies",
    "INSERT INTO replies (job_id, participant, task_id, reply, answered_at) "
    "SELECT job_id, participant, task_id, reply, COALESCE(answered_at, created_at) "
    "FROM tasks_with_replies WHERE reply IS NOT NULL",
)


def _columns(table: str) -> set[str]:
    return {c["name"] for c in sa.inspect(op.get_bind()).get_columns(table)}


def upgrade() -> None:
    existing = set(sa.inspect(op.get_bind()).get_table_names())
    replies_in_tasks = "tasks" in existing and "reply" in _columns("tasks")
    if replies_in_tasks:
        op.rename_table("tasks", "tasks_with_replies")
        existing.discard("tasks")
    for name, create in _TABLES.items():
        if name not in existing:
            create()
    if replies_in_tasks:
        for statement in _MOVE_REPLIES:
            op.execute(statement)
        op.drop_table("tasks_with_replies")
    if "identity_key" not in _columns("participants"):
        op.add_column("participants", sa.Column("identity_key", sa.String(64), nullable=True))
    if "owner" not in _columns("jobs"):
        op.add_column("jobs", sa.Column("owner", sa.String(64), nullable=True))


def downgrade() -> None:
    for name in reversed(list(_TABLES)):
        op.drop_table(name)
