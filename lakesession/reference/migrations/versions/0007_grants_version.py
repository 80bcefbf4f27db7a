"""ls_grants_version: one row moved by every grant, role and membership change (cached grants, every replica).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if not sa.inspect(bind).has_table("ls_grants_version"):  # else made by create_all before this revision
        op.create_table(
            "ls_grants_version",
            sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
            sa.Column("version", sa.BigInteger, nullable=False),
        )
    table = sa.table("ls_grants_version", sa.column("id", sa.Integer), sa.column("version", sa.BigInteger))
    if bind.execute(sa.select(table.c.id).where(table.c.id == 1)).first() is None:
        op.bulk_insert(table, [{"id": 1, "version": 0}])


def downgrade() -> None:
    op.drop_table("ls_grants_version")
