"""Credentials for a path, and registered storage locations (issue #22, ``/briefs/contract22.md``).

``GET /v1/{prefix}/lakesession/location-credentials?location=s3://b/k&mode=read|write``: readers that
bypass Iceberg's FileIO (Comet's native scans, raw ``s3a://`` Parquet, ``Session.filesystem``) ask for
credentials by path. A path inside a table's storage is decided by the table's grants (read:
``TABLE_READ_DATA``, write: ``TABLE_WRITE_DATA``), inside a registered location by ``LOCATION_READ`` /
``LOCATION_WRITE``; anything else is a 403 naming only the path (never which object owns it), except a
write where the caller holds the read grant: that 403 names the object and both grants. The
credentials' session policy covers exactly the owning prefix, which the answer names.

``location`` may be repeated (at most ``MAX_LOCATIONS``, each at most ``MAX_LOCATION_CHARS`` characters): each
one is checked exactly as above (the first refused one is the 403, and nothing is vended); the owning
prefixes are split into as few groups as STS's policy size bounds allow (``policysize.split_union``: 2,048
plain characters, and the packed estimate), one credential is vended per group whose session policy covers
exactly that group (``prefixes_session_policy``), and the answer holds one ``storage-credentials`` entry per
owning prefix carrying its group's config (entries of one group share a key). Hadoop S3A takes one
credential provider per bucket: the session's gateway asks this way for all its prefixes in a bucket and
its JVM side picks the entry per request by key prefix. A location whose own policy cannot fit is a 400.

``GET /v1/{prefix}/lakesession/locations``: the registered locations the caller holds a grant on.
``/management/v1/locations``: admins register (POST), list (GET) and unregister (DELETE) locations.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from .. import storage_locations
from ..authz import Privilege as P
from ..authz import Securable, normalize_location
from ..context import RequestContext, get_context, in_context
from ..errors import BadRequest, Forbidden
from ..locations import LOCATION, TABLE
from ..storage.policysize import PolicyTooLarge, split_union
from ..vending import READ, WRITE
from .common import check_prefix, json_bytes, locations_of

router = APIRouter()

PRIVILEGE = {(TABLE, READ): P.TABLE_READ_DATA, (TABLE, WRITE): P.TABLE_WRITE_DATA}
PRIVILEGE |= {(LOCATION, READ): P.LOCATION_READ, (LOCATION, WRITE): P.LOCATION_WRITE}


MAX_LOCATIONS = 64  # ``location`` repeated: credentials for the union, bounded
MAX_LOCATION_CHARS = 2000  # each ``location``


@router.get("/v1/{prefix}/lakesession/location-credentials")
async def location_credentials(
    prefix: str,
    request: Request,
    # no max_length here: on a list FastAPI bounds the number of items, not each one (the #40 B4 regression)
    location: list[str] = Query(...),
    mode: str = Query(READ, max_length=16),
) -> Response:
    """Re-authorized on every call, like a table's ``/credentials``; one threadpool hop."""
    if len(location) > MAX_LOCATIONS:
        raise BadRequest(f"At most {MAX_LOCATIONS} location parameters per request, got {len(location)}")
    for one in location:
        if len(one) > MAX_LOCATION_CHARS:
            raise BadRequest(
                f"Invalid location: at most {MAX_LOCATION_CHARS} characters per location parameter, got {len(one)}"
            )
    return await run_in_threadpool(in_context, request, lambda ctx: _location_credentials(ctx, prefix, location, mode))


def _authorize(ctx: RequestContext, location: str, mode: str) -> tuple[str, Securable]:
    """(owning prefix, its securable) for one requested location, or the 403 that names it (audited either way)."""
    if not location.startswith(storage_locations.LOCATION_SCHEMES) or "/../" in f"{location}/":
        raise BadRequest(f"Invalid location {location!r}: expected s3://bucket/path")
    path = normalize_location(location)
    found = locations_of(ctx.services).owner_of(path)
    sec: Securable | None = None
    if found is not None and found[1].kind == TABLE:
        sec = Securable.table(found[1].namespace, found[1].name)
    elif found is not None and found[1].kind == LOCATION:
        sec = Securable.location(found[0])
    target = sec if sec is not None else f"location {path}"
    privilege = PRIVILEGE.get((sec.kind, mode)) if sec is not None else None
    ok = found is not None and privilege is not None and ctx.allowed(privilege, sec)  # type: ignore[arg-type]
    detail: dict[str, Any] = {"path": location, "mode": mode}
    ctx.audit("location_credentials", target, "allow" if ok else "deny", detail)
    if not ok and sec is not None and mode == WRITE and ctx.allowed(PRIVILEGE[(sec.kind, READ)], sec):
        ctx.flush()  # the caller may read it: naming the object and the grant it holds reveals nothing new
        raise Forbidden(
            f"Principal {ctx.principal.name!r} holds {PRIVILEGE[(sec.kind, READ)].value} on {sec}; writing "
            f"{location} needs {PRIVILEGE[(sec.kind, WRITE)].value}"
        )
    if not ok or found is None or sec is None:
        ctx.flush()
        raise Forbidden(
            f"Principal {ctx.principal.name!r} may not {mode} {location}: no {mode} grant on a table or a registered "
            "storage location covers it (an admin registers raw prefixes under /management/v1/locations and "
            f"grants LOCATION_{mode.upper()} on them)"
        )
    return found[0], sec


