"""The issuer's durable state: refresh tokens (hashed, rotated). Device codes live in memory (``_devices``).

Refresh tokens live in the issuer's own ``ls_idp_refresh_tokens`` table as
SHA-256 hashes. Each one is used at most once: using it atomically marks it
spent and the successor joins the same *family*. Presenting a spent token again
is treated as theft (OAuth 2.0 Security BCP §4.14): the whole family is revoked.
"""

from __future__ import annotations

import hashlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from authlib.oauth2.rfc6749.models import TokenMixin
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
