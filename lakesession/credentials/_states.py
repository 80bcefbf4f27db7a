"""The state of one table's vended credentials: what the store keeps and the refresher updates.

Its own module so the store (``_store``) and the refresher (``_refresh``) both depend on it and
not on each other: the refresher reaches the store only through the narrow ``StoreView`` protocol.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

VALID, REFRESHING, REVOKED, FAILED, EXPIRED = "valid", "refreshing", "revoked", "failed", "expired"
STATES = (VALID, REFRESHING, REVOKED, FAILED, EXPIRED)
READ, WRITE, UNKNOWN = "read", "write", "unknown"


def refresh_margin(lifetime: float) -> float:
    """How long before expiry to refresh: min(300 s, 20 % of the lifetime), at least 1 s."""
    return max(1.0, min(300.0, 0.2 * max(lifetime, 0.0)))


@dataclass(frozen=True, eq=False)
class StorageCredential:
    """One vended credential: the storage ``prefix`` it is scoped to and its FileIO ``config`` (secret-bearing)."""

    table: str
    prefix: str
    config: Mapping[str, str] = field(repr=False)
    expires_at: float | None
    generation: int

    def __repr__(self) -> str:
        exp = "never" if self.expires_at is None else f"{self.expires_at - time.time():.0f}s"
        return f"StorageCredential(table={self.table!r}, prefix={self.prefix!r}, expires_in={exp}, config=***)"


@dataclass(eq=False)
class TableCredentials:
    """The store's entry for one table (internal state; read it through ``CredentialStore``)."""

    table: str
    credentials: tuple[StorageCredential, ...]
    mode: str = UNKNOWN
    location: str | None = None
    refresh_url: str | None = field(default=None, repr=False)
    token: Callable[[], str] | None = field(default=None, repr=False)
    state: str = VALID
    last_error: str | None = None
    last_refresh: float | None = None
    refreshes: int = 0
    failures: int = 0
    received_at: float = 0.0
    refresh_at: float = float("inf")
    next_attempt_at: float = 0.0
    flight: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def expires_at(self) -> float | None:
        times = [c.expires_at for c in self.credentials if c.expires_at is not None]
        return min(times) if times else None

    def usable(self, now: float) -> bool:
        exp = self.expires_at
        return bool(self.credentials) and (exp is None or now < exp)

    def effective_state(self, now: float) -> str:
        if self.state == VALID and not self.usable(now):
            return EXPIRED
        return self.state

    def schedule(self, now: float) -> None:
        """Set ``refresh_at`` from the credentials just received (margin from the lifetime left at receipt)."""
        self.received_at = now
        exp = self.expires_at
        if exp is None:
            self.refresh_at = float("inf")
            return
        lifetime = exp - now
        self.refresh_at = max(exp - refresh_margin(lifetime), now + 0.5 * lifetime)

    def __repr__(self) -> str:
        return (
            f"TableCredentials(table={self.table!r}, prefixes={[c.prefix for c in self.credentials]!r}, "
            f"mode={self.mode!r}, state={self.state!r}, refreshes={self.refreshes})"
        )
