"""Versioned schema of the catalog database (Alembic), applied programmatically at start.

``upgrade(engine)`` brings any database to the newest revision: an empty one gets the whole
schema; one created by ``metadata.create_all`` before migrations existed (no version table)
is adopted by the baseline, which creates only what is missing, so no data is touched.
Concurrent starts against one PostgreSQL database serialise on an advisory lock.

A change to a table definition (``store.py``, ``idp/_state.py``) needs a new revision in
``versions/`` (``alembic -c lakesession/reference/migrations/alembic.ini revision -m "…"``, or copy
the baseline's shape) and set ``HEAD`` to it; ``tests/catalog/test_migrations.py`` fails while models and
migrations differ, or while ``HEAD`` is not Alembic's head.

A database already at ``HEAD`` (every start but the first) is recognised by one ``SELECT`` on the
version table, without importing Alembic (~0.2 CPU-s of a start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, text
from sqlalchemy.exc import DBAPIError

HERE = Path(__file__).resolve().parent
VERSION_TABLE = "ls_alembic_version"
HEAD = "0008"  # the newest revision in versions/ (tests check it equals Alembic's ScriptDirectory head)
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


def at_head(engine: Engine) -> bool:
    """The database's version table holds exactly ``HEAD`` (no version table, or another revision: False)."""
    try:
        with engine.connect() as conn:
            rows = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).all()
    except DBAPIError:  # no version table yet (an empty database, or one made by create_all before migrations)
        return False
    return [row[0] for row in rows] == [HEAD]


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision`` in one transaction (PostgreSQL: DDL is transactional, so all or nothing).

    To ``head`` from ``HEAD`` there is nothing to do: Alembic is not even imported.
    """
    if revision == "head" and at_head(engine):
        return
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
