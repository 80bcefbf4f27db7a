"""Durable audit log: every authorization decision and every metadata issuance.

Records are written before the request answers, so that an acknowledged request is always on
disk. Concurrent requests share a transaction (group commit): under 50 sessions one write
transaction per request made every request queue for SQLite's single writer.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import Engine, insert, select

from . import store


@dataclass(frozen=True)
class AuditRecord:
    ts: float
    request_id: str
    principal: str
    action: str
    securable: str
    decision: str
    detail: dict[str, Any] | None = None
    id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Batch:
    """Records of the requests waiting for one transaction; the first to arrive writes it."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    led: bool = False
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class AuditLog:
    def __init__(self, engine: Engine):
        self.engine = engine
        self._lock = threading.Lock()  # guards _open
        self._writing = threading.Lock()  # one batch written at a time; the next one fills meanwhile
        self._open = _Batch()

    def record(
        self,
        *,
        principal: str,
        action: str,
        securable: str,
        decision: str,
        request_id: str,
        detail: dict[str, Any] | None = None,
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                insert(store.audit).values(
                    ts=time.time(),
                    request_id=request_id,
                    principal=principal,
                    action=action,
                    securable=securable,
                    decision=decision,
                    detail=json.dumps(detail, sort_keys=True) if detail else None,
                )
            )

    def record_many(self, records: list[dict[str, Any]]) -> None:
        """Write several records (one request's decisions and issuances); returns once they are committed.

        Group commit: a request whose records arrive while another batch is being written joins the
        next batch; that batch's first request writes it, in one transaction, when the previous one is
        done. Every request still returns only after its own records are committed (or raises)."""
        now = time.time()
        rows = [
            {**r, "ts": now, "detail": json.dumps(r["detail"], sort_keys=True) if r.get("detail") else None}
            for r in records
        ]
        with self._lock:
            batch = self._open
            batch.rows.extend(rows)
            leader, batch.led = not batch.led, True
        if not leader:
            batch.done.wait()
            if batch.error is not None:
                raise batch.error
            return
        with self._writing:
            with self._lock:
                self._open = _Batch()  # later arrivals wait for the next transaction
            try:
                with self.engine.begin() as conn:
                    conn.execute(insert(store.audit), batch.rows)
            except BaseException as e:
                batch.error = e
                raise
            finally:
                batch.done.set()

    def query(
        self,
        *,
        principal: str | None = None,
        securable: str | None = None,
        since: float | None = None,
        action: str | None = None,
        limit: int = 1000,
    ) -> list[AuditRecord]:
        t = store.audit
        q = select(t).order_by(t.c.id.desc()).limit(max(1, min(limit, 10_000)))
        if principal:
            q = q.where(t.c.principal == principal)
        if securable:
            q = q.where(t.c.securable == securable)
        if since is not None:
            q = q.where(t.c.ts >= since)
        if action:
            q = q.where(t.c.action == action)
        with self.engine.connect() as conn:
            rows = conn.execute(q).all()
        return [
            AuditRecord(
                r.ts,
                r.request_id,
                r.principal,
                r.action,
                r.securable,
                r.decision,
                json.loads(r.detail) if r.detail else None,
                r.id,
            )
            for r in reversed(rows)
        ]
