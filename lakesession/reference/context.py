"""Per-request context: who is calling, under which request id, and the authorize-and-audit step."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from fastapi import Request

from . import timing
from .admission import step_aside
from .audit import AuditLog
from .authz import Privilege, Securable
from .claims import principal_name, token_roles
from .directory import Directory, Principal
from .errors import Forbidden, NotAuthorized
from .refby import refuse_chained_write
from .settings import ServerSettings
from .timing import mark_started
from .trust import acting_engine

if TYPE_CHECKING:
    from pyiceberg.catalog.sql import SqlCatalog

logger = logging.getLogger(__name__)

T = TypeVar("T")


REVOKED = "Token rejected: its sign-in session was revoked"


class TokenVerifier(Protocol):
    """Validates a bearer access token and returns its claims, or raises ``NotAuthorized``."""

    def verify(self, token: str) -> dict[str, Any]: ...


class RevocableVerifier(TokenVerifier, Protocol):
    """A verifier whose tokens die with their sign-in session (``sid``) before they expire."""

    def revocation_generation(self) -> object:
        """Changes whenever any sign-in session is revoked (read from the shared database)."""
        ...

    def session_revoked(self, sid: str) -> bool: ...


@dataclass
class _Verified:
    until: float
    claims: dict[str, Any]
    generation: object


class CachingVerifier:
    """Remembers verified tokens until shortly before they expire (verification runs on every request).

    A cached token of a sign-in session (``sid``) is still refused on the next request once that session
    is revoked, on every replica: the inner verifier's revocation generation (one small query shared by
    all tokens, re-read at most every ``generation_ttl`` seconds, at once after a local revocation) is
    compared with the one seen when the token was cached; only when it moved is the session checked (an inner
    verifier with ``claims_revoked``, an external issuer's back-channel logouts, is asked about the claims).
    """

    def __init__(
        self, inner: TokenVerifier, max_age: float = 60.0, max_entries: int = 10_000, generation_ttl: float = 1.0
    ):
        self.inner = inner
        self.max_age = max_age
        self.max_entries = max_entries
        self.generation_ttl = generation_ttl
        self._cache: dict[str, _Verified] = {}
        self._generation: tuple[float, object] | None = None  # (read at, value)
        self._lock = threading.Lock()

    def forget_generation(self) -> None:
        """Re-read the revocation generation on the next request (this process just revoked something)."""
        with self._lock:
            self._generation = None

    def _current_generation(self, now: float) -> object:
        inner = self.inner
        if not hasattr(inner, "revocation_generation"):
            return None
        with self._lock:
            cached = self._generation
        if cached is not None and now - cached[0] < self.generation_ttl:
            return cached[1]
        value = inner.revocation_generation()
        with self._lock:
            self._generation = (now, value)
        return value

    def known(self, token: str) -> dict[str, Any] | None:
        """The claims of ``token`` if it was verified recently and has not expired, else None: no check, no I/O.

        For scheduling only (``admission``: whose share a request is queued in); never for authorization, which
        ``verify`` does (revocation included) when the request runs.
        """
        hit = self._cache.get(token)
        return hit.claims if hit is not None and time.time() < hit.until else None

    def verify(self, token: str) -> dict[str, Any]:
        now = time.time()
        hit = self._cache.get(token)
        if hit is not None and now < hit.until:
            sid = hit.claims.get("sid")
            by_claims = getattr(self.inner, "claims_revoked", None)  # an external issuer's logouts: sid or sub
            by_sid = getattr(self.inner, "session_revoked", None)
            if by_claims is None and (not isinstance(sid, str) or by_sid is None):
                return hit.claims
            generation = self._current_generation(now)
            if generation == hit.generation:
                return hit.claims
            revoked = by_claims(hit.claims) if by_claims is not None else by_sid is not None and by_sid(sid)
            if revoked:
                self._cache.pop(token, None)
                raise NotAuthorized(getattr(self.inner, "revoked_message", REVOKED))
            hit.generation = generation
            return hit.claims
        generation = self._current_generation(now)  # read before verifying: a revocation racing it is seen next time
        claims = self.inner.verify(token)
        exp = claims.get("exp")
        until = min(now + self.max_age, float(exp) if isinstance(exp, (int, float)) else now)
        if len(self._cache) >= self.max_entries:
            self._cache.clear()
        self._cache[token] = _Verified(until, claims, generation)
        return claims


class Deferred:
    """A value built on first use, once (``Services.catalog``: building it imports pyiceberg, ~0.25 CPU-s)."""

    def __init__(self, build: Callable[[], Any]):
        self._build: Callable[[], Any] | None = build
        self._value: Any = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        with self._lock:
            if self._build is not None:
                self._value, self._build = self._build(), None
            return self._value

    @property
    def built(self) -> bool:
        return self._build is None


class _BuiltOnFirstUse:
    """A dataclass field that accepts a value or a :class:`Deferred` and always reads as the value."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._attr = f"_{name}"

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self._attr)  # no default: a required field
        value = obj.__dict__[self._attr]
        return value.get() if isinstance(value, Deferred) else value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self._attr] = value


