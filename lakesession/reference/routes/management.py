"""Management API: the caller's grants, grant/revoke, principals, roles and the audit log."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Query, Response
from pydantic import BaseModel, Field

from ..authz import IMPLIES, Privilege, Securable
from ..context import RequestContext, get_context
from ..errors import BadRequest, ServiceUnavailable

router = APIRouter(prefix="/management/v1", tags=["management"])

P = Privilege


class GrantBody(BaseModel):
    role: str = Field(min_length=1, max_length=255)
    privilege: str = Field(min_length=1, max_length=64)
    on: str = Field(min_length=1, max_length=1000, description="'catalog', 'namespace NS', 'table NS.T' or 'view NS.V'")


class GrantOut(BaseModel):
    role: str
    privilege: str
    on: str


class SecurableGrants(BaseModel):
    securable: str
    privileges: list[str] = Field(description="Effective privileges, implications expanded")
    granted: list[str] = Field(description="Privileges granted directly on this securable")
    roles: list[str]


class MyGrants(BaseModel):
    principal: str
    type: str
    roles: list[str]
    grants: list[SecurableGrants]


class PrincipalBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    type: Literal["user", "service"] = "user"
    client_id: str | None = Field(default=None, max_length=255)
    client_secret: str | None = Field(default=None, max_length=1024)


class PrincipalOut(BaseModel):
    name: str
    type: str
    client_id: str | None = None
    client_secret: str | None = Field(default=None, description="Returned once, only when the server generated it")


class RoleBody(BaseModel):
    name: str = Field(min_length=1, max_length=255)
    members: list[str] = Field(default_factory=list)


class RoleOut(BaseModel):
    name: str
    members: list[str]


class AuditOut(BaseModel):
    id: int | None
    ts: float
    time: str
    request_id: str
    principal: str
    action: str
    securable: str
    decision: str
    detail: dict[str, Any] | None = None


def _manage(ctx: RequestContext, action: str) -> None:
    ctx.authorize(action, P.CATALOG_MANAGE_ACCESS, Securable.catalog())


@router.get("/me/grants", response_model=MyGrants)
def my_grants(ctx: RequestContext = Depends(get_context, scope="function")) -> MyGrants:
    """The caller's effective privileges per securable (what widgets show as 'my grants')."""
    directory = ctx.services.directory
    from_token = directory.token_access(ctx.roles, ctx.started)
    grants = directory.grants_of(ctx.principal.name, ctx.started) + from_token.grants
    by: dict[Securable, dict[str, set[str]]] = {}
    for g in grants:
        entry = by.setdefault(g.on, {"eff": set(), "granted": set(), "roles": set()})
        entry["eff"] |= {p.value for p in IMPLIES[g.privilege]}
        entry["granted"].add(g.privilege.value)
        entry["roles"].add(g.role)
    roles = sorted(
        {g.role for g in grants}
        | {r for r, m in directory.list_roles().items() if ctx.principal.name in m}
        | from_token.roles
    )
    return MyGrants(
        principal=ctx.principal.name,
        type=ctx.principal.type,
        roles=roles,
        grants=[
            SecurableGrants(
                securable=str(s), privileges=sorted(v["eff"]), granted=sorted(v["granted"]), roles=sorted(v["roles"])
            )
            for s, v in sorted(by.items())
        ],
    )


@router.get("/grants", response_model=list[GrantOut])
def list_grants(
    role: str | None = None, ctx: RequestContext = Depends(get_context, scope="function")
) -> list[GrantOut]:
    _manage(ctx, "list_grants")
    return [GrantOut(**g.as_dict()) for g in ctx.services.directory.list_grants(role)]


@router.post("/grants", response_model=GrantOut, status_code=201)
def add_grant(body: GrantBody, ctx: RequestContext = Depends(get_context, scope="function")) -> GrantOut:
    _manage(ctx, "grant")
    g = ctx.services.directory.grant(body.role, body.privilege, body.on)
    ctx.audit("grant", g.on, "issued", {"role": g.role, "privilege": g.privilege.value})
    return GrantOut(**g.as_dict())


