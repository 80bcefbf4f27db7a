"""Alembic environment: always run on the connection handed over by ``migrations.upgrade``."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from lakesession.reference.migrations import VERSION_TABLE

cfg = context.config
connection = cfg.attributes.get("connection")
target_metadata = cfg.attributes.get("target_metadata")  # the models, for autogenerate and drift checks only


def _run(conn: object) -> None:
    context.configure(
        connection=conn,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        render_as_batch=conn.dialect.name == "sqlite",  # type: ignore[attr-defined]
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    context.configure(
        url=cfg.get_main_option("sqlalchemy.url"), target_metadata=target_metadata, version_table=VERSION_TABLE
    )
    with context.begin_transaction():
        context.run_migrations()
elif connection is not None:
    _run(connection)
else:  # the alembic command line: sqlalchemy.url from alembic.ini or -x url=...
    url = context.get_x_argument(as_dictionary=True).get("url") or cfg.get_main_option("sqlalchemy.url")
    with create_engine(str(url)).begin() as conn:
        _run(conn)
