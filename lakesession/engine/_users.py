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

State is bounded (``Users``): a user exists only once the issuer exchanged their token (a verified
``sub`` the issuer refuses costs no gateway); idle users are evicted after ``idle_timeout`` with their
gateway and Connect sessions (``on_evict``); a refused re-exchange (a revoked or deleted principal)
evicts at once; ``max_users`` and ``max_sessions`` refuse the next one in one line (``Exhausted``).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import IdentityError, TokenRefreshError
from ..gateway import AccessLog, Gateway
from ..identity import TokenSource
from ..identity._base import Token
from ..identity._errors import LoginRequiredError, _Transient
from ..identity._flows import TokenExchange
from ._limits import CatalogUnavailable, ExchangeRefused, Exhausted, SessionEnded, trim_memory

__all__ = [
    "CatalogUnavailable",
    "EngineUser",
    "ExchangeRefused",
    "Exhausted",
    "PresentedToken",
    "SessionEnded",
    "Users",
]

logger = logging.getLogger("lakesession.engine")

#: a user's token is exchanged again (proving the issuer still acts for them) at most this often,
#: and on each new Connect session
RECHECK_SECONDS = 30.0


class PresentedToken(TokenSource):
    """The newest access token a user presented to the engine (verified by ``_auth`` first)."""

    kind = "presented"

    def __init__(self, token: str) -> None:
        super().__init__()
        self._refused = False
        self.update(token)

    def update(self, token: str) -> None:
        cur = self._current
        if cur is not None and cur.access_token == token:
            return
        self._refused = False
        self._install(Token.from_expiry(token, None))

    def invalidate(self) -> None:
        """The issuer refused to exchange this token (``TokenExchange`` says so before it tries once more)."""
        self._refused = True
        super().invalidate()

    def _due(self, token: Token, now: float) -> bool:
        return token.expired(now)

    def _obtain(self, current: Token | None) -> Token:
        if self._refused:
            raise LoginRequiredError(
                "The issuer refused to exchange your access token (a revoked or ended sign-in session?); log in again."
            )
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
    checked: float = field(default_factory=time.monotonic)  # the last successful exchange
    active: int = 0  # calls in flight (a running query is never idle)
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


def _exchange(identity: TokenExchange, where: str) -> None:
    """One exchange now; ``ExchangeRefused`` / ``CatalogUnavailable`` say why it failed."""
    try:
        identity.token()
    except TokenRefreshError as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise CatalogUnavailable(
            f"the catalog's issuer at {where} is unreachable ({first}); try again once it is back"
        ) from None
    except IdentityError as exc:
        raise ExchangeRefused(str(exc).splitlines()[0]) from None


