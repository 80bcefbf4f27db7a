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

from sqlalchemy import Connection, Engine, select, update

from . import store
from .keptread import KeptRead

_T = store.grants_version
_SELECT = select(_T.c.version).where(_T.c.id == store.GRANTS_VERSION_ID)


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
        self._read_row = KeptRead(engine, _SELECT)

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
        """The row's value, on a connection kept for this one statement (``keptread``): a request is never
        answered from cached grants without a successful read."""
        row = self._read_row.first()
        return row[0] if row else None

    def close(self) -> None:
        self._read_row.close()

    def bump(self, conn: Connection) -> None:
        """Move the version inside ``conn``'s transaction (the change and the move commit together)."""
        conn.execute(update(_T).where(_T.c.id == store.GRANTS_VERSION_ID).values(version=_T.c.version + 1))

    def forget(self) -> None:
        """This process just changed something: no read begun before now may be reused."""
        with self._lock:
            self._known = None
            self._changed_at = time.monotonic()
