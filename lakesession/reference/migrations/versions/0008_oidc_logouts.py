"""ls_oidc_logouts: sign-in sessions an external issuer ended by back-channel logout (every replica refuses them).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if sa.inspect(op.get_bind()).has_table("ls_oidc_logouts"):  # made by create_all before this revision
        return
    op.create_table(
        "ls_oidc_logouts",
        sa.Column("jti", sa.String(255), primary_key=True),
        sa.Column("iss", sa.String(1000), nullable=False),
        sa.Column("sid", sa.String(255), nullable=True),
        sa.Column("sub", sa.String(255), nullable=True),
        sa.Column("logged_out_at", sa.Float, nullable=False),
    )
    op.create_index("ix_ls_oidc_logouts_sid", "ls_oidc_logouts", ["sid"])
    op.create_index("ix_ls_oidc_logouts_sub", "ls_oidc_logouts", ["sub"])


def downgrade() -> None:
    op.drop_table("ls_oidc_logouts")