@dataclass
class Users:
    """The engine's users, created on their first authenticated call once the issuer exchanged their token."""

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
    on_evict: Callable[[EngineUser, str], None] | None = None  # (user, why): release its Connect sessions
    idle_timeout: float | None = None
    max_users: int | None = None
    max_sessions: int | None = None
    recheck: float = RECHECK_SECONDS
    evicted: int = 0
    _users: dict[str, EngineUser] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _creating: threading.Lock = field(default_factory=threading.Lock)
    _reaper: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _local: threading.local = field(default_factory=threading.local)  # the user the current call holds
    _ssl: Any = None  # one TLS context for every user's exchange client (building one costs ~70 ms)

    def get(self, principal: str, token: str) -> EngineUser:
        """The user ``principal`` (created on first call), with ``token`` as the newest presented token.

        A new user costs one exchange before anything is started; ``Exhausted`` past ``max_users``.
        """
        with self._lock:  # last_seen under the lock: the reaper re-checks it there before evicting
            user = self._users.get(principal)
            if user is not None:
                user.last_seen = time.monotonic()
        if user is None:
            with self._creating:  # one creation at a time: the cap holds, and a burst cannot start N gateways
                with self._lock:
                    user = self._users.get(principal)
                    full = user is None and self.max_users is not None and len(self._users) >= self.max_users
                if full:
                    raise Exhausted(
                        "a new user",
                        "max-users",
                        f"the engine serves at most {self.max_users} users at once (max_users); try again when one "
                        "has been idle for idle_timeout, or ask its operator to raise max_users",
                    )
                if user is None:
                    user = self._create(principal, token)
                    with self._lock:
                        self._users[principal] = user
                    if self.on_create is not None:
                        self.on_create(user)
        user.subject.update(token)
        user.last_seen = time.monotonic()
        return user

    def check(self, user: EngineUser, *, force: bool = False) -> None:
        """Exchange ``user``'s token again if due (or ``force``): a refusal evicts the user at once."""
        now = time.monotonic()
        if now - user.checked < (1.0 if force else self.recheck):  # 1 s: the exchange that created the user
            return
        try:
            # one exchange beside the current token: an issuer that is only unreachable changes nothing (the
            # current exchanged token stays in use until it expires), a refusal evicts
            fresh = user.identity._obtain(None)
        except _Transient as exc:
            logger.info("could not re-check %r at the issuer (%s); keeping the current token", user.principal, exc)
            return
        except IdentityError as exc:
            self.evict(user, f"the issuer refused to act for them: {str(exc).splitlines()[0]}")
            raise ExchangeRefused(str(exc).splitlines()[0]) from None
        user.identity._install(fresh)
        user.checked = now

    def open_session(self, user: EngineUser, session_id: str) -> None:
        """Count ``session_id`` as ``user``'s; ``Exhausted`` past ``max_sessions``."""
        with user.lock:
            if session_id in user.sessions:
                return
            if self.max_sessions is not None and len(user.sessions) >= self.max_sessions:
                raise Exhausted(
                    "a new session",
                    "max-sessions-per-user",
                    f"you already have {len(user.sessions)} engine sessions, the most one user may hold "
                    "(max_sessions_per_user); close one (spark.stop()) or ask the operator to raise the limit",
                )
            user.sessions.add(session_id)

    def close_session(self, user: EngineUser, session_id: str) -> None:
        with user.lock:
            user.sessions.discard(session_id)

    def hold(self, user: EngineUser) -> None:
        """``user`` has a call in flight (on this thread) until ``tracked`` sees it end."""
        with user.lock:
            user.active += 1
            user.last_seen = time.monotonic()
        self._local.user = user

    def _done(self) -> None:
        user, self._local.user = getattr(self._local, "user", None), None
        if user is not None:
            with user.lock:
                user.active = max(0, user.active - 1)
                user.last_seen = time.monotonic()  # idle time counts from the end of the last call

    def tracked(self, method: Callable[..., Any], streaming: bool) -> Callable[..., Any]:
        """A gRPC handler releasing what ``hold`` held when the call ends (gRPC runs a stream on one thread)."""
        if streaming:

            @functools.wraps(method)
            def stream(raw: bytes, context: Any) -> Iterator[bytes]:
                try:
                    yield from method(raw, context)
                finally:
                    self._done()

            return stream

        @functools.wraps(method)
        def unary(raw: bytes, context: Any) -> Any:
            try:
                return method(raw, context)
            finally:
                self._done()

        return unary

    def evict(self, user: EngineUser, why: str, *, idle_for: float | None = None) -> bool:
        """Forget ``user``: its Connect sessions (``on_evict``), gateway and connections. False if already gone,
        or (``idle_for``) no longer idle: a call that came in meanwhile keeps the user."""
        with self._lock:
            if self._users.get(user.principal) is not user:
                return False
            if idle_for is not None and (user.active or time.monotonic() - user.last_seen < idle_for):
                return False
            del self._users[user.principal]
            self.evicted += 1
        logger.info("evicted user %r (%s; %d sessions)", user.principal, why, len(user.sessions))
        try:
            if self.on_evict is not None:
                self.on_evict(user, why)
        finally:
            user.close()
        return True

    def evict_idle(self, now: float | None = None) -> list[str]:
        """Evict every user idle (no call in flight) for ``idle_timeout`` seconds; their names."""
        if self.idle_timeout is None:
            return []
        now = time.monotonic() if now is None else now
        idle = [u for u in self.all() if u.active == 0 and now - u.last_seen >= self.idle_timeout]
        why = f"idle for {self.idle_timeout:g} s"
        gone = [u.principal for u in idle if self.evict(u, why, idle_for=self.idle_timeout)]
        if gone:
            trim_memory()
        return gone

    def start_reaper(self) -> None:
        """A daemon thread evicting idle users (a quarter of ``idle_timeout`` late at most)."""
        if self.idle_timeout is None or self._reaper is not None:
            return
        period = max(0.2, min(self.idle_timeout / 4, 30.0))

        def run() -> None:
            while not self._stop.wait(period):
                try:
                    self.evict_idle()
                except Exception:  # never let the reaper die: the next round tries again
                    logger.exception("evicting idle users failed")

        self._reaper = threading.Thread(target=run, name="lakesession-engine-reaper", daemon=True)
        self._reaper.start()

    def _create(self, principal: str, token: str) -> EngineUser:
        subject = PresentedToken(token)
        if self._ssl is None:
            import ssl

            import certifi

            self._ssl = ssl.create_default_context(cafile=certifi.where())  # httpx's default, built once
        identity = TokenExchange(
            self.token_url,
            subject,
            self.client_id,
            self.client_secret,
            audience=self.audience,
            scope=self.scope,
            http_options={"verify": self._ssl},
        )
        try:
            _exchange(identity, self.token_url)  # before any gateway: the issuer must act for this principal
        except Exception:
            identity.close()
            raise
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
        self._stop.set()
        with self._lock:
            users, self._users = list(self._users.values()), {}
        for user in users:
            user.close()
