"""ls_locations: which table, view or namespace owns each storage prefix (the storage branch's ``store.locations``).


Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_PREFIX = sa.String(1000).with_variant(sa.String(1000, collation="C"), "postgresql")  # byte order: range scans


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("ls_locations"):
        return  # made by create_all before this revision existed
    op.create_table(
        "ls_locations",
        sa.Column("catalog_name", sa.String(255), primary_key=True),
        sa.Column("prefix", _PREFIX, primary_key=True),
        sa.Column("owner_kind", sa.String(16), nullable=False),
        sa.Column("owner_namespace", sa.String(1000), nullable=False),
        sa.Column("owner_name", sa.String(255), nullable=False),
    )
    op.create_index(
        "ix_ls_locations_owner", "ls_locations", ["catalog_name", "owner_kind", "owner_namespace", "owner_name"]
    )


def downgrade() -> None:
    op.drop_table("ls_locations")
