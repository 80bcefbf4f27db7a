"""Versioned schema of the catalog database (Alembic), applied programmatically at start.

``upgrade(engine)`` brings any database to the newest revision: an empty one gets the whole
schema; one created by ``metadata.create_all`` before migrations existed (no version table)
is adopted by the baseline, which creates only what is missing, so no data is touched.
Concurrent starts against one PostgreSQL database serialise on an advisory lock.

A change to a table definition (``store.py``, ``idp/_state.py``) needs a new revision in
``versions/`` (``alembic -c lakesession/reference/migrations/alembic.ini revision -m "…"``, or copy
the baseline's shape); ``tests/test_migrations.py`` fails while models and migrations differ.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text

HERE = Path(__file__).resolve().parent
VERSION_TABLE = "ls_alembic_version"
_PG_LOCK_KEY = 0x6C616B65  # "lake": one advisory lock id for schema changes


class MigrationError(RuntimeError):
    """The database's schema cannot be brought to this version of lakesession."""


def config(connection: Connection | None = None, **attributes: Any) -> Any:
    """An Alembic ``Config`` for this package (no ini file needed); ``connection`` is used as is."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.set_main_option("version_table", VERSION_TABLE)
    cfg.attributes["connection"] = connection
    cfg.attributes.update(attributes)
    return cfg


def head() -> str:
    from alembic.script import ScriptDirectory

    return str(ScriptDirectory.from_config(config()).get_current_head())


def current(engine: Engine) -> str | None:
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision`` in one transaction (PostgreSQL: DDL is transactional, so all or nothing)."""
    from alembic import command
    from alembic.util import CommandError

    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        try:
            command.upgrade(config(conn), revision)
        except CommandError as e:
            raise MigrationError(
                f"cannot migrate the catalog database: {e} (was it created by a newer lakesession? upgrade lakesession)"
            ) from None
