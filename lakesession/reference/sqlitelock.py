"""One writer at a time per process on SQLite, queued in Python instead of in SQLite's busy handler.

SQLite allows one write transaction at a time. A second writer waits in SQLite's busy handler,
which polls with growing sleeps (up to 100 ms each): under 50 sessions every request's audit
insert queued that way, and a commit's p50 became seconds while the database was idle most of the
time. Here a write transaction takes a process-wide lock at its first write statement and gives it
back when it ends, so writers are served in turn the moment the previous one finishes. Other
processes on the same file (several workers) still meet in SQLite's busy handler.

A rollback must go through the dialect (``do_rollback``) to give the lock back: the idempotency commit
hook once rolled back on the raw DBAPI connection, and the next writer waited the full 30 s.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from sqlalchemy import Engine, event

logger = logging.getLogger(__name__)

_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "CREATE", "DROP", "ALTER")
WAIT_SECONDS = 30.0  # then go ahead without it (SQLite's own busy timeout still protects the data)


def serialize_writes(engine: Engine) -> threading.Lock:
    """Install the write lock on ``engine`` (SQLite only); returns the lock (tests look at it).

    Taken before a connection's first write statement; given back after the DBAPI commit or
    rollback itself (the dialect's ``do_commit``/``do_rollback``, which the pool's reset-on-return
    also calls), so the next writer never meets the previous one's SQLite lock."""
    lock = threading.Lock()
    holders: set[int] = set()  # id() of the DBAPI connections holding the lock
    dialect = engine.dialect

    @event.listens_for(engine, "before_cursor_execute")
    def _take(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        raw = _raw_id(conn.connection)
        if raw in holders or not statement.lstrip()[:7].upper().startswith(_WRITES):
            return
        if lock.acquire(timeout=WAIT_SECONDS):
            holders.add(raw)
        else:  # e.g. one thread writing through two connections at once: never deadlock on our lock
            logger.warning("SQLite write lock not granted within %.0f s; writing without it", WAIT_SECONDS)

    def release(connection: Any) -> None:
        raw = _raw_id(connection)
        if raw in holders:
            holders.discard(raw)
            lock.release()

    def ending(original: Any) -> Any:
        def end(dbapi_connection: Any) -> None:
            try:
                original(dbapi_connection)
            finally:
                release(dbapi_connection)

        return end

    for name in ("close", "invalidate", "close_detached"):  # a connection dropped without commit or rollback
        event.listen(engine, name, lambda dbapi_connection, *_: release(dbapi_connection))

    dialect.do_commit = ending(dialect.do_commit)  # type: ignore[method-assign]
    dialect.do_rollback = ending(dialect.do_rollback)  # type: ignore[method-assign]
    return lock


def _raw_id(connection: Any) -> int:
    """The DBAPI connection's id, whether given it or the pool's proxy around it."""
    return id(getattr(connection, "dbapi_connection", None) or connection)