@router.delete("/grants", status_code=204)
def revoke_grant(body: GrantBody, ctx: RequestContext = Depends(get_context, scope="function")) -> Response:
    """204 only when a grant was removed; 404 naming the unknown role, or the grant the role does not hold."""
    _manage(ctx, "revoke")
    ctx.services.directory.revoke(body.role, body.privilege, body.on)
    ctx.audit("revoke", Securable.parse(body.on), "issued", {"role": body.role, "privilege": body.privilege})
    return Response(status_code=204)


@router.get("/principals", response_model=list[PrincipalOut])
def list_principals(ctx: RequestContext = Depends(get_context, scope="function")) -> list[PrincipalOut]:
    _manage(ctx, "list_principals")
    return [
        PrincipalOut(name=p.name, type=p.type, client_id=p.client_id) for p in ctx.services.directory.list_principals()
    ]


@router.post("/principals", response_model=PrincipalOut, status_code=201)
def create_principal(body: PrincipalBody, ctx: RequestContext = Depends(get_context, scope="function")) -> PrincipalOut:
    _manage(ctx, "create_principal")
    generated = None
    secret = body.client_secret
    if secret is None and body.type == "service":
        secret = generated = secrets.token_urlsafe(32)
    p = ctx.services.directory.create_principal(body.name, body.type, body.client_id, secret)
    ctx.audit("create_principal", f"principal {p.name}", "issued")
    return PrincipalOut(name=p.name, type=p.type, client_id=p.client_id, client_secret=generated)


@router.delete("/principals/{name}", status_code=204)
def delete_principal(name: str, ctx: RequestContext = Depends(get_context, scope="function")) -> Response:
    _manage(ctx, "delete_principal")
    ctx.services.directory.delete_principal(name)
    return Response(status_code=204)


@router.get("/roles", response_model=list[RoleOut])
def list_roles(ctx: RequestContext = Depends(get_context, scope="function")) -> list[RoleOut]:
    _manage(ctx, "list_roles")
    return [RoleOut(name=n, members=m) for n, m in ctx.services.directory.list_roles().items()]


@router.post("/roles", response_model=RoleOut, status_code=201)
def create_role(body: RoleBody, ctx: RequestContext = Depends(get_context, scope="function")) -> RoleOut:
    _manage(ctx, "create_role")
    ctx.services.directory.create_role(body.name, body.members)
    return RoleOut(name=body.name, members=sorted(body.members))


@router.delete("/roles/{name}", status_code=204)
def delete_role(name: str, ctx: RequestContext = Depends(get_context, scope="function")) -> Response:
    _manage(ctx, "delete_role")
    ctx.services.directory.delete_role(name)
    return Response(status_code=204)


@router.put("/roles/{name}/members/{principal}", status_code=204)
def add_member(name: str, principal: str, ctx: RequestContext = Depends(get_context, scope="function")) -> Response:
    _manage(ctx, "add_member")
    ctx.services.directory.add_member(name, principal)
    return Response(status_code=204)


@router.delete("/roles/{name}/members/{principal}", status_code=204)
def remove_member(name: str, principal: str, ctx: RequestContext = Depends(get_context, scope="function")) -> Response:
    _manage(ctx, "remove_member")
    ctx.services.directory.remove_member(name, principal)
    return Response(status_code=204)


def parse_since(value: str | None) -> float | None:
    """Epoch seconds or ISO 8601 (``2026-11-25T10:00:00Z``)."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise BadRequest(f"Invalid since={value!r}: use epoch seconds or ISO 8601, e.g. 2026-11-25T10:00:00Z") from None


@router.get("/audit", response_model=list[AuditOut])
def audit_log(
    principal: str | None = None,
    securable: str | None = None,
    since: str | None = None,
    action: str | None = None,
    limit: int = Query(1000, ge=1, le=10_000),
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> list[AuditOut]:
    """Audit records; anyone may read their own, CATALOG_MANAGE_ACCESS reads everyone's."""
    if principal != ctx.principal.name:
        _manage(ctx, "read_audit")
    if securable:
        securable = str(Securable.parse(securable))
    try:
        records = ctx.services.audit.query(
            principal=principal, securable=securable, since=parse_since(since), action=action, limit=limit
        )
    except OverflowError:
        raise ServiceUnavailable("Audit query failed") from None
    return [
        AuditOut(**r.as_dict(), time=datetime.fromtimestamp(r.ts).astimezone().isoformat(timespec="milliseconds"))
        for r in records
    ]
