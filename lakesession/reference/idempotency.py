"""``Idempotency-Key`` on mutating routes: a retry of a request whose answer was lost is applied once.

Why: a commit the catalog saved but never answered (the server died, the connection dropped) would
otherwise be applied again by the client's retry, duplicating the batch.

How (the spec's ``idempotency-key`` parameter, lifetime advertised in ``/v1/config``):

* Outcomes are stored per (principal, key): another principal's key is just an unknown key to
  anyone else; they can neither replay nor read it.
* A success row is inserted by an engine ``commit`` hook that is armed only around the mutation
  call (``Idempotency.applying``), so it is written **in the mutation's own transaction**: both
  land or neither. The answer itself is added just after (``done``); a row without one (the
  server died in between, or the answer carried credentials, which are never stored) is answered
  from the current state, as the spec allows ("may reflect a newer state").
* Deterministic client errors (400, 404, 406, 409, 422) are stored too and replayed; 401/403
  (a matter of the token and grants, not of the request) and 5xx never are.
* The same key with a different request (method, path, query, body) is a 400 naming the fix.
* Two requests with one key at once: the second's mutation is rolled back (the key's row is
  taken) and it gets a 503 with Retry-After; its retry replays the first's outcome.
* Rows expire after the advertised lifetime plus a grace period and are purged.

Fault injection (tests only, off by default): ``LAKESESSION_FAULT_KILL_AFTER_COMMIT`` — a
comma-separated list of actions (e.g. ``commit_table``) — is read once, when the server starts
(``Idempotency.faults`` from the process environment); after such a mutation's transaction
committed and before the answer is sent, the server process kills itself with SIGKILL. No request
can enable it: only whoever starts the server sets its environment.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import threading
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request, Response
from fastapi.responses import JSONResponse
from sqlalchemy import Connection, Engine, delete, event, select, update
from sqlalchemy.dialects import postgresql, sqlite
from starlette.concurrency import run_in_threadpool

from . import store
from .context import RequestContext
from .errors import BadRequest, CatalogError, ServiceUnavailable, error_body

logger = logging.getLogger(__name__)

HEADER = "idempotency-key"
LIFETIME = "PT30M"  # advertised as the config's ``idempotency-key-lifetime``
LIFETIME_SECONDS = 30 * 60
GRACE_SECONDS = 5 * 60  # kept a little longer than advertised: clocks and slow retries
FAULT_ENV = "LAKESESSION_FAULT_KILL_AFTER_COMMIT"
FINAL_ERRORS = frozenset({400, 404, 406, 409, 422})
REPLAYED_HEADER = "Idempotent-Replayed"
_PURGE_EVERY = 60.0
IN_FLIGHT = "Another request with this Idempotency-Key was being processed at the same time; retry (same key) shortly"


def _faults_from_env() -> frozenset[str]:
    raw = os.environ.get(FAULT_ENV, "")
    faults = frozenset(a.strip() for a in raw.split(",") if a.strip())
    if faults:
        logger.warning("FAULT INJECTION ON (%s=%s): the server kills itself after these commits", FAULT_ENV, raw)
    return faults


_FAULTS = _faults_from_env()  # read once per server process, at import (its start)


class KeyInFlight(ServiceUnavailable):
    """Another request with the same key holds it: this one's mutation was rolled back."""


class KeyReused(BadRequest):
    """The key's stored outcome belongs to a different request (never itself stored)."""


@dataclass
class _Pending:
    engine: Engine
    row: dict[str, Any]
    written: bool = False


_armed: ContextVar[_Pending | None] = ContextVar("lakesession_idempotency_armed", default=None)


def _claim(conn: Connection, row: dict[str, Any]) -> bool:
    """Insert ``row`` unless the key is taken; whether it was inserted (RETURNING: psycopg reports no
    rowcount for ``ON CONFLICT DO NOTHING`` inside a commit hook)."""
    mod = postgresql if conn.dialect.name == "postgresql" else sqlite
    stmt = mod.insert(store.idempotency).values(**row).on_conflict_do_nothing().returning(store.idempotency.c.key)
    return conn.execute(stmt).first() is not None


