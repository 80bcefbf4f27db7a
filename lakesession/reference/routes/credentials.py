"""Vended credentials: attached to table loads and served by ``GET …/tables/{table}/credentials``.

Vending happens only when the client asks (``X-Iceberg-Access-Delegation:
vended-credentials``) and the warehouse is on S3, ADLS or GCS (``cloudvending``); the mode follows the
principal's privilege: TABLE_WRITE_DATA → read-write, TABLE_READ_DATA →
read-only, otherwise nothing.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from ..._wire.cloudkeys import READ_ONLY_ACCESS, READ_WRITE_ACCESS, STORAGE_ACCESS
from ..authz import Privilege as P
from ..authz import Securable
from ..cloudvending import CloudVendor
from ..context import RequestContext, in_context
from ..errors import NoSuchTable
from ..locations import Owner
from ..tablestore import load_result
from ..vending import READ, WRITE
from ..viewsecurity import EffectiveUser, authorize_target
from .common import (
    Namespace,
    check_location,
    check_name,
    check_prefix,
    decode_namespace,
    json_bytes,
    locations_of,
    require_namespace,
    storage_items,
    tables_of,
)

router = APIRouter()

REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"


def table_endpoint(
    ctx: RequestContext,
    ns: Namespace,
    name: str,
    leaf: str,
    referenced_by: str | None = None,
    staged_location: str | None = None,
) -> str:
    """``v1/{prefix}/namespaces/{ns}/tables/{table}/{leaf}``, relative to the catalog URI, so a
    gateway in front of the catalog serves it too; ``referenced_by`` (a raw view chain) is kept on it,
    and a staged table's location (``staged-location``): its refresh comes before the table exists."""
    sep = ctx.services.settings.namespace_separator
    ns_part = sep.join(quote(level, safe="") for level in ns)
    path = f"v1/{ctx.services.settings.catalog_name}/namespaces/{ns_part}/tables/{quote(name, safe='')}/{leaf}"
    query = [f"referenced-by={referenced_by}"] if referenced_by else []
    query += [f"staged-location={quote(staged_location, safe='')}"] if staged_location else []
    return path + ("?" + "&".join(query) if query else "")


def vend(
    ctx: RequestContext,
    ns: Namespace,
    name: str,
    location: str | None,
    *,
    action: str,
    principal_name: str | None = None,
    detail: dict[str, Any] | None = None,
    referenced_by: str | None = None,
    staged: bool = False,
) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """(table config, storage-credentials) for this caller; empty when nothing is to be vended.

    ``principal_name`` (the user in effect of a view chain) picks the mode instead of the caller;
    ``detail`` is added to the issuance audit record (delegated, chain); ``referenced_by`` (the raw
    chain the load came through) is kept on the refresh endpoint, so refreshes are authorized
    through the same chain."""
    vendor = ctx.services.vendor
    if vendor is None or not location or not _vends_for(vendor, location):
        return {}, []
    sec = Securable.table(ns, name)
    who = principal_name or ctx.principal.name
    if not referenced_by and ctx.allowed_for(who, P.TABLE_WRITE_DATA, sec):  # through a view chain: read only
        mode = WRITE
    elif ctx.allowed_for(who, P.TABLE_READ_DATA, sec):
        mode = READ
    else:
        return {}, []
    cred, cache_hit = vendor.vend(ctx.principal.name, str(sec), location, mode)
    ctx.audit(
        action,
        sec,
        "issued",
        {
            "mode": mode,
            "expires_at": round(cred.expires_at, 3),
            "cache_hit": cache_hit,
            "prefix": cred.prefix,
            **(detail or {}),
        },
    )
    endpoint = table_endpoint(ctx, ns, name, "credentials", referenced_by, location if staged else None)
    if isinstance(vendor, CloudVendor):
        config = vendor.table_config(cred, endpoint)
    else:
        config = {**cred.config(vendor.s3), REFRESH_ENDPOINT: endpoint}
    config[STORAGE_ACCESS] = READ_WRITE_ACCESS if mode == WRITE else READ_ONLY_ACCESS  # clients refuse early
    return config, [{"prefix": cred.prefix, "config": config}]


def _vends_for(vendor: Any, location: str) -> bool:
    if isinstance(vendor, CloudVendor):
        return vendor.handles(location)
    return location.startswith(("s3://", "s3a://", "s3n://"))


