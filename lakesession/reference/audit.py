"""Durable audit log: every authorization decision and every metadata issuance.

Records are written synchronously in the request's thread (SQLite WAL makes
this cheap) so that an acknowledged request is always on disk.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
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


class AuditLog:
    def __init__(self, engine: Engine):
        self.engine = engine

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
        """Write several records in one transaction (one request's decisions and issuances)."""
        now = time.time()
        rows = [
            {**r, "ts": now, "detail": json.dumps(r["detail"], sort_keys=True) if r.get("detail") else None}
            for r in records
        ]
        with self.engine.begin() as conn:
            conn.execute(insert(store.audit), rows)

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