def _on_commit(conn: Connection) -> None:
    """Engine ``commit`` hook: the armed outcome row joins the transaction being committed."""
    pending = _armed.get()
    if pending is None or pending.written or conn.engine is not pending.engine:
        return
    pending.written = True
    if not _claim(conn, pending.row):
        # the key is taken by a concurrent request: nothing of this one may land
        # through the dialect: a write lock taken per connection (sqlitelock) is given back with it
        conn.dialect.do_rollback(conn.connection)
        raise KeyInFlight(IN_FLIGHT, headers={"Retry-After": "1"})


_install_lock = threading.Lock()
_last_purge: weakref.WeakKeyDictionary[Engine, float] = weakref.WeakKeyDictionary()


def install(engine: Engine) -> None:
    """Listen for commits on ``engine`` (once per engine)."""
    with _install_lock:
        if not event.contains(engine, "commit", _on_commit):
            event.listen(engine, "commit", _on_commit)


def purge(engine: Engine, now: float | None = None) -> int:
    """Delete expired outcomes; returns how many."""
    now = time.time() if now is None else now
    with engine.begin() as conn:
        return conn.execute(delete(store.idempotency).where(store.idempotency.c.expires_at < now)).rowcount


def _maybe_purge(engine: Engine) -> None:
    now = time.time()
    if now - _last_purge.get(engine, 0.0) < _PURGE_EVERY:
        return
    _last_purge[engine] = now
    try:
        n = purge(engine, now)
    except Exception as exc:  # purging is housekeeping: never fail a request for it
        logger.warning("could not purge expired idempotency keys (%s)", type(exc).__name__)
        return
    if n:
        logger.debug("purged %d expired idempotency keys", n)


def parse_key(raw: str | None) -> str | None:
    """The header's key, normalised (lower case), or None; 400 unless it is a UUID in string form."""
    if raw is None:
        return None
    value = raw.strip()
    try:
        if len(value) != 36:
            raise ValueError
        uuid.UUID(value)
    except ValueError:
        raise BadRequest(
            "Invalid Idempotency-Key header: it must be a UUID in its 36-character string form "
            "(e.g. a UUIDv7, 017f22e2-79b0-7cc3-98c4-dc0c0c07398f)"
        ) from None
    return value.lower()


def request_hash(method: str, raw_path: bytes, query: bytes, body: bytes) -> str:
    h = hashlib.sha256()
    for part in (method.encode(), raw_path, query, body):
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()


