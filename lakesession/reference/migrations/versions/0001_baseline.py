"""Baseline: the schema as ``metadata.create_all`` made it before migrations existed.

pyiceberg's SqlCatalog tables (v1 layout, with ``iceberg_type``), lakesession's own tables
(``store.py``) and the embedded issuer's refresh tokens (``idp/_state.py``). Frozen here: later
changes go in new revisions. Tables that already exist are left alone, so a database created
by ``create_all`` is adopted with its data as it is.

Revision ID: 0001
Revises:
Create Date: 2026-11-26
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _tables() -> list[tuple[str, list[Any], list[tuple[str, list[str]]]]]:
    """(name, columns and constraints, indexes) of every baseline table."""
    return [
        (
            "iceberg_tables",
            [
                sa.Column("catalog_name", sa.String(255), primary_key=True),
                sa.Column("table_namespace", sa.String(255), primary_key=True),
                sa.Column("table_name", sa.String(255), primary_key=True),
                sa.Column("metadata_location", sa.String(1000), nullable=True),
                sa.Column("previous_metadata_location", sa.String(1000), nullable=True),
                sa.Column("iceberg_type", sa.String(5), nullable=True),
            ],
            [],
        ),
        (
            "iceberg_namespace_properties",
            [
                sa.Column("catalog_name", sa.String(255), primary_key=True),
                sa.Column("namespace", sa.String(255), primary_key=True),
                sa.Column("property_key", sa.String(255), primary_key=True),
                sa.Column("property_value", sa.String(1000), nullable=False),
            ],
            [],
        ),
        (
            "ls_principals",
            [
                sa.Column("name", sa.String(255), primary_key=True),
                sa.Column("type", sa.String(16), nullable=False),
                sa.Column("client_id", sa.String(255), unique=True, nullable=True),
                sa.Column("secret_hash", sa.String(512), nullable=True),
                sa.Column("created_at", sa.Float, nullable=False),
            ],
            [],
        ),
        (
            "ls_roles",
            [sa.Column("name", sa.String(255), primary_key=True), sa.Column("created_at", sa.Float, nullable=False)],
            [],
        ),
        (
            "ls_role_members",
            [
                sa.Column("role", sa.String(255), primary_key=True),
                sa.Column("principal", sa.String(255), primary_key=True),
            ],
            [],
        ),
        (
            "ls_grants",
            [
                sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("role", sa.String(255), nullable=False),
                sa.Column("privilege", sa.String(64), nullable=False),
                sa.Column("securable", sa.String(1000), nullable=False),
                sa.Column("created_at", sa.Float, nullable=False),
                sa.UniqueConstraint("role", "privilege", "securable", name="uq_ls_grant"),
            ],
            [],
        ),
        (
            "ls_views",
            [
                sa.Column("catalog_name", sa.String(255), primary_key=True),
                sa.Column("namespace", sa.String(255), primary_key=True),
                sa.Column("name", sa.String(255), primary_key=True),
                sa.Column("metadata_location", sa.String(1000), nullable=False),
                sa.Column("metadata_json", sa.Text, nullable=False),
            ],
            [],
        ),
        (
            "ls_table_locations",
            [
                sa.Column("metadata_location", sa.String(1000), primary_key=True),
                sa.Column("location", sa.String(1000), nullable=False),
            ],
            [],
        ),
        (
            "ls_audit",
            [
                sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
                sa.Column("ts", sa.Float, nullable=False),
                sa.Column("request_id", sa.String(64), nullable=False),
                sa.Column("principal", sa.String(255), nullable=False),
                sa.Column("action", sa.String(64), nullable=False),
                sa.Column("securable", sa.String(1000), nullable=False),
                sa.Column("decision", sa.String(16), nullable=False),
                sa.Column("detail", sa.Text, nullable=True),
            ],
            [("ix_ls_audit_ts", ["ts"]), ("ix_ls_audit_principal", ["principal"])],
        ),
        (
            "ls_idp_refresh_tokens",
            [
                sa.Column("token_hash", sa.String(64), primary_key=True),
                sa.Column("family", sa.String(32), nullable=False),
                sa.Column("principal", sa.String(255), nullable=False),
                sa.Column("client_id", sa.String(255), nullable=False),
                sa.Column("scope", sa.Text, nullable=True),
                sa.Column("issued_at", sa.Float, nullable=False),
                sa.Column("expires_at", sa.Float, nullable=False),
                sa.Column("used_at", sa.Float, nullable=True),
                sa.Column("revoked_at", sa.Float, nullable=True),
            ],
            [("ix_ls_idp_refresh_tokens_family", ["family"])],
        ),
    ]


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    for name, items, indexes in _tables():
        if inspector.has_table(name):
            continue  # created by create_all before migrations existed: adopt it as it is
        op.create_table(name, *items)
        for index_name, columns in indexes:
            op.create_index(index_name, name, columns)


def downgrade() -> None:
    for name, _, _ in reversed(_tables()):
        op.drop_table(name)