def _location_credentials(ctx: RequestContext, prefix: str, locations: list[str], mode: str) -> Response:
    """Every location is checked as if asked alone (the first refused one is the 403, nothing is vended);
    one credential per group of owning prefixes that fits one session policy, named once per prefix."""
    check_prefix(ctx.services, prefix)
    if mode not in (READ, WRITE):
        raise BadRequest(f"Invalid mode {mode!r}: expected 'read' or 'write'")
    vendor = ctx.services.vendor
    if vendor is None:
        raise BadRequest("This catalog vends no storage credentials (its warehouse is not on S3)")
    if not locations:
        raise BadRequest("Expected at least one location=s3://bucket/path")
    owned: dict[str, tuple[str, Securable]] = {}  # owning prefix -> (the caller's spelling, securable)
    for location in locations:
        got, sec = _authorize(ctx, location, mode)
        owned.setdefault(got, (location, sec))
    try:
        groups = split_union(owned, write=mode == WRITE)
    except PolicyTooLarge as e:
        raise BadRequest(f"Invalid location: {e}") from None
    entries: dict[str, dict[str, Any]] = {}  # owning prefix -> its entry, answered in the caller's order
    for group in groups:
        first, others = group[0], tuple(group[1:])
        # one prefix: the securable's own cache entry (today's key); several: the group's (sorted prefix set)
        subject = str(owned[first][1]) if not others else "union"
        cred, cache_hit = vendor.vend(ctx.principal.name, subject, first, mode, also=others)
        for got in group:
            spelled, sec = owned[got]
            detail: dict[str, Any] = {"path": spelled, "mode": mode, "prefix": got}
            detail |= {"expires_at": round(cred.expires_at, 3), "cache_hit": cache_hit}
            if len(owned) > 1:
                detail["union"] = sorted(owned) if len(groups) == 1 else sorted(group)
            ctx.audit("location_credentials", sec, "issued", detail)
            scheme = spelled.split("://", 1)[0]
            # the caller's spelling (s3a://…): its prefix matching stays simple
            entries[got] = {"prefix": scheme + got[len("s3") :], "config": cred.config(vendor.s3)}
    answer = [entries[got] for got in owned]
    return json_bytes(json.dumps({"storage-credentials": answer}).encode())


@router.get("/v1/{prefix}/lakesession/locations")
def my_locations(prefix: str, ctx: RequestContext = Depends(get_context, scope="function")) -> dict[str, Any]:
    check_prefix(ctx.services, prefix)
    out = []
    for loc in storage_locations.registered(locations_of(ctx.services)):
        held = [p.value for p in (P.LOCATION_READ, P.LOCATION_WRITE) if ctx.allowed(p, Securable.location(loc))]
        if held:
            out.append({"location": loc, "privileges": held})
    return {"locations": out}


class LocationBody(BaseModel):
    location: str = Field(min_length=1, max_length=1000, description="s3://bucket/prefix/ outside the warehouse")


def _manage(ctx: RequestContext, action: str) -> None:
    ctx.authorize(action, P.CATALOG_MANAGE_ACCESS, Securable.catalog())


@router.get("/management/v1/locations", tags=["management"])
def list_locations(ctx: RequestContext = Depends(get_context, scope="function")) -> dict[str, list[str]]:
    _manage(ctx, "list_locations")
    return {"locations": storage_locations.registered(locations_of(ctx.services))}


@router.post("/management/v1/locations", status_code=201, tags=["management"])
def register_location(
    body: LocationBody, ctx: RequestContext = Depends(get_context, scope="function")
) -> dict[str, str]:
    _manage(ctx, "register_location")
    prefix = storage_locations.register(locations_of(ctx.services), body.location, ctx.services.extras)
    ctx.audit("register_location", Securable.location(prefix), "issued")
    return {"location": prefix}


@router.delete("/management/v1/locations", status_code=204, tags=["management"])
def unregister_location(
    location: str = Query(..., max_length=1000), ctx: RequestContext = Depends(get_context, scope="function")
) -> Response:
    _manage(ctx, "unregister_location")
    prefix = storage_locations.unregister(locations_of(ctx.services), location)
    ctx.services.directory.invalidate()
    ctx.audit("unregister_location", Securable.location(prefix), "issued")
    return Response(status_code=204)