@dataclass
class Services:
    """The long-lived parts every route needs, built once per server.

    ``catalog`` may be given as a :class:`Deferred`: the embedded catalog builds pyiceberg's SqlCatalog
    at the first request that needs it, not at start.
    """

    settings: ServerSettings
    directory: Directory
    audit: AuditLog
    if TYPE_CHECKING:
        catalog: SqlCatalog
    else:
        catalog: SqlCatalog = _BuiltOnFirstUse()  # a value, or a Deferred built at first read
    verifier: TokenVerifier
    vendor: Any = None  # vending.CredentialVendor (S3), cloudvending.AdlsVendor / GcsVendor
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestContext:
    principal: Principal
    request_id: str
    claims: dict[str, Any]
    services: Services
    delegation: frozenset[str] = frozenset()  # X-Iceberg-Access-Delegation modes the client accepts
    pending: list[dict[str, Any]] = field(default_factory=list)  # audit records, written once per request
    # the shared grants version is read once per request, after this moment (cached grants are reused while it
    # holds): a revocation on any replica holds from the next request on
    started: float = field(default_factory=time.monotonic)
    # catalog roles the token's ``roles_claim`` names (IdP groups): added to the principal's own, this request only
    roles: frozenset[str] = frozenset()

    def allowed(self, privilege: Privilege, target: Securable) -> bool:
        return self.services.directory.is_allowed(self.principal.name, privilege, target, self.started, self.roles)

    def allowed_for(self, principal_name: str, privilege: Privilege, target: Securable) -> bool:
        """``allowed`` for another principal (the user in effect of a DEFINER view chain); the token's roles
        count only when that principal is the caller (an owner's grants are the catalog's alone)."""
        roles = self.roles if principal_name == self.principal.name else frozenset()
        return self.services.directory.is_allowed(principal_name, privilege, target, self.started, roles)

    def authorize(
        self, action: str, privilege: Privilege, target: Securable, *, detail: dict[str, Any] | None = None
    ) -> None:
        """Check one privilege, audit the decision, raise 403 (revealing nothing) when denied."""
        ok = self.allowed(privilege, target)
        self.audit(action, target, "allow" if ok else "deny", {"privilege": privilege.value, **(detail or {})})
        if not ok:
            self.flush()
            raise Forbidden(
                f"Principal {self.principal.name!r} is not authorized for {action} on {target} ({privilege.value} required)"
            )

    def authorize_any(self, action: str, privileges: Iterable[Privilege], target: Securable) -> None:
        """Allow when any of ``privileges`` is held (e.g. existence checks)."""
        privileges = list(privileges)
        ok = any(self.allowed(p, target) for p in privileges)
        self.audit(action, target, "allow" if ok else "deny", {"privilege": "|".join(p.value for p in privileges)})
        if not ok:
            self.flush()
            raise Forbidden(f"Principal {self.principal.name!r} is not authorized for {action} on {target}")

    def audit(self, action: str, target: Securable | str, decision: str, detail: dict[str, Any] | None = None) -> None:
        """Queue an audit record; the request's records are written in one transaction before it answers.

        A token obtained by token exchange (RFC 8693) names its actor in ``act``; the record keeps it.
        """
        actor = self.actor
        if actor is not None:
            detail = {**(detail or {}), "actor": actor}
        self.pending.append(
            {
                "principal": self.principal.name,
                "action": action,
                "securable": str(target),
                "decision": decision,
                "request_id": self.request_id,
                "detail": detail,
            }
        )

    @property
    def actor(self) -> str | None:
        """Who acts for the token's subject: ``act.sub`` (an exchanged token), or the engine client a trusted-engine
        ``authorized_party`` rule recognises in ``azp`` (Keycloak's exchange carries no ``act``)."""
        return acting_engine(self.claims, self.services.settings, self.principal.name)

    def flush(self) -> None:
        if self.pending:
            records, self.pending = self.pending, []
            self.services.audit.record_many(records)


def request_id_of(request: Request) -> str:
    rid = request.headers.get("x-request-id", "")
    return rid[:64] if rid and rid.isprintable() else uuid.uuid4().hex


@contextmanager
def request_context(request: Request) -> Iterator[RequestContext]:
    """Authenticate, build the context, and write its audit records before the response is sent —
    whatever the outcome. Used by ``get_context`` and, in one threadpool call, by the hot read routes."""
    mark_started(request.scope)
    services: Services = request.app.state.services
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthorized()
    claims = services.verifier.verify(token.strip())
    settings = services.settings
    name = principal_name(claims, settings.principal_claim)
    roles = token_roles(claims, settings.roles_claim, settings.roles_claim_prefix)
    started = time.monotonic()  # the request's reads of the grants version begin after this (``fresh_since``)
    principal = services.directory.get_principal(name, started) or Principal(name, "user")
    delegation = frozenset(
        m.strip().lower() for m in request.headers.get("x-iceberg-access-delegation", "").split(",") if m.strip()
    )
    refuse_chained_write(request)  # view chains grant reads only (commits, drops... with referenced-by: 403)
    ctx = RequestContext(principal, request_id_of(request), claims, services, delegation, started=started, roles=roles)
    try:
        yield ctx
    finally:
        t0 = time.perf_counter()
        if ctx.pending:
            step_aside(request.scope)  # waiting for the audit commit holds no admission slot
        ctx.flush()
        timing.add(request.scope, "audit", time.perf_counter() - t0)


def get_context(request: Request) -> Iterator[RequestContext]:
    """FastAPI dependency (``scope="function"``): ``request_context`` around the route."""
    with request_context(request) as ctx:
        yield ctx


def in_context(request: Request, route: Callable[[RequestContext], T]) -> T:
    """``route`` inside ``request_context``, all in the calling thread.

    Why: as a dependency, the context is entered, the route run and the context left in three
    threadpool hops, and each hop waits for the GIL again behind busy threads (commits): under 50
    sessions that waiting was most of a loadTable's tail. An ``async`` route awaiting this in one
    ``run_in_threadpool`` call makes it one hop."""
    with request_context(request) as ctx:
        return route(ctx)
