"""ls_idempotency: the stored outcome of each request that carried an ``Idempotency-Key``.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("ls_idempotency"):
        return  # made by create_all before this revision existed
    op.create_table(
        "ls_idempotency",
        sa.Column("principal", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(36), primary_key=True),
        sa.Column("request_hash", sa.String(64), nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_ls_idempotency_expires", "ls_idempotency", ["expires_at"])


def downgrade() -> None:
    op.drop_table("ls_idempotency")
