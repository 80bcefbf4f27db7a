"""ls_vended_credentials: the vending cache shared by serve workers and replicas (sealed credentials).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("ls_vended_credentials"):
        return  # made by create_all before this revision existed
    op.create_table(
        "ls_vended_credentials",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("owner", sa.String(64), nullable=False),
        sa.Column("payload", sa.LargeBinary, nullable=True),
        sa.Column("issued_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("claimed_until", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("ls_vended_credentials")
