"""The gateway's cache of vended credentials (S3 keys, ADLS SAS tokens, GCS OAuth tokens), per table.

Iceberg's S3FileIO asks for new credentials on *every* request once fewer than
five minutes remain (and short TTLs are always under five minutes). The gateway
answers those from this cache and goes upstream once too little of the credential's
life is left to hand it out (``required_life``: 15% of its lifetime, and never less
than the reader's I/O deadline, ``min-valid-seconds``, 60 s by default, capped at half
the lifetime: Comet's opendal refuses a key expiring within its 30 s I/O deadline, and
a reader given 7 s of life fails) — so the catalog sees one or two refreshes per TTL
per table, and a revoked grant is noticed within one TTL (the upstream refresh
answers 403, which is passed through and clears the entry). Table loads feed the
cache too: the credentials a load brings (fresh: the catalog hands out credentials
with >= 90 % of their lifetime left) replace older cached ones, and a refused load
evicts the entry — a query loop then needs no upstream refresh at all.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from .._wire.cloudkeys import expiry_seconds

Reply = tuple[int, bytes, dict[str, str]]
REFRESH_AT_FRACTION_LEFT = 0.15
DEFAULT_MIN_VALID = 60.0  # seconds of life a handed-out credential keeps, unless its lifetime is too short
MIN_VALID_MAX_FRACTION = 0.5  # ... then half its lifetime (a 30 s key is never handed out with < 15 s)


def required_life(lifetime: float, min_valid: float = DEFAULT_MIN_VALID) -> float:
    """Seconds of life a credential of ``lifetime`` must still have to be handed out."""
    lifetime = max(lifetime, 0.0)
    return max(REFRESH_AT_FRACTION_LEFT * lifetime, min(max(min_valid, 0.0), MIN_VALID_MAX_FRACTION * lifetime))


def earliest_expiry(body: bytes) -> float | None:
    """Earliest expiry (S3, ADLS SAS or GCS token) in a credentials or load-table body, as epoch seconds."""
    if b"expires-at" not in body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    configs = [doc.get("config") or {}] + [c.get("config") or {} for c in doc.get("storage-credentials") or []]
    times = [t for cfg in configs if isinstance(cfg, dict) for t in [expiry_seconds(cfg)] if t is not None]
    return min(times) if times else None


@dataclass(frozen=True)
class _Entry:
    reply: Reply
    fetched_at: float
    expires_at: float

    def fresh(self, now: float, min_valid: float = DEFAULT_MIN_VALID) -> bool:
        return now < self.expires_at - required_life(self.expires_at - self.fetched_at, min_valid)


class CredentialCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}
        self.upstream_fetches = 0
        self.served_from_cache = 0

    def get(self, key: str, min_valid: float = DEFAULT_MIN_VALID) -> Reply | None:
        now = time.time()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and entry.fresh(now, min_valid):
                self.served_from_cache += 1
                return entry.reply
        return None

    def store(self, key: str, reply: Reply) -> None:
        """Keep a 200 with an expiry; anything else (403 after revocation, errors) evicts the entry."""
        self.upstream_fetches += 1
        status, content, _ = reply
        expires = earliest_expiry(content) if status == 200 else None
        with self._lock:
            if expires is None:
                self._entries.pop(key, None)
            else:
                self._entries[key] = _Entry(reply, time.time(), expires)

    def offer(self, key: str, reply: Reply) -> None:
        """Credentials that came with a table load: kept if they outlive the cached ones (no upstream call
        counted), so a query loop's loads keep the cache fresh and refreshes rarely need the catalog."""
        status, content, _ = reply
        expires = earliest_expiry(content) if status == 200 else None
        if expires is None:
            return
        now = time.time()
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or expires > entry.expires_at:
                self._entries[key] = _Entry(reply, now, expires)

    def evict(self, key: str) -> None:
        """Forget ``key`` (its table load was refused: a revoked grant must not be served from the cache)."""
        with self._lock:
            self._entries.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
