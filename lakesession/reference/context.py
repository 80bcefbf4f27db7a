"""Per-request context: who is calling, under which request id, and the authorize-and-audit step."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import Request
from pyiceberg.catalog.sql import SqlCatalog

from .audit import AuditLog
from .authz import Privilege, Securable
from .directory import Directory, Principal
from .errors import Forbidden, NotAuthorized
from .settings import ServerSettings

logger = logging.getLogger(__name__)


class TokenVerifier(Protocol):
    """Validates a bearer access token and returns its claims, or raises ``NotAuthorized``."""

    def verify(self, token: str) -> dict[str, Any]: ...


@dataclass
class Services:
    """The long-lived parts every route needs, built once per server."""

    settings: ServerSettings
    directory: Directory
    audit: AuditLog
    catalog: SqlCatalog
    verifier: TokenVerifier
    vendor: Any = None  # vending.CredentialVendor when the warehouse is on S3
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass
class RequestContext:
    principal: Principal
    request_id: str
    claims: dict[str, Any]
    services: Services
    delegation: frozenset[str] = frozenset()  # X-Iceberg-Access-Delegation modes the client accepts

    def allowed(self, privilege: Privilege, target: Securable) -> bool:
        return self.services.directory.is_allowed(self.principal.name, privilege, target)

    def authorize(self, action: str, privilege: Privilege, target: Securable, *, detail: dict[str, Any] | None = None) -> None:
        """Check one privilege, audit the decision, raise 403 (revealing nothing) when denied."""
        ok = self.allowed(privilege, target)
        self.audit(action, target, "allow" if ok else "deny", {"privilege": privilege.value, **(detail or {})})
        if not ok:
            raise Forbidden(f"Principal {self.principal.name!r} is not authorized for {action} on {target} ({privilege.value} required)")

    def authorize_any(self, action: str, privileges: Iterable[Privilege], target: Securable) -> None:
        """Allow when any of ``privileges`` is held (e.g. existence checks)."""
        privileges = list(privileges)
        ok = any(self.allowed(p, target) for p in privileges)
        self.audit(action, target, "allow" if ok else "deny", {"privilege": "|".join(p.value for p in privileges)})
        if not ok:
            raise Forbidden(f"Principal {self.principal.name!r} is not authorized for {action} on {target}")

    def audit(self, action: str, target: Securable | str, decision: str, detail: dict[str, Any] | None = None) -> None:
        self.services.audit.record(
            principal=self.principal.name,
            action=action,
            securable=str(target),
            decision=decision,
            request_id=self.request_id,
            detail=detail,
        )


def request_id_of(request: Request) -> str:
    rid = request.headers.get("x-request-id", "")
    return rid[:64] if rid and rid.isprintable() else uuid.uuid4().hex


def get_context(request: Request) -> RequestContext:
    """FastAPI dependency: authenticate the bearer token and build the request context."""
    services: Services = request.app.state.services
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise NotAuthorized()
    claims = services.verifier.verify(token.strip())
    name = claims.get(services.settings.principal_claim)
    if not isinstance(name, str) or not name:
        raise NotAuthorized(f"Token has no {services.settings.principal_claim!r} claim naming a principal")
    principal = services.directory.get_principal(name) or Principal(name, "user")
    delegation = frozenset(
        m.strip().lower() for m in request.headers.get("x-iceberg-access-delegation", "").split(",") if m.strip()
    )
    return RequestContext(principal, request_id_of(request), claims, services, delegation)
