"""The issuer's state: refresh tokens (durable, hashed, rotated) and device codes (in memory).

Refresh tokens live in the issuer's own ``ls_idp_refresh_tokens`` table as
SHA-256 hashes. Each one is used at most once: using it atomically marks it
spent and the successor joins the same *family*. Presenting a spent token again
is treated as theft (OAuth 2.0 Security BCP §4.14): the whole family is revoked.

Device codes (RFC 8628) are short-lived and kept in memory, keyed by the hash of
the device code; user codes map to them for the approval step.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from authlib.oauth2.rfc6749.models import TokenMixin
from authlib.oauth2.rfc8628 import DeviceCredentialMixin
from sqlalchemy import Column, Engine, Float, MetaData, String, Table, Text, and_, func, insert, select, update

logger = logging.getLogger(__name__)

metadata = MetaData()

refresh_tokens = Table(
    "ls_idp_refresh_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("family", String(32), nullable=False, index=True),
    Column("principal", String(255), nullable=False),
    Column("client_id", String(255), nullable=False),
    Column("scope", Text, nullable=True),
    Column("issued_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("used_at", Float, nullable=True),
    Column("revoked_at", Float, nullable=True),
)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class RefreshRecord(TokenMixin):
    """A stored refresh token (never the token itself), as authlib's ``TokenMixin``."""

    token_hash: str
    family: str
    principal: str
    client_id: str
    scope: str | None
    expires_at: float

    def check_client(self, client) -> bool:
        return client.get_client_id() == self.client_id

    def get_scope(self) -> str | None:
        return self.scope

    def get_expires_in(self) -> int:
        return max(0, int(self.expires_at - time.time()))

    def is_expired(self) -> bool:
        return self.expires_at <= time.time()

    def is_revoked(self) -> bool:
        return False


class RefreshTokenStore:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.on_revoke: list[Callable[[], None]] = []  # e.g. the catalog's token cache: re-check at once
        metadata.create_all(engine)

    def save(
        self, token: str, *, principal: str, client_id: str, scope: str | None, ttl: int, family: str | None = None
    ) -> None:
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(
                insert(refresh_tokens).values(
                    token_hash=digest(token),
                    family=family or uuid.uuid4().hex,
                    principal=principal,
                    client_id=client_id,
                    scope=scope,
                    issued_at=now,
                    expires_at=now + ttl,
                )
            )

    def lookup(self, token: str) -> RefreshRecord | None:
        """The live record for ``token``; a spent token revokes its family (reuse detection) and gives None."""
        with self.engine.connect() as conn:
            row = conn.execute(select(refresh_tokens).where(refresh_tokens.c.token_hash == digest(token))).first()
        if row is None or row.revoked_at is not None or row.expires_at <= time.time():
            return None
        if row.used_at is not None:
            self.revoke_family(row.family, reason="reuse of a rotated refresh token", principal=row.principal)
            return None
        return RefreshRecord(row.token_hash, row.family, row.principal, row.client_id, row.scope, row.expires_at)

    def consume(self, record: RefreshRecord) -> bool:
        """Atomically mark ``record`` spent; False (and the family revoked) if someone else spent it first."""
        now = time.time()
        with self.engine.begin() as conn:
            n = conn.execute(
                update(refresh_tokens)
                .where(
                    and_(
                        refresh_tokens.c.token_hash == record.token_hash,
                        refresh_tokens.c.used_at.is_(None),
                        refresh_tokens.c.revoked_at.is_(None),
                        refresh_tokens.c.expires_at > now,
                    )
                )
                .values(used_at=now)
            ).rowcount
        if n != 1:
            self.revoke_family(record.family, reason="concurrent use of a refresh token", principal=record.principal)
            return False
        return True

    def revoke_family(self, family: str, *, reason: str, principal: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(refresh_tokens)
                .where(and_(refresh_tokens.c.family == family, refresh_tokens.c.revoked_at.is_(None)))
                .values(revoked_at=time.time())
            )
        for hook in self.on_revoke:
            hook()
        logger.warning("revoked a refresh-token family of principal %r: %s", principal, reason)

    def family_revoked(self, family: str) -> bool:
        """True when the sign-in session ``family`` was revoked (reuse, replay, principal deleted)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(refresh_tokens.c.token_hash)
                .where(and_(refresh_tokens.c.family == family, refresh_tokens.c.revoked_at.is_not(None)))
                .limit(1)
            ).first()
        return row is not None

    def revocation_generation(self) -> tuple[int, float]:
        """(revoked tokens, latest revocation time): moves with every revocation, on any replica."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(func.count(), func.max(refresh_tokens.c.revoked_at)).where(
                    refresh_tokens.c.revoked_at.is_not(None)
                )
            ).one()
        return int(row[0]), float(row[1] or 0.0)

    def revoke_principal(self, principal: str) -> int:
        """Revoke every refresh token of ``principal`` (e.g. when the principal is deleted)."""
        with self.engine.begin() as conn:
            n = conn.execute(
                update(refresh_tokens)
                .where(and_(refresh_tokens.c.principal == principal, refresh_tokens.c.revoked_at.is_(None)))
                .values(revoked_at=time.time())
            ).rowcount
        for hook in self.on_revoke:
            hook()
        return int(n)


