"""A hot read on a DBAPI connection kept for it alone: no pool checkout, no per-call statement building.

Why: the catalog's per-request reads (the grants version row, a table's metadata location) are one
primary-key lookup each, and SQLAlchemy's checkout, pre-ping, statement construction, cache-key walk and
result wrapping cost several times the lookup (a tenth of a loadTable's CPU). The statement is still
SQLAlchemy's, compiled once for the engine's dialect (its placeholders, its quoting); only the execution is
the driver's. Reads run in autocommit (each sees the latest commit), one at a time per ``KeptRead``.
A connection that fails is dropped and the read retried once on a new one; then the error is raised as
SQLAlchemy's own ``DBAPIError`` (an outage stays a 503). An in-memory SQLite database (one shared
connection, ``StaticPool``) is read through the engine, as everyone else reads it.
"""

from __future__ import annotations

import threading
from typing import Any

from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import StaticPool
from sqlalchemy.sql import Executable


class KeptRead:
    """``rows(**values)``: the rows of one SELECT for the bound ``values``, on its own kept connection."""

    def __init__(self, engine: Engine, statement: Executable):
        self.engine = engine
        self.statement = statement
        compiled = statement.compile(dialect=engine.dialect)  # type: ignore[attr-defined]
        self.sql = str(compiled)
        self._order = tuple(compiled.positiontup or ()) if compiled.positional else None
        self._literals = dict(compiled.params)  # the statement's own values (``id == 1``); ``rows`` adds the rest
        self._lock = threading.Lock()
        self._conn: Any = None
        self._dedicated = not isinstance(engine.pool, StaticPool)
        # dispose() closes only the pool's idle connections: close the kept one with them (a catalog's stop)
        event.listen(engine, "engine_disposed", lambda _engine: self.close())

    def rows(self, **values: Any) -> list[tuple[Any, ...]]:
        if not self._dedicated:
            with self.engine.connect() as conn:
                return [tuple(r) for r in conn.execute(self.statement, values).all()]
        values = {**self._literals, **values}
        params: Any = tuple(values[k] for k in self._order) if self._order is not None else values
        with self._lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = self._connect()
                    cur = self._conn.cursor()
                    try:
                        cur.execute(self.sql, params)
                        return [tuple(r) for r in cur.fetchall()]
                    finally:
                        cur.close()
                except Exception as e:
                    self._drop()
                    if attempt == 2:
                        dbapi_error = self.engine.dialect.loaded_dbapi.Error
                        if isinstance(e, dbapi_error):
                            raise sa_exc.DBAPIError.instance(self.sql, params, e, dbapi_error) from e
                        raise
        raise AssertionError("unreachable")

    def first(self, **values: Any) -> tuple[Any, ...] | None:
        found = self.rows(**values)
        return found[0] if found else None

    def _connect(self) -> Any:
        """A pooled connection kept out of the pool, reading in autocommit (every read sees the latest commit)."""
        raw = self.engine.raw_connection()
        if self.engine.dialect.name != "sqlite":  # pysqlite starts no transaction for a SELECT
            raw.rollback()
            raw.driver_connection.autocommit = True  # type: ignore[union-attr]
        return raw

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # closed, never returned to the pool
            except Exception:
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()
