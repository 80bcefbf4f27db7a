"""Remote signing endpoints: per-table ``…/tables/{table}/sign`` and the legacy ``/v1/aws/s3/sign``."""

from __future__ import annotations

import json

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field

from ..authz import Privilege as P
from ..authz import Securable
from ..context import RequestContext, get_context
from ..errors import BadRequest, Forbidden, NoSuchTable
from ..locations import Owner
from ..refby import raw_param
from ..signing import S3Target, parse_target, sign
from ..viewsecurity import authorize_caller, authorize_target, caller_trusted, parse_referenced_by
from .common import Namespace, check_name, check_prefix, decode_namespace, parse_body
from .namespaces import raw_body

router = APIRouter()


class SignRequest(BaseModel):
    region: str
    uri: str
    method: str
    headers: dict[str, list[str]] = Field(default_factory=dict)
    properties: dict[str, str] = Field(default_factory=dict)
    body: str | None = None
    provider: str | None = None


def _signed(
    ctx: RequestContext,
    req: SignRequest,
    target: S3Target,
    ns: Namespace,
    name: str,
    location: str,
    *,
    authorized: bool = False,
) -> Response:
    """Sign after checking the path and (unless a view chain already ``authorized`` it) the privilege."""
    s3 = ctx.services.vendor.s3
    sec = Securable.table(ns, name)
    privilege = P.TABLE_WRITE_DATA if target.write else P.TABLE_READ_DATA
    detail = {
        "method": req.method.upper(),
        "operation": target.operation,
        "object": f"s3://{target.bucket}/{target.key}",
        "mode": "write" if target.write else "read",
    }
    if not target.within(location):
        ctx.audit("sign_request", sec, "deny", {**detail, "reason": "outside table location"})
        raise Forbidden(f"Refusing to sign: s3://{target.bucket}/{target.key} is outside the location of {sec}")
    if not authorized:
        ctx.authorize("sign_request", privilege, sec, detail=detail)
    headers = sign(req.method, req.uri, req.headers, req.region, s3, req.body, ctx.services.vendor.own_credentials())
    cache = "private" if req.method.upper() in ("GET", "HEAD") else "no-cache"
    body = json.dumps({"uri": req.uri, "headers": headers}).encode()
    return Response(body, media_type="application/json", headers={"Cache-Control": cache})


def _target(ctx: RequestContext, req: SignRequest, what: Securable | str) -> S3Target:
    """The allowlisted S3 operation of ``req``; a refusal is audited (and answered 403) here."""
    try:
        return parse_target(req.method, req.uri, req.headers, ctx.services.vendor.s3)
    except Forbidden as e:
        ctx.audit("sign_request", what, "deny", {"method": req.method.upper()[:16], "reason": e.message})
        raise


def _staged_location(ctx: RequestContext, ns: Namespace, name: str) -> str:
    """Where a staged create of ``ns.name`` writes (CTAS, REPLACE … AS SELECT: the table exists only at
    its create commit): its default location, signable for whoever may create tables in ``ns`` — what
    the staged create itself would vend — unless another object owns any of it."""
    from .common import locations_of, namespace_home, storage_items
    from .namespaces import NamespaceStore

    ctx.authorize("sign_request", P.TABLE_CREATE, Securable.namespace(ns))
    props = NamespaceStore(ctx.services).properties(ns)
    if props is None:
        raise NoSuchTable(f"Table does not exist: {'.'.join((*ns, name))}")
    location = f"{namespace_home(ctx.services, ns, props).rstrip('/')}/{name}"
    locations_of(ctx.services).check(Owner.table(ns, name), storage_items(location, None))
    return location


def _require_signing(ctx: RequestContext) -> None:
    if getattr(ctx.services.vendor, "s3", None) is None:  # ADLS and GCS vendors sign nothing: S3 only
        raise BadRequest(
            "Remote signing is S3-only and needs an S3 warehouse; this catalog's warehouse is not on S3 "
            "(use X-Iceberg-Access-Delegation: vended-credentials)"
        )


@router.post("/v1/{prefix}/namespaces/{namespace}/tables/{table}/sign")
def sign_table_request(
    prefix: str,
    namespace: str,
    table: str,
    request: Request,
    body: bytes = Depends(raw_body),
    referenced_by: str | None = Query(None, alias="referenced-by"),  # read raw in viewsecurity
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> Response:
    from .common import tables_of

    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    name = check_name("table", table)
    sec = Securable.table(ns, name)
    raw = raw_param(request)
    chained = bool(raw and raw.strip()) and caller_trusted(ctx)
    if chained:  # a chain too long (or malformed) answers 400 before any lookup
        parse_referenced_by(raw or "", ctx.services.settings.namespace_separator)
    else:  # a referenced-by from an untrusted caller is ignored (and a denial says so)
        authorize_caller(ctx, "sign_request", P.TABLE_READ_DATA, sec, chain_ignored=bool(raw and raw.strip()))
    _require_signing(ctx)
    req = parse_body(SignRequest, body)
    target = _target(ctx, req, sec)
    if chained:  # a trusted engine reading through a view chain: the user in effect decides (audited per step)
        authorize_target(ctx, request, "sign_request", P.TABLE_WRITE_DATA if target.write else P.TABLE_READ_DATA, sec)
    try:
        location = tables_of(ctx).table_location(ns, name)
    except NoSuchTable:
        if chained:
            raise
        location = _staged_location(ctx, ns, name)  # authorized there (TABLE_CREATE on the namespace)
        return _signed(ctx, req, target, ns, name, location, authorized=True)
    return _signed(ctx, req, target, ns, name, location, authorized=chained)


@router.post("/v1/aws/s3/sign")
def sign_s3_request(
    body: bytes = Depends(raw_body), ctx: RequestContext = Depends(get_context, scope="function")
) -> Response:
    """Legacy signer: the table is the one whose location contains the object (longest match)."""
    from .common import tables_of

    _require_signing(ctx)
    req = parse_body(SignRequest, body)
    target = _target(ctx, req, "s3 (legacy signer)")
    candidates = [(ns, name, loc) for ns, name, loc in tables_of(ctx).current_locations() if target.within(loc)]
    if not candidates:
        ctx.audit("sign_request", f"s3://{target.bucket}/{target.key}", "deny", {"reason": "no table at this location"})
        raise Forbidden(f"Refusing to sign: s3://{target.bucket}/{target.key} belongs to no table of this catalog")
    ns, name, loc = max(candidates, key=lambda c: len(c[2]))
    check_name("table", name)
    return _signed(ctx, req, target, ns, name, loc)
