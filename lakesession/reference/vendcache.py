"""Vended STS credentials shared by every process on one catalog database (``serve --workers``, replicas).

Why: each process caching alone meant one STS call per process per refresh period: with two workers
3.05 ``AssumeRole`` per 1,000 credential loads against 1.5 for one. The database is the one thing
workers and replicas already share, so the second cache tier lives there (``ls_vended_credentials``).

How (``CredentialVendor`` asks this tier after its in-memory one misses):

* ``fresh`` returns a row's credential while it still has the vendor's ``min_remaining`` share of its
  life (the rule the in-memory tier uses), so every process hands out the same nearly fresh keys.
* ``claim`` is a cross-process single flight: an upsert that succeeds only when no other process holds
  an unexpired claim *and* the row is not fresh. The winner calls STS and ``put``s the result (which
  releases the claim); the others ``wait`` for it (polling briefly) and fall back to their own STS call
  if the winner died or is slow, so a claim can delay a load but never fail it.

Secrets at rest: the row holds the credential encrypted with AES-256-GCM under a random key kept in the
data directory (``vending-cache.key``, 0600, in the 0700 directory beside the issuer key; workers and
replicas share that directory). The row's id is an HMAC of (principal, table, location, mode) under a
key derived from it, and is the AEAD's associated data: someone holding only a database dump reads
neither keys nor which principal loaded which table, and someone who can write rows cannot move one
principal's credential to another's row. Without a data directory there is no shared tier.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy import Engine, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from . import store
from .vending import VendedCredential

logger = logging.getLogger(__name__)

KEY_FILE = "vending-cache.key"
CLAIM_SECONDS = 10.0  # a claim older than this is abandoned (its holder died or STS hangs)
WAIT_SECONDS = 3.0  # how long a process waits for another's STS call before making its own
POLL_SECONDS = 0.02
PURGE_EVERY = 300.0

CacheKey = tuple[str, str, str, str]  # principal, table, location, mode


def load_key(data_dir: Path) -> bytes:
    """The data directory's cache key, created once (atomically: racing workers all read the winner's)."""
    path = data_dir / KEY_FILE
    if not path.exists():
        tmp = data_dir / f".{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
        try:
            os.link(tmp, path)  # fails if another process linked first: theirs is the key
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    key = bytes.fromhex(path.read_text().strip())
    if len(key) != 32:
        raise ValueError(f"{path} does not hold a 256-bit key (64 hex digits); delete it to have a new one made")
    return key


class SharedVendCache:
    """The database tier of the vending cache (see the module docstring)."""

    def __init__(self, engine: Engine, key: bytes, min_remaining: float, *, realm: str = ""):
        self._engine = engine
        self._aead = AESGCM(hashlib.sha256(b"lakesession vend-cache aead\0" + key).digest())
        self._id_key = hashlib.sha256(b"lakesession vend-cache id\0" + key).digest()
        self._min_remaining = min_remaining
        self._realm = realm  # the STS instance (S3Settings.sts_realm): another one's rows are never read
        self._purged = time.time()
        backend = engine.dialect.name
        self._insert: Any = postgresql.insert if backend == "postgresql" else sqlite.insert
        self.hits = self.claims = self.waits = 0

    def __repr__(self) -> str:
        return f"SharedVendCache(backend={self._engine.dialect.name!r})"

    def _id(self, key: CacheKey) -> str:
        return hmac.new(self._id_key, json.dumps([self._realm, *key]).encode(), hashlib.sha256).hexdigest()

    def _owner(self, principal: str) -> str:
        return hmac.new(self._id_key, json.dumps([principal]).encode(), hashlib.sha256).hexdigest()

    def _stale_where(self, t: Any, now: float) -> Any:
        """SQL: the row's credential has less than ``min_remaining`` of its life left (or none at all)."""
        return (t.c.payload.is_(None)) | (t.c.expires_at - now < self._min_remaining * (t.c.expires_at - t.c.issued_at))

    def fresh(self, key: CacheKey, now: float | None = None) -> VendedCredential | None:
        """The shared credential for ``key`` if it is still fresh enough to hand out."""
        now = time.time() if now is None else now
        t = store.vended_credentials
        rid = self._id(key)
        with self._engine.connect() as conn:
            row = conn.execute(
                select(t.c.payload, t.c.issued_at, t.c.expires_at).where(t.c.id == rid, ~self._stale_where(t, now))
            ).first()
        if row is None:
            return None
        cred = self._open(rid, row.payload, key)
        if cred is None:  # not sealed for this row: useless to everyone, so let the next claim replace it
            with self._engine.begin() as conn:
                conn.execute(update(t).where(t.c.id == rid, t.c.payload == row.payload).values(payload=None))
        else:
            self.hits += 1
        return cred

    def claim(self, key: CacheKey, now: float | None = None) -> bool:
        """True when this process is to call STS for ``key`` (no live claim, no fresh row)."""
        now = time.time() if now is None else now
        t = store.vended_credentials
        stmt = self._insert(t).values(
            id=self._id(key),
            owner=self._owner(key[0]),
            issued_at=0.0,
            expires_at=0.0,
            claimed_until=now + CLAIM_SECONDS,
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=[t.c.id],
            set_={"claimed_until": now + CLAIM_SECONDS},
            where=(t.c.claimed_until < now) & self._stale_where(t, now),
        )
        with self._engine.begin() as conn:  # RETURNING, not rowcount: psycopg reports -1 for an upsert
            won = conn.execute(stmt.returning(t.c.id)).first() is not None
        self.claims += won
        return won

    def wait(self, key: CacheKey, timeout: float | None = None) -> VendedCredential | None:
        """Another process claimed ``key``: its credential once it lands, else ``None`` after ``timeout``."""
        self.waits += 1
        deadline = time.monotonic() + (WAIT_SECONDS if timeout is None else timeout)
        while time.monotonic() < deadline:
            time.sleep(POLL_SECONDS)
            cred = self.fresh(key)
            if cred is not None:
                return cred
        return None

    def put(self, key: CacheKey, cred: VendedCredential) -> None:
        """Store a just-issued credential (and release this process's claim)."""
        t = store.vended_credentials
        rid = self._id(key)
        values = {
            "payload": self._seal(rid, cred),
            "issued_at": cred.issued_at,
            "expires_at": cred.expires_at,
            "claimed_until": 0.0,
        }
        stmt = self._insert(t).values(id=rid, owner=self._owner(key[0]), **values)
        stmt = stmt.on_conflict_do_update(index_elements=[t.c.id], set_=values)
        now = time.time()
        with self._engine.begin() as conn:
            conn.execute(stmt)
            if now - self._purged > PURGE_EVERY:
                self._purged = now
                conn.execute(delete(t).where(t.c.expires_at < now, t.c.claimed_until < now))

    def release(self, key: CacheKey) -> None:
        """Give up a claim without a credential (STS failed): others need not wait for it."""
        t = store.vended_credentials
        with self._engine.begin() as conn:
            conn.execute(update(t).where(t.c.id == self._id(key)).values(claimed_until=0.0))

    def invalidate(self, principal: str | None = None) -> None:
        """Drop every process's shared credentials (all, or one principal's)."""
        t = store.vended_credentials
        with self._engine.begin() as conn:
            conn.execute(delete(t) if principal is None else delete(t).where(t.c.owner == self._owner(principal)))

    def _seal(self, rid: str, cred: VendedCredential) -> bytes:
        body = json.dumps(
            [cred.access_key_id, cred.secret_access_key, cred.session_token, cred.expires_at, cred.issued_at]
        ).encode()
        nonce = secrets.token_bytes(12)
        return nonce + self._aead.encrypt(nonce, body, rid.encode())

    def _open(self, rid: str, payload: bytes, key: CacheKey) -> VendedCredential | None:
        try:
            body = self._aead.decrypt(payload[:12], payload[12:], rid.encode())
        except InvalidTag:  # another key (a data directory not shared), or a row moved or altered
            logger.warning("a shared vending cache row could not be decrypted; issuing new credentials")
            return None
        akid, secret, token, expires_at, issued_at = json.loads(body)
        return VendedCredential(akid, secret, token, expires_at, key[3], key[2], issued_at=issued_at)