@dataclass
class Idempotency:
    """One request's ``Idempotency-Key`` handling; without the header everything is a no-op
    (except fault injection, which tests also use on key-less requests)."""

    key: str | None
    hash: str
    faults: frozenset[str] = _FAULTS
    ctx: RequestContext | None = None
    _pending: _Pending | None = field(default=None, repr=False)

    @property
    def engine(self) -> Engine:
        assert self.ctx is not None
        return self.ctx.services.catalog.engine

    def replay(
        self, ctx: RequestContext, rebuild: Callable[[], Response | dict[str, Any]] | None = None
    ) -> Response | None:
        """The stored outcome of an earlier request with this key, or None (go ahead).

        Call first thing in the route. ``rebuild`` answers from the current state when the stored
        row has no answer (the server died after committing, or the answer held credentials)."""
        self.ctx = ctx
        if self.key is None:
            return None
        install(self.engine)
        _maybe_purge(self.engine)
        t = store.idempotency
        where = (t.c.principal == ctx.principal.name) & (t.c.key == self.key)
        with self.engine.connect() as conn:
            row = conn.execute(select(t.c.request_hash, t.c.status, t.c.body, t.c.expires_at).where(where)).first()
        if row is None:
            return None
        if row.expires_at < time.time():
            with self.engine.begin() as conn:
                conn.execute(delete(t).where(where & (t.c.expires_at < time.time())))
            return None
        if row.request_hash != self.hash:
            raise KeyReused(
                "This Idempotency-Key was already used for a different request (method, path or body differ); "
                "a retry must repeat the request exactly, and a new operation needs a new key"
            )
        ctx.audit("idempotent_replay", "catalog", "allow", {"status": row.status})
        if row.body is None:
            built = rebuild() if rebuild is not None else Response(status_code=row.status)
            response = built if isinstance(built, Response) else JSONResponse(built)
        elif row.status == 204:
            response = Response(status_code=204)
        else:
            response = Response(row.body, status_code=row.status, media_type="application/json")
        response.headers[REPLAYED_HEADER] = "true"
        return response

    @contextmanager
    def applying(self, action: str, status: int, body: bytes | None = None) -> Iterator[None]:
        """Around the call that commits the mutation: its transaction also stores this key's outcome
        (``status``, and ``body`` when the answer is known before; else ``done`` adds it)."""
        token = None
        if self.key is not None and self.ctx is not None:
            now = time.time()
            self._pending = _Pending(
                self.engine,
                {
                    "principal": self.ctx.principal.name,
                    "key": self.key,
                    "request_hash": self.hash,
                    "status": status,
                    "body": body if body is not None else (b"" if status == 204 else None),
                    "created_at": now,
                    "expires_at": now + LIFETIME_SECONDS + GRACE_SECONDS,
                },
            )
            token = _armed.set(self._pending)
        try:
            yield
        finally:
            if token is not None:
                _armed.reset(token)
        if action in self.faults:
            logger.warning("FAULT INJECTION: %s committed; killing the server before it answers", action)
            os.kill(os.getpid(), signal.SIGKILL)

    @property
    def committed(self) -> bool:
        return self._pending is not None and self._pending.written

    def done(self, response: Response, *, keep: bool = True) -> Response:
        """Add the answer to the committed outcome row (``keep=False``: it holds credentials, never stored)."""
        if keep and self.committed and response.status_code < 300 and self._pending is not None:
            if self._pending.row["body"] is None:
                t = store.idempotency
                with self.engine.begin() as conn:
                    conn.execute(
                        update(t)
                        .where((t.c.principal == self._pending.row["principal"]) & (t.c.key == self.key))
                        .values(body=bytes(response.body))
                    )
        return response

    def done_json(self, value: dict[str, Any]) -> dict[str, Any]:
        """``done`` for routes answering a dict (rendered as Starlette's ``JSONResponse`` renders it)."""
        self.done(JSONResponse(value))
        return value

    def record_error(self, exc: CatalogError) -> CatalogError | None:
        """Store a deterministic client error as this key's final outcome (when nothing was committed).

        Returns the error to answer instead: when a concurrent request with this key finalized it
        first, this request's error is not the key's outcome (a 503; the retry replays the outcome)."""
        if self.key is None or self.ctx is None or self.committed or exc.status not in FINAL_ERRORS:
            return None
        if isinstance(exc, (KeyInFlight, KeyReused)):
            return None
        now = time.time()
        row = {
            "principal": self.ctx.principal.name,
            "key": self.key,
            "request_hash": self.hash,
            "status": exc.status,
            "body": json.dumps(error_body(exc.status, exc.type, exc.message)).encode(),
            "created_at": now,
            "expires_at": now + LIFETIME_SECONDS + GRACE_SECONDS,
        }
        try:
            with self.engine.begin() as conn:
                if not _claim(conn, row):
                    return KeyInFlight(IN_FLIGHT, headers={"Retry-After": "1"})
        except Exception as e:  # the error answer goes out regardless; the retry then runs again
            logger.warning("could not store the outcome of an idempotent request (%s)", type(e).__name__)
        return None


async def idempotency(request: Request) -> AsyncIterator[Idempotency]:
    """FastAPI dependency (``scope="function"``) for mutating routes: parses the key, hashes the
    request, and stores a deterministic client error the route raises as the key's outcome."""
    key = parse_key(request.headers.get(HEADER))
    body = await request.body() if key is not None else b""
    raw_path = request.scope.get("raw_path") or request.url.path.encode()
    idem = Idempotency(key, request_hash(request.method, raw_path, request.scope.get("query_string", b""), body))
    try:
        yield idem
    except CatalogError as exc:
        if idem.key is not None:
            instead = await run_in_threadpool(idem.record_error, exc)
            if instead is not None:
                raise instead from None
        raise
