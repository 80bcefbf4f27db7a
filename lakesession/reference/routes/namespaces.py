"""The namespace endpoints (``/v1/config`` is in ``config.py``).

Namespaces live in pyiceberg's ``iceberg_namespace_properties`` table (one row
per property, a marker row for a namespace without properties), so pyiceberg's
SqlCatalog sees exactly what this API manages.
"""

from __future__ import annotations

from typing import Any, cast

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from pyiceberg.catalog.sql import IcebergNamespaceProperties as NsProps
from pyiceberg.catalog.sql import IcebergTables
from sqlalchemy import Table, and_, delete, insert, or_, select
from starlette.concurrency import run_in_threadpool

from .. import nskeys, store
from ..authz import Privilege as P
from ..authz import Securable
from ..context import RequestContext, Services, get_context, in_context
from ..errors import BadRequest, CatalogError, Conflict, Forbidden, NamespaceNotEmpty, NoSuchNamespace
from ..idempotency import Idempotency, idempotency
from ..locations import Owner, normalize
from .common import (
    Namespace,
    check_level,
    check_location,
    check_prefix,
    decode_namespace,
    default_namespace_location,
    locations_of,
    namespace_home,
    ns_str,
    paginate,
    parse_body,
)

# pyiceberg's declarative model, as the Core table SQLAlchemy's insert()/delete() are typed for
_NS_PROPS = cast(Table, NsProps.__table__)

router = APIRouter()

MARKER = "exists"  # pyiceberg's marker property for a namespace without properties


class UnprocessableEntity(CatalogError):
    status, type = 422, "UnprocessableEntityException"


async def raw_body(request: Request) -> bytes:
    return await request.body()


class CreateNamespaceRequest(BaseModel):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesRequest(BaseModel):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class NamespaceStore:
    """Namespace rows in pyiceberg's SqlCatalog tables, keyed by ``nskeys.key`` (levels joined with 0x1F)."""

    def __init__(self, services: Services):
        self.catalog_name = services.catalog.name
        self.engine = services.catalog.engine
        self.dialect = self.engine.dialect.name

    def properties(self, ns: Namespace) -> dict[str, str] | None:
        t = _NS_PROPS
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.c.property_key, t.c.property_value).where(
                    and_(t.c.catalog_name == self.catalog_name, t.c.namespace == nskeys.key(ns))
                )
            ).all()
        if not rows:
            return None
        props = {k: v for k, v in rows}
        if props.get(MARKER) == "true" and len(props) == 1:
            return {}
        return props

    def children(self, parent: Namespace) -> list[Namespace]:
        """The namespaces one level below ``parent`` (``()``: the top level), in key order (a range scan
        on the primary key for a parent; deeper descendants in the range are dropped here)."""
        t = _NS_PROPS
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t.c.namespace)
                .where(
                    t.c.catalog_name == self.catalog_name, nskeys.children_range(t.c.namespace, parent, self.dialect)
                )
                .distinct()
            ).all()
        found = (nskeys.from_key(r[0]) for r in rows)
        return sorted((n for n in found if len(n) == len(parent) + 1), key=nskeys.key)

    def create(self, ns: Namespace, props: dict[str, str]) -> None:
        rows = props or {MARKER: "true"}
        with self.engine.begin() as conn:
            conn.execute(
                insert(_NS_PROPS),
                [
                    {
                        "catalog_name": self.catalog_name,
                        "namespace": nskeys.key(ns),
                        "property_key": k,
                        "property_value": v,
                    }
                    for k, v in rows.items()
                ],
            )

    def update(self, ns: Namespace, removals: list[str], updates: dict[str, str]) -> dict[str, list[str]]:
        t = _NS_PROPS
        current = self.properties(ns)
        if current is None:
            raise NoSuchNamespace(f"Namespace does not exist: {ns_str(ns)}")
        removed = [k for k in removals if k in current]
        missing = [k for k in removals if k not in current]
        with self.engine.begin() as conn:
            where = and_(t.c.catalog_name == self.catalog_name, t.c.namespace == nskeys.key(ns))
            conn.execute(delete(t).where(and_(where, t.c.property_key.in_(removed + list(updates) + [MARKER]))))
            remaining = {k: v for k, v in current.items() if k not in removed and k not in updates}
            rows = {**updates} if (updates or remaining) else {MARKER: "true"}
            if rows:
                conn.execute(
                    insert(t),
                    [
                        {
                            "catalog_name": self.catalog_name,
                            "namespace": nskeys.key(ns),
                            "property_key": k,
                            "property_value": v,
                        }
                        for k, v in rows.items()
                    ],
                )
        return {"updated": sorted(updates), "removed": sorted(removed), "missing": sorted(missing)}

    def is_empty(self, ns: Namespace) -> bool:
        tables = IcebergTables.__table__
        nsp = _NS_PROPS
        with self.engine.connect() as conn:
            if conn.execute(
                select(tables.c.table_name)
                .where(
                    and_(
                        tables.c.catalog_name == self.catalog_name,
                        or_(
                            tables.c.table_namespace == nskeys.key(ns),
                            nskeys.children_range(tables.c.table_namespace, ns, self.dialect),
                        ),
                    )
                )
                .limit(1)
            ).first():
                return False
            if conn.execute(
                select(store.views.c.name)
                .where(and_(store.views.c.catalog_name == self.catalog_name, store.views.c.namespace == nskeys.key(ns)))
                .limit(1)
            ).first():
                return False
            return (
                conn.execute(
                    select(nsp.c.namespace)
                    .where(
                        and_(
                            nsp.c.catalog_name == self.catalog_name,
                            nskeys.children_range(nsp.c.namespace, ns, self.dialect),
                        )
                    )
                    .limit(1)
                ).first()
                is None
            )

    def drop(self, ns: Namespace) -> None:
        t = _NS_PROPS
        with self.engine.begin() as conn:
            conn.execute(delete(t).where(and_(t.c.catalog_name == self.catalog_name, t.c.namespace == nskeys.key(ns))))


