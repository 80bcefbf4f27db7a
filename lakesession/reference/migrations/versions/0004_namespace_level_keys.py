"""Namespace keys: levels joined with 0x1F instead of '.', so a level may contain '.' (``nskeys``).

Until 0003 every table naming a namespace stored its levels joined with '.', and levels could
not contain '.': splitting the old keys on '.' is exactly what they meant, so each '.' becomes
the unit separator (0x1F, never inside a level). Column types do not change; the keys keep
their length and order of levels, so a child's key still starts with its parent's.

Downgrade turns 0x1F back into '.', and refuses when a level contains '.' (the old schema
cannot say it).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

SEP = "\x1f"

# (table, column naming a namespace): pyiceberg's two SqlCatalog tables, our views and storage owners
COLUMNS = [
    ("iceberg_tables", "table_namespace"),
    ("iceberg_namespace_properties", "namespace"),
    ("ls_views", "namespace"),
    ("ls_locations", "owner_namespace"),
]


def _replace(old: str, new: str) -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    for table, column in COLUMNS:
        if not inspector.has_table(table):
            continue
        t = sa.table(table, sa.column(column, sa.String))
        col = t.c[column]
        bind.execute(
            sa.update(t).where(col.contains(old, autoescape=True)).values({column: sa.func.replace(col, old, new)})
        )


def upgrade() -> None:
    _replace(".", SEP)


def downgrade() -> None:
    bind = op.get_bind()
    inspector = sa.inspect(bind)
    for table, column in COLUMNS:
        if not inspector.has_table(table):
            continue
        t = sa.table(table, sa.column(column, sa.String))
        dotted = bind.execute(sa.select(t.c[column]).where(t.c[column].contains(".", autoescape=True)).limit(1)).first()
        if dotted is not None:
            raise RuntimeError(
                f"cannot downgrade below 0004: {table}.{column} holds a namespace level containing '.' "
                f"({dotted[0].replace(SEP, '/')!r}), which revision 0003 cannot store; drop or rename it first"
            )
    _replace(SEP, ".")
