"""The shared version of who-may-do-what: one database row every replica reads once per request.

Why: re-reading a principal's grants (a join) on every request made each request pay for it, and under
many clients that was a good part of a cheap request's cost. Every change to principals, roles,
memberships or grants moves the row ``ls_grants_version`` in the same transaction; a replica keeps what
it read (grants, principals) tagged with the version it saw first, and reuses it while the row is
unchanged. One primary-key read per request (shared by the request's checks, and by concurrent requests
that began before the read did) keeps a revocation anywhere effective from the next request on, on every
replica, with no notification channel that could be lost.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import Connection, Engine, event, select, update
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import StaticPool

from . import store

_T = store.grants_version
_SELECT = select(_T.c.version).where(_T.c.id == store.GRANTS_VERSION_ID)
_SQL = f"SELECT version FROM {_T.name} WHERE id = {store.GRANTS_VERSION_ID}"


class _Read:
    """One read of the row, which concurrent requests begun before it may share."""

    def __init__(self, started: float):
        self.started = started
        self.done = threading.Event()
        self.value: object = None
        self.failed = False


class GrantsVersion:
    """Reads (with ``fresh_since``) and moves (``bump``) the shared version row."""

    def __init__(self, engine: Engine, reuse_seconds: float = 2.0):
        self.engine = engine
        self.reuse_seconds = reuse_seconds  # outside a request (no ``fresh_since``): a read this recent will do
        self._lock = threading.Lock()
        self._known: tuple[float, object] | None = None  # (monotonic start of the newest finished read, value)
        self._flight: _Read | None = None
        self._changed_at = float("-inf")  # the last local change: reads begun before it are not kept
        self._own_lock = threading.Lock()
        self._conn: Any = None  # the connection reads use (``_select``)
        self._dedicated = not isinstance(engine.pool, StaticPool)
        # dispose() closes only the pool's idle connections: close the kept one with them (a catalog's stop)
        event.listen(engine, "engine_disposed", lambda _engine: self.close())

    def current(self, fresh_since: float | None = None) -> object:
        """The version, from a read begun after ``fresh_since`` (a request's start), or a recent one without it.

        A missing row (a database edited by hand) reads as a value never seen before: nothing is reused."""
        with self._lock:
            known = self._known
            if known is not None and (
                known[0] >= fresh_since if fresh_since is not None else time.monotonic() - known[0] < self.reuse_seconds
            ):
                return known[1]
            flight = self._flight
            if flight is None or fresh_since is None or flight.started < fresh_since:
                flight, mine = _Read(time.monotonic()), True
                self._flight = flight
            else:
                mine = False
        if not mine:
            flight.done.wait(30)
            if flight.done.is_set() and not flight.failed:
                return flight.value
            return self._read_now()
        try:
            flight.value = self._read(flight.started)
        except BaseException:
            flight.failed = True
            raise
        finally:
            flight.done.set()
            with self._lock:
                if self._flight is flight:
                    self._flight = None
        return flight.value

    def _read_now(self) -> object:
        return self._read(time.monotonic())

    def _read(self, started: float) -> object:
        value = self._select()
        result: object = value if value is not None else object()
        with self._lock:
            if started > self._changed_at and (self._known is None or started >= self._known[0]):
                self._known = (started, result)
        return result

    def _select(self) -> object:
        """The row's value, on a connection kept for this one statement (a pool checkout, PostgreSQL's
        pre-ping and SQLAlchemy's statement handling cost more than the read itself); a connection that
        fails is dropped and the read retried once on a new one, then the error is raised: a request is
        never answered from cached grants without a successful read."""
        if not self._dedicated:  # an in-memory SQLite database: one shared connection, use it as everyone does
            with self.engine.connect() as conn:
                return conn.execute(_SELECT).scalar()
        with self._own_lock:
            for attempt in (1, 2):
                try:
                    if self._conn is None:
                        self._conn = self._connect()
                    cur = self._conn.cursor()
                    try:
                        cur.execute(_SQL)
                        row = cur.fetchone()
                    finally:
                        cur.close()
                    return row[0] if row else None
                except Exception as e:
                    self._drop()
                    if attempt == 2:
                        dbapi_error = self.engine.dialect.loaded_dbapi.Error
                        if isinstance(e, dbapi_error):  # as SQLAlchemy's own: an outage is then a 503, not a 500
                            raise sa_exc.DBAPIError.instance(_SQL, None, e, dbapi_error) from e
                        raise
        raise AssertionError("unreachable")

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
        with self._own_lock:
            self._drop()

    def bump(self, conn: Connection) -> None:
        """Move the version inside ``conn``'s transaction (the change and the move commit together)."""
        conn.execute(update(_T).where(_T.c.id == store.GRANTS_VERSION_ID).values(version=_T.c.version + 1))

    def forget(self) -> None:
        """This process just changed something: no read begun before now may be reused."""
        with self._lock:
            self._known = None
            self._changed_at = time.monotonic()
