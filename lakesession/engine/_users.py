"""One ``EngineUser`` per authenticated principal: the engine acting for that user on the catalog.

For each user the engine keeps

* ``PresentedToken``: the newest access token the user sent (every gRPC call carries one);
* a ``TokenExchange`` (RFC 8693) of that token at the issuer, with the engine's own client
  credentials: the catalog receives a token whose ``sub`` is the user and whose ``act.sub`` is the
  engine — both names reach its authorization and its audit, and it honours ``referenced-by``
  because the actor is a trusted engine;
* a ``Gateway`` (the client half's loopback catalog proxy) acting with that exchanged token: the
  JVM's Iceberg catalogs of the user's Connect sessions talk to it with its secret, so neither the
  user's token nor the exchanged one ever enters the JVM;
* a pyiceberg catalog with the same identity, for view expansion (``_rewrite``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..gateway import AccessLog, Gateway
from ..identity import TokenSource
from ..identity._base import Token
from ..identity._errors import LoginRequiredError
from ..identity._flows import TokenExchange

__all__ = ["EngineUser", "PresentedToken", "Users"]


class PresentedToken(TokenSource):
    """The newest access token a user presented to the engine (verified by ``_auth`` first)."""

    kind = "presented"

    def __init__(self, token: str) -> None:
        super().__init__()
        self.update(token)

    def update(self, token: str) -> None:
        cur = self._current
        if cur is not None and cur.access_token == token:
            return
        self._install(Token.from_expiry(token, None))

    def _due(self, token: Token, now: float) -> bool:
        return token.expired(now)

    def _obtain(self, current: Token | None) -> Token:
        raise LoginRequiredError(
            "Your access token expired while the engine was working for you; send any request with a fresh "
            "token (lakesession refreshes it for you) and run the query again."
        )


@dataclass
class EngineUser:
    """The engine acting for one principal: identity, gateway, catalog and the Connect sessions it owns."""

    principal: str
    subject: PresentedToken
    identity: TokenExchange
    gateway: Gateway
    access_log: AccessLog
    catalog_uri: str
    warehouse: str | None
    catalog_name: str
    sessions: set[str] = field(default_factory=set)
    queries: int = 0
    last_seen: float = field(default_factory=time.monotonic)
    _catalog: Any = None
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def catalog(self) -> Any:
        """pyiceberg's RestCatalog acting as the engine for this user (view metadata for expansion)."""
        with self.lock:
            if self._catalog is None:
                from ..catalog import rest_catalog

                self._catalog = rest_catalog(
                    f"engine-{self.principal}", self.catalog_uri, self.identity, warehouse=self.warehouse
                )
            return self._catalog

    def close(self) -> None:
        self.gateway.stop()
        http = getattr(self._catalog, "_session", None)
        if http is not None:
            http.close()
        self.identity.close()


@dataclass
class Users:
    """The engine's users, created on their first authenticated call."""

    catalog_uri: str
    token_url: str
    client_id: str
    client_secret: str = field(repr=False)
    warehouse: str | None = None
    catalog_name: str = "lake"
    gateway_host: str = "127.0.0.1"
    gateway_clients: Sequence[str] | None = None
    scope: str | None = None
    audience: str | None = None
    on_create: Callable[[EngineUser], None] | None = None
    _users: dict[str, EngineUser] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, principal: str, token: str) -> EngineUser:
        """The user ``principal`` (created on first call), with ``token`` as the newest presented token."""
        with self._lock:
            user = self._users.get(principal)
            if user is None:
                user = self._users[principal] = self._create(principal, token)
                if self.on_create is not None:
                    self.on_create(user)
        user.subject.update(token)
        user.last_seen = time.monotonic()
        return user

    def _create(self, principal: str, token: str) -> EngineUser:
        subject = PresentedToken(token)
        identity = TokenExchange(
            self.token_url,
            subject,
            self.client_id,
            self.client_secret,
            audience=self.audience,
            scope=self.scope,
        )
        access_log = AccessLog()
        gateway = Gateway(
            self.catalog_uri,
            identity.token,
            invalidate=identity.invalidate,
            host=self.gateway_host,
            access_log=access_log,
            allowed_clients=list(self.gateway_clients) if self.gateway_clients is not None else None,
        ).start()
        return EngineUser(
            principal,
            subject,
            identity,
            gateway,
            access_log,
            self.catalog_uri,
            self.warehouse,
            self.catalog_name,
        )

    def find(self, principal: str) -> EngineUser | None:
        with self._lock:
            return self._users.get(principal)

    def all(self) -> list[EngineUser]:
        with self._lock:
            return list(self._users.values())

    def close(self) -> None:
        with self._lock:
            users, self._users = list(self._users.values()), {}
        for user in users:
            user.close()