@dataclass
class DeviceCredential(DeviceCredentialMixin):
    """One pending device authorization (RFC 8628), as authlib's ``DeviceCredentialMixin``."""

    client_id: str
    scope: str | None
    user_code: str
    expires_at: float
    interval: int
    address: str = ""  # who asked for it (pending codes are bounded per address and per client)
    last_poll: float | None = None
    principal: str | None = None
    approved: bool | None = None  # None: pending; True: approved; False: denied
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get_client_id(self) -> str:
        return self.client_id

    def get_scope(self) -> str | None:
        return self.scope

    def get_user_code(self) -> str:
        return self.user_code

    def is_expired(self) -> bool:
        return self.expires_at <= time.time()

    def poll_too_fast(self) -> bool:
        """Record a poll; True (and the interval raised by 5 s, RFC 8628 §3.5) if it came too early."""
        with self.lock:
            now = time.monotonic()
            early = self.last_poll is not None and now - self.last_poll < self.interval
            self.last_poll = now
            if early:
                self.interval += 5
            return early


def normalize_user_code(user_code: str) -> str:
    """``abcd efgh`` / ``ABCDEFGH`` / ``abcd-efgh`` -> ``ABCD-EFGH``."""
    raw = "".join(ch for ch in (user_code or "").upper() if ch.isalnum())
    return f"{raw[:4]}-{raw[4:]}" if len(raw) == 8 else raw


class DeviceStore:
    """Pending device codes in memory, bounded per address and overall (``total``).

    Never per client id: every user of ``lakesession-cli`` shares that id, so a per-id bound
    is a lock-out anyone can trigger. When the store is full, a new code evicts the oldest
    pending code of the address holding the most, so a flood from many addresses evicts the
    flooders' own codes, not the few of a user signing in. Expired codes linger briefly to
    answer ``expired_token`` but no longer count against the quotas.
    """

    LINGER_SECONDS = 300

    def __init__(self, *, per_address: int = 0, total: int = 10_000) -> None:
        self.per_address = per_address  # 0: unbounded
        self.total = max(1, total)
        self._lock = threading.Lock()
        self._by_device: dict[str, DeviceCredential] = {}
        self._by_user: dict[str, str] = {}

    def add(self, device_code: str, cred: DeviceCredential) -> tuple[int, float] | None:
        """Store ``cred``; None when stored, else (429 for an exhausted quota of this address,
        503 on a user-code collision) and the seconds until a slot frees up."""
        with self._lock:
            self._purge()
            now = time.time()
            live = {k: c for k, c in self._by_device.items() if c.expires_at > now}
            same = [c for c in live.values() if c.address == cred.address]
            if self.per_address and len(same) >= self.per_address:
                return 429, min(c.expires_at for c in same) - now
            if cred.user_code in self._by_user:
                return 503, 1.0
            while len(self._by_device) >= self.total:
                self._evict(live)
            key = digest(device_code)
            self._by_device[key] = cred
            self._by_user[cred.user_code] = key
            return None

    def _evict(self, live: dict[str, DeviceCredential]) -> None:
        """Drop an expired code if any, else the oldest live code of the address holding the most."""
        dead = next((k for k in self._by_device if k not in live), None)
        if dead is None:
            counts: dict[str, int] = {}
            for c in live.values():
                counts[c.address] = counts.get(c.address, 0) + 1
            greedy = max(counts, key=lambda a: counts[a])
            dead = min((k for k, c in live.items() if c.address == greedy), key=lambda k: live[k].expires_at)
            logger.info("device-code store full: evicted the oldest pending code of %s", greedy)
        live.pop(dead, None)
        self._by_user.pop(self._by_device.pop(dead).user_code, None)

    def by_device_code(self, device_code: str) -> DeviceCredential | None:
        with self._lock:
            return self._by_device.get(digest(device_code))

    def by_user_code(self, user_code: str) -> DeviceCredential | None:
        with self._lock:
            key = self._by_user.get(normalize_user_code(user_code))
            return self._by_device.get(key) if key else None

    def pop(self, device_code: str) -> DeviceCredential | None:
        """Remove and return a device code (single use)."""
        with self._lock:
            cred = self._by_device.pop(digest(device_code), None)
            if cred is not None:
                self._by_user.pop(cred.user_code, None)
            return cred

    def _purge(self) -> None:
        cutoff = time.time() - self.LINGER_SECONDS
        for key in [k for k, c in self._by_device.items() if c.expires_at < cutoff]:
            self._by_user.pop(self._by_device.pop(key).user_code, None)
