"""The session's access log: what the engine loaded, created, committed and dropped through the gateway.

Bounded (10,000 records by default). Iceberg's S3FileIO asks for credentials on nearly every
request once a TTL is short (≈ 280/s from one Spark job), and the gateway answers those from its
cache: one record each would push everything else out of the log within a minute. So cache-served
credential requests — and remote-signing calls (``sign_request``, one per S3 request) — are
aggregated: one record per table, chain, status and minute, with ``count`` requests between
``time`` and ``until``; loads, commits, creates, drops and every upstream refresh stay individual.
The log then keeps hours, not seconds.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class AccessRecord:
    time: float
    action: str  # load_table, create_table, commit_table, drop_table, load_view, ..., refresh_credentials
    object: str  # "table sales.orders"
    status: int
    duration_ms: float
    request_id: str | None = None
    credentials_expire_at: float | None = None
    via: str | None = None  # upstream, cache, shared (how a credential refresh was served)
    chain: str | None = None  # the view chain the load went through ("sales.v1 → sales.v2")
    count: int = 1  # requests this record stands for (> 1: cache-served refreshes aggregated per minute)
    until: float | None = None  # time of the last of them (None for a single request)

    @property
    def last(self) -> float:
        """When the last request this record stands for happened."""
        return self.time if self.until is None else self.until

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


AGGREGATE_SECONDS = 60


def _aggregated(record: AccessRecord) -> bool:
    # remote signing is one call per S3 request: aggregated like cache-served refreshes
    if record.action == "sign_request":
        return True
    if record.action == "path_credentials":
        return record.via in ("cache", "table")  # Comet asks per request near expiry
    return record.action == "refresh_credentials" and record.via == "cache"


class _Bucket:
    """Cache-served refreshes of one table (chain, status) within one minute, folded into one record."""

    __slots__ = ("count", "duration_ms", "expires", "first", "seq", "until")

    def __init__(self, first: AccessRecord, seq: int):
        self.first, self.seq = first, seq
        self.count, self.until = first.count, first.last
        self.duration_ms, self.expires = first.duration_ms, first.credentials_expire_at

    def absorb(self, r: AccessRecord) -> None:
        self.count += r.count
        self.until = max(self.until, r.last)
        self.duration_ms = max(self.duration_ms, r.duration_ms)
        if r.credentials_expire_at is not None:
            self.expires = max(self.expires or 0.0, r.credentials_expire_at)

    def record(self) -> AccessRecord:
        if self.count == 1:
            return self.first
        return replace(
            self.first,
            count=self.count,
            until=self.until,
            duration_ms=self.duration_ms,
            credentials_expire_at=self.expires,
        )


class AccessLog:
    """A bounded, thread-safe, in-memory log of one session's catalog accesses (see the module docstring)."""

    def __init__(self, maxlen: int = 10_000):
        self.maxlen = maxlen
        self._records: deque[AccessRecord | _Bucket] = deque(maxlen=maxlen)
        self._buckets: dict[tuple[Any, ...], _Bucket] = {}
        self._appended = 0  # records ever appended: entry number n is still held while n >= _appended - maxlen
        self._lock = threading.Lock()

    def add(self, record: AccessRecord) -> None:
        with self._lock:
            if not _aggregated(record):
                self._append(record)
                return
            minute = int(record.time // AGGREGATE_SECONDS)
            key = (record.object, record.chain, record.status, minute)
            bucket = self._buckets.get(key)
            if bucket is not None and bucket.seq >= self._appended - self.maxlen:
                bucket.absorb(record)
                return
            if len(self._buckets) >= 1024:  # keep only this minute's open buckets
                self._buckets = {k: b for k, b in self._buckets.items() if k[3] >= minute}
            bucket = self._buckets[key] = _Bucket(record, self._appended)
            self._append(bucket)

    def _append(self, entry: AccessRecord | _Bucket) -> None:
        self._records.append(entry)
        self._appended += 1

    def records(self, since: float | None = None) -> list[AccessRecord]:
        """Records in arrival order; ``since``: those with a request at or after that time."""
        with self._lock:
            out = [e.record() if isinstance(e, _Bucket) else e for e in self._records]
        return [r for r in out if since is None or r.last >= since]

    def requests(self, since: float | None = None) -> int:
        """How many requests the records stand for (aggregated ones counted one by one)."""
        return sum(r.count for r in self.records(since))

    def __len__(self) -> int:
        return len(self._records)