def _parent_securable(parent: Namespace) -> Securable:
    return Securable.namespace(parent) if parent else Securable.catalog()


@router.get("/v1/{prefix}/namespaces")
async def list_namespaces(
    request: Request,
    prefix: str,
    parent: str | None = None,
    page_token: str | None = Query(None, alias="pageToken"),
    page_size: int | None = Query(None, alias="pageSize"),
) -> Response:
    """One threadpool hop for the whole request (``context.in_context``), as for the other cheap reads."""
    return await run_in_threadpool(
        in_context, request, lambda ctx: JSONResponse(_list_namespaces(ctx, prefix, parent, page_token, page_size))
    )


def _list_namespaces(
    ctx: RequestContext, prefix: str, parent: str | None, page_token: str | None, page_size: int | None
) -> dict[str, Any]:
    check_prefix(ctx.services, prefix)
    parent_ns: Namespace = decode_namespace(ctx.services, parent) if parent else ()
    ctx.authorize("list_namespaces", P.NAMESPACE_LIST, _parent_securable(parent_ns))
    nss = NamespaceStore(ctx.services)
    if parent_ns and nss.properties(parent_ns) is None:
        raise NoSuchNamespace(f"Namespace does not exist: {ns_str(parent_ns)}")
    page, token = paginate(nss.children(parent_ns), page_token, page_size, key=nskeys.key)
    out: dict[str, Any] = {"namespaces": [list(n) for n in page]}
    if token:
        out["next-page-token"] = token
    return out


