"""ls_idp_redirect_uris and ls_idp_auth_codes: the embedded issuer's authorization code flow (hublogin branch,
``idp/_authcode.py``; add its ``metadata`` to ``MODELS`` in tests/catalog/test_migrations.py).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    if not inspector.has_table("ls_idp_redirect_uris"):
        op.create_table(
            "ls_idp_redirect_uris",
            sa.Column("client_id", sa.String(255), primary_key=True),
            sa.Column("redirect_uri", sa.String(2048), primary_key=True),
        )
    if not inspector.has_table("ls_idp_auth_codes"):
        op.create_table(
            "ls_idp_auth_codes",
            sa.Column("code_hash", sa.String(64), primary_key=True),
            sa.Column("family", sa.String(32), nullable=False),
            sa.Column("client_id", sa.String(255), nullable=False),
            sa.Column("principal", sa.String(255), nullable=False),
            sa.Column("redirect_uri", sa.Text, nullable=True),
            sa.Column("scope", sa.Text, nullable=True),
            sa.Column("nonce", sa.Text, nullable=True),
            sa.Column("code_challenge", sa.String(128), nullable=False),
            sa.Column("code_challenge_method", sa.String(8), nullable=False),
            sa.Column("auth_time", sa.Float, nullable=False),
            sa.Column("expires_at", sa.Float, nullable=False),
            sa.Column("used_at", sa.Float, nullable=True),
        )


def downgrade() -> None:
    op.drop_table("ls_idp_auth_codes")
    op.drop_table("ls_idp_redirect_uris")