def signing_config(
    ctx: RequestContext,
    ns: Namespace,
    name: str,
    location: str | None,
    *,
    principal_name: str | None = None,
    referenced_by: str | None = None,
) -> dict[str, str]:
    """Config that tells engines to have each S3 request signed by the catalog (no credentials at all).

    Through a view chain (``referenced_by``), the user in effect (``principal_name``) decides, and the
    signer endpoint keeps the chain so that every signature is authorized through it."""
    vendor = ctx.services.vendor
    who = principal_name or ctx.principal.name
    if (
        getattr(vendor, "s3", None) is None
        or not location
        or not ctx.allowed_for(who, P.TABLE_READ_DATA, Securable.table(ns, name))
    ):
        return {}
    s3 = vendor.s3
    endpoint = table_endpoint(ctx, ns, name, "sign", referenced_by)
    cfg = {
        "s3.remote-signing-enabled": "true",
        "s3.signer.uri": ctx.services.settings.base_url,
        "s3.signer.endpoint": endpoint,
        **s3.client_config(),
    }
    return cfg


def table_result(
    ctx: RequestContext,
    ns: Namespace,
    name: str,
    metadata_location: str | None,
    raw: bytes,
    location: str | None,
    action: str,
    eff: EffectiveUser | None = None,
    staged: bool = False,
) -> Response:
    """A LoadTableResult, with vended credentials when the caller (or the user in effect of a view
    chain, ``eff``) asked for them and may have them."""
    config: dict[str, str] = {}
    creds: list[dict[str, Any]] = []
    if "vended-credentials" in ctx.delegation:
        config, creds = vend(
            ctx,
            ns,
            name,
            location,
            action=action,
            principal_name=eff.name if eff else None,
            detail=eff.detail() if eff else None,
            referenced_by=eff.referenced_by if eff else None,
            staged=staged,
        )
    elif "remote-signing" in ctx.delegation:
        config = signing_config(
            ctx,
            ns,
            name,
            location,
            principal_name=eff.name if eff else None,
            referenced_by=eff.referenced_by if eff else None,
        )
    return json_bytes(load_result(metadata_location, raw, config, creds))


@router.get("/v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials")
async def load_credentials(
    prefix: str,
    namespace: str,
    table: str,
    request: Request,
    referenced_by: str | None = Query(None, alias="referenced-by"),  # read raw in viewsecurity (%2C)
    staged_location: str | None = Query(None, alias="staged-location", max_length=1000),
) -> Response:
    """Re-authorizes on every call and never reads table metadata (cost independent of history); one
    threadpool hop for the whole request (``context.in_context``)."""
    return await run_in_threadpool(
        in_context, request, lambda ctx: _load_credentials(ctx, request, prefix, namespace, table, staged_location)
    )


def _load_credentials(
    ctx: RequestContext, request: Request, prefix: str, namespace: str, table: str, staged: str | None = None
) -> Response:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    name = check_name("table", table)
    sec = Securable.table(ns, name)
    eff = authorize_target(ctx, request, "load_credentials", P.TABLE_READ_DATA, sec)
    try:
        location = tables_of(ctx).table_location(ns, name)
    except NoSuchTable:
        if not staged or eff.referenced_by:
            raise
        location = _staged_location(ctx, ns, name, staged)
    if ctx.services.vendor is None:
        return json_bytes(b'{"storage-credentials":[]}')
    ctx.delegation = ctx.delegation | {"vended-credentials"}
    _, creds = vend(
        ctx,
        ns,
        name,
        location,
        action="refresh_credentials",
        principal_name=eff.name,
        detail=eff.detail(),
        referenced_by=eff.referenced_by,
    )
    return json_bytes(json.dumps({"storage-credentials": creds}).encode())


def _staged_location(ctx: RequestContext, ns: Namespace, name: str, location: str) -> str:
    """A staged table's (not yet committed) location, checked as ``stage-create`` checked it: the caller
    may still create the table, the location stays inside the warehouse and no other object owns it.
    So a refresh of a staged table's credentials (a CTAS outliving its TTL) grants nothing the
    stage-create did not."""
    ctx.authorize("refresh_staged_credentials", P.TABLE_CREATE, Securable.namespace(ns), detail={"staged": location})
    require_namespace(ctx.services, ns)
    check_location(ctx.services, location)
    locations_of(ctx.services).check(Owner.table(ns, name), storage_items(location, {}))
    return location