@router.post("/v1/{prefix}/namespaces")
def create_namespace(
    prefix: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Any:
    check_prefix(ctx.services, prefix)
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    req = parse_body(CreateNamespaceRequest, body)
    if not req.namespace:
        raise BadRequest("Malformed request: namespace must have at least one level")
    ns = tuple(check_level(p) for p in req.namespace)
    ctx.authorize("create_namespace", P.NAMESPACE_CREATE, _parent_securable(ns[:-1]))
    nss = NamespaceStore(ctx.services)
    if len(ns) > 1 and nss.properties(ns[:-1]) is None:
        # the spec lists no 404 for createNamespace: a missing parent is a client mistake
        raise BadRequest(f"Parent namespace does not exist: {ns_str(ns[:-1])}; create it first")
    if nss.properties(ns) is not None:
        raise Conflict(f"Namespace already exists: {ns_str(ns)}")
    owner, index = Owner.namespace_(ns), locations_of(ctx.services)
    added = index.claim(owner, [(_checked_home(ctx, ns, req.properties), "namespace location")])
    result = {"namespace": list(ns), "properties": req.properties}
    try:
        with idem.applying("create_namespace", 200, bytes(JSONResponse(result).body)):
            nss.create(ns, req.properties)
    except BaseException:
        index.release(owner, added)
        raise
    return result


def _checked_home(ctx: RequestContext, ns: Namespace, properties: dict[str, str]) -> str:
    """Where the namespace's tables go by default: its ``location`` (inside the warehouse, on the
    warehouse's store and bucket: never another bucket or a local path) or ``{warehouse}/{ns}``.

    A ``location`` outside the namespace's own default home (or, for a child, its parent's homes) is the
    content managers' call (``CATALOG_MANAGE_CONTENT`` on the catalog): anywhere else in the warehouse is
    some other namespace's home, existing or future, and whoever edits one namespace's properties could
    otherwise squat it."""
    home = check_location(ctx.services, namespace_home(ctx.services, ns, properties), "namespace location")
    if "location" not in properties or ctx.allowed(P.CATALOG_MANAGE_CONTENT, Securable.catalog()):
        return home
    own = [normalize(default_namespace_location(ctx.services, ns))]
    if len(ns) > 1:  # a child may also live in its parent's home: whoever may create it there holds the parent
        parent = NamespaceStore(ctx.services).properties(ns[:-1]) or {}
        own.append(normalize(namespace_home(ctx.services, ns[:-1], parent)))
        own.append(normalize(default_namespace_location(ctx.services, ns[:-1])))  # reserved to it by the layout
    own = list(dict.fromkeys(own))
    if not any(normalize(home).startswith(place) for place in own):
        raise Forbidden(
            f"A namespace location outside {' or '.join(repr(p.rstrip('/')) for p in own)} is set by the "
            "catalog's content managers (CATALOG_MANAGE_CONTENT on the catalog): elsewhere in the warehouse lies "
            "another namespace's home. Leave location out, or choose a place inside"
        )
    return home


def _load(
    ctx: RequestContext, prefix: str, namespace: str, action: str, privilege: P
) -> tuple[Namespace, NamespaceStore, dict[str, str]]:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    ctx.authorize(action, privilege, Securable.namespace(ns))
    nss = NamespaceStore(ctx.services)
    props = nss.properties(ns)
    if props is None:
        raise NoSuchNamespace(f"Namespace does not exist: {ns_str(ns)}")
    return ns, nss, props


@router.get("/v1/{prefix}/namespaces/{namespace}")
async def load_namespace(request: Request, prefix: str, namespace: str) -> Response:
    """One threadpool hop for the whole request (``context.in_context``)."""

    def route(ctx: RequestContext) -> Response:
        ns, _, props = _load(ctx, prefix, namespace, "load_namespace", P.NAMESPACE_READ_PROPERTIES)
        return JSONResponse({"namespace": list(ns), "properties": props})

    return await run_in_threadpool(in_context, request, route)


@router.head("/v1/{prefix}/namespaces/{namespace}", status_code=204)
async def namespace_exists(request: Request, prefix: str, namespace: str) -> Response:
    """One threadpool hop for the whole request (``context.in_context``)."""

    def route(ctx: RequestContext) -> Response:
        _load(ctx, prefix, namespace, "namespace_exists", P.NAMESPACE_READ_PROPERTIES)
        return Response(status_code=204)

    return await run_in_threadpool(in_context, request, route)


@router.delete("/v1/{prefix}/namespaces/{namespace}", status_code=204)
def drop_namespace(
    prefix: str,
    namespace: str,
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    ns, nss, _ = _load(ctx, prefix, namespace, "drop_namespace", P.NAMESPACE_DROP)
    if not nss.is_empty(ns):
        raise NamespaceNotEmpty(f"Namespace {ns_str(ns)} is not empty: drop its tables, views and namespaces first")
    with idem.applying("drop_namespace", 204):
        nss.drop(ns)
    locations_of(ctx.services).release(Owner.namespace_(ns))
    return Response(status_code=204)


@router.post("/v1/{prefix}/namespaces/{namespace}/properties")
def update_namespace_properties(
    prefix: str,
    namespace: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Any:
    if (replayed := idem.replay(ctx, lambda: _replay_update(body))) is not None:
        return replayed
    ns, nss, current = _load(ctx, prefix, namespace, "update_namespace_properties", P.NAMESPACE_WRITE_PROPERTIES)
    req = parse_body(UpdateNamespacePropertiesRequest, body)
    overlap = set(req.removals) & set(req.updates)
    if overlap:
        raise UnprocessableEntity(f"Keys both updated and removed: {', '.join(sorted(overlap))}")
    if "location" not in req.updates and "location" not in req.removals:
        with idem.applying("update_namespace_properties", 200):
            return idem.done_json(nss.update(ns, req.removals, req.updates))
    after = {k: v for k, v in current.items() if k not in req.removals} | req.updates
    home = _checked_home(ctx, ns, after)
    owner, index = Owner.namespace_(ns), locations_of(ctx.services)
    added = index.claim(owner, [(home, "namespace location")])  # tables already inside stay theirs
    try:
        with idem.applying("update_namespace_properties", 200):
            result = nss.update(ns, req.removals, req.updates)
    except BaseException:
        index.release(owner, added)
        raise
    index.sync(owner, [home])
    return idem.done_json(result)


def _replay_update(body: bytes) -> dict[str, Any]:
    """An update whose answer was lost (the server died after committing it): what it asked for, applied."""
    req = parse_body(UpdateNamespacePropertiesRequest, body)
    return {"updated": sorted(req.updates), "removed": sorted(req.removals), "missing": []}
