"""Table endpoints: list, create (incl. stage-create), register, load, exists, commit, rename, drop, metrics.

Authorization always runs before any existence check, so a caller without
grants learns nothing (not even whether the table exists).
"""

from __future__ import annotations

import json
import time
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, Field
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError, ValidationError
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from starlette.concurrency import run_in_threadpool

from .. import formatversion, metadata_rules
from ..authz import Privilege as P
from ..authz import Securable
from ..context import RequestContext, get_context, in_context
from ..errors import BadRequest, Conflict, NoSuchNamespace, NoSuchTable
from ..idempotency import Idempotency, idempotency
from ..locations import Owner, normalize, path_locations
from ..nskeys import sql_ident
from ..tablestore import DATA_ACTIONS, filter_refs
from ..viewsecurity import authorize_target
from .common import (
    Namespace,
    check_format_version,
    check_in_namespace,
    check_level,
    check_location,
    check_name,
    check_path_properties,
    check_prefix,
    decode_namespace,
    identifiers_page,
    json_bytes,
    locations_of,
    namespace_home,
    ns_str,
    parse_body,
    parse_json_object,
    path_items,
    require_namespace,
    storage_items,
    tables_of,
)
from .credentials import table_result
from .namespaces import NamespaceStore, raw_body

router = APIRouter()
M = TypeVar("M", bound=BaseModel)

T = "/v1/{prefix}/namespaces/{namespace}/tables"


class TableIdentifierModel(BaseModel):
    namespace: list[str]
    name: str


class CreateTableBody(BaseModel):
    """The spec's CreateTableRequest (pyiceberg's model wrongly requires ``location``)."""

    name: str
    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(default=None, alias="partition-spec")
    write_order: SortOrder | None = Field(default=None, alias="write-order")
    stage_create: bool = Field(default=False, alias="stage-create")
    properties: dict[str, str] = Field(default_factory=dict)


class CommitTableBody(BaseModel):
    identifier: TableIdentifierModel | None = None
    requirements: tuple[TableRequirement, ...] = ()
    updates: tuple[TableUpdate, ...] = ()


class RegisterTableBody(BaseModel):
    name: str
    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class RenameBody(BaseModel):
    source: TableIdentifierModel
    destination: TableIdentifierModel


def _parse(model: type[M], body: bytes) -> M:
    """``parse_body``, plus pyiceberg's own ValidationError (``bucket[-1]``, ``decimal(0,0)``): a 400, not a 500;
    so is a warning pyiceberg raises while parsing when warnings are errors (a summary without operation)."""
    try:
        return parse_body(model, body)
    except (ValidationError, Warning) as e:
        raise BadRequest(f"Malformed request: {e}") from None


def _table(ctx: RequestContext, prefix: str, namespace: str, table: str) -> tuple[Namespace, str, Securable]:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    name = check_name("table", table)
    return ns, name, Securable.table(ns, name)


@router.get(T)
def list_tables(
    prefix: str,
    namespace: str,
    page_token: str | None = Query(None, alias="pageToken"),
    page_size: int | None = Query(None, alias="pageSize"),
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> dict[str, Any]:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    ctx.authorize("list_tables", P.TABLE_LIST, Securable.namespace(ns))
    require_namespace(ctx.services, ns)
    return identifiers_page(ns, tables_of(ctx).names(ns), page_token, page_size)


@router.post(T)
def create_table(
    prefix: str,
    namespace: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    if (replayed := idem.replay(ctx, lambda: _replay_load(ctx, ns, body, "create_table"))) is not None:
        return replayed
    ctx.authorize("create_table", P.TABLE_CREATE, Securable.namespace(ns))
    req = _parse(CreateTableBody, body)
    name = check_name("table", req.name)
    ns_props = NamespaceStore(ctx.services).properties(ns)  # existence and default location in one query
    if ns_props is None:
        raise NoSuchNamespace(f"Namespace does not exist: {ns_str(ns)}")
    ts = tables_of(ctx)
    ts.require_free(ns, name)
    check_format_version(req.properties.get("format-version"))
    try:  # Iceberg Java's Schema.checkCompatibility: v3-only types and defaults need a v3 table
        formatversion.check_schema(req.table_schema, int(req.properties.get("format-version") or 2))
    except (ValueError, ValidationError) as e:
        raise BadRequest(f"Invalid table definition: {e}") from None
    # pyiceberg's default: under the namespace's location (checked when it was set), else {warehouse}/{ns}
    location = req.location or f"{namespace_home(ctx.services, ns, ns_props).rstrip('/')}/{name}"
    check_location(ctx.services, location)
    check_path_properties(ctx.services, req.properties)
    owner, index = Owner.table(ns, name), locations_of(ctx.services)
    items = storage_items(location, req.properties)
    check_in_namespace(ctx, ns, ns_props, items)
    args: dict[str, Any] = dict(
        schema=req.table_schema,
        location=location,
        partition_spec=req.partition_spec or UNPARTITIONED_PARTITION_SPEC,
        sort_order=req.write_order or UNSORTED_SORT_ORDER,
        properties=req.properties,
    )
    if req.stage_create:  # nothing is owned until the create commit, which claims the storage
        index.check(owner, items)
        try:
            staged = ts.catalog._create_staged_table(sql_ident(ns, name), **args)
            raw = formatversion.dump(staged.metadata)  # a default pyiceberg cannot write: ValueError
        except (ValueError, NotImplementedError, ValidationError) as e:
            raise BadRequest(f"Invalid table definition: {e}") from None
        metadata_rules.check(raw)  # what the create commit would write
        ctx.audit("create_table", Securable.table(ns, name), "issued", {"staged": True})
        return table_result(ctx, ns, name, None, raw, staged.metadata.location, "vend_credentials", staged=True)
    try:
        with index.claiming(owner, items), idem.applying("create_table", 200):
            created = ts.catalog.create_table(sql_ident(ns, name), **args)
    except TableAlreadyExistsError as e:
        raise Conflict(str(e)) from None
    except (ValueError, NotImplementedError, ValidationError) as e:
        raise BadRequest(f"Invalid table definition: {e}") from None
    loc, raw = ts.load_raw(ns, name)
    ts.remember_location(loc, created.metadata.location)
    ctx.audit("create_table", Securable.table(ns, name), "issued", {"metadata-location": loc})
    # answers with credentials are never stored: a replay answers from the table as it is then
    return table_result(ctx, ns, name, loc, raw, created.metadata.location, "vend_credentials")


@router.post("/v1/{prefix}/namespaces/{namespace}/register")
def register_table(
    prefix: str,
    namespace: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    if (replayed := idem.replay(ctx, lambda: _replay_load(ctx, ns, body, "register_table"))) is not None:
        return replayed
    ctx.authorize("register_table", P.TABLE_CREATE, Securable.namespace(ns))
    req = parse_body(RegisterTableBody, body)
    name = check_name("table", req.name)
    require_namespace(ctx.services, ns)
    ts = tables_of(ctx)
    if req.overwrite:
        raise BadRequest("register with overwrite=true is not supported by this catalog")
    ts.require_free(ns, name)
    check_location(ctx.services, req.metadata_location, "metadata location")
    owner, index = Owner.table(ns, name), locations_of(ctx.services)
    index.check_file(owner, req.metadata_location, "metadata location")  # never adopt another table's files
    try:
        raw = ts.cache.get(req.metadata_location, ts.catalog.properties)
    except (OSError, ValueError) as e:
        raise BadRequest(f"Cannot read metadata at {req.metadata_location!r}: {type(e).__name__}") from None
    # adopted only if it is what the catalog itself would write: pyiceberg reads it, Iceberg Java's rules hold
    try:
        TableMetadataUtil.parse_raw(raw.decode())
    except (ValueError, TypeError, KeyError, ArithmeticError, ValidationError) as e:  # UnicodeDecodeError, Overflow
        raise BadRequest(f"Invalid table metadata at {req.metadata_location!r}: {type(e).__name__}: {e}") from None
    metadata_rules.check_adopted(raw, int(time.time() * 1000))
    doc = json.loads(raw)
    location, properties = doc.get("location") if isinstance(doc, dict) else None, doc.get("properties") or {}
    if not isinstance(location, str) or not isinstance(properties, dict):
        raise BadRequest(f"Invalid table metadata at {req.metadata_location!r}: no location")
    check_location(ctx.services, location, "table location in the metadata")
    check_path_properties(ctx.services, properties)
    check_format_version(doc.get("format-version"))
    items = storage_items(location, properties)
    check_in_namespace(ctx, ns, NamespaceStore(ctx.services).properties(ns) or {}, items)
    own = tuple(normalize(x) for x, _ in items)
    for entry in doc.get("metadata-log") or []:
        # delete-after-commit deletes files that drop out of this log: it may only name the table's own
        path = entry.get("metadata-file") if isinstance(entry, dict) else None
        if not isinstance(path, str) or not path.startswith(own):
            raise BadRequest(f"Invalid table metadata: its metadata-log names {path!r}, outside the table's storage")
    try:
        with index.claiming(owner, items), idem.applying("register_table", 200):
            ts.catalog.register_table(sql_ident(ns, name), req.metadata_location)
    except TableAlreadyExistsError as e:
        raise Conflict(str(e)) from None
    except (ValueError, OSError) as e:
        raise BadRequest(f"Cannot register table: {e}") from None
    loc, raw = ts.load_raw(ns, name)
    ctx.audit("register_table", Securable.table(ns, name), "issued", {"metadata-location": loc})
    return table_result(ctx, ns, name, loc, raw, ts.location_of(loc), "vend_credentials")


@router.get(T + "/{table}")
async def load_table(
    prefix: str,
    namespace: str,
    table: str,
    request: Request,
    snapshots: str = "all",
    referenced_by: str | None = Query(None, alias="referenced-by"),  # read raw in viewsecurity (%2C)
) -> Response:
    """One threadpool hop for the whole request (context, route, audit): see ``context.in_context``.

    Documents the route; requests are served by ``load_table_plain`` (mounted in front, see ``HOT_ROUTES``)."""
    return await run_in_threadpool(
        in_context, request, lambda ctx: _load_table(ctx, request, prefix, namespace, table, snapshots)
    )


async def load_table_plain(request: Request) -> Response:
    """loadTable as a plain Starlette endpoint: the same work, without FastAPI's per-request parameter solving
    and nested-router matching (a third of a loadTable's CPU on the event loop; the catalog's hottest route)."""
    p = request.path_params
    snapshots = request.query_params.get("snapshots", "all")
    return await run_in_threadpool(
        in_context,
        request,
        lambda ctx: _load_table(ctx, request, p["prefix"], p["namespace"], p["table"], snapshots),
    )


HOT_ROUTES = ((T + "/{table}", "GET", load_table_plain),)


def _load_table(
    ctx: RequestContext, request: Request, prefix: str, namespace: str, table: str, snapshots: str
) -> Response:
    ns, name, sec = _table(ctx, prefix, namespace, table)
    if snapshots not in ("all", "refs"):
        raise BadRequest("snapshots must be 'all' or 'refs'")
    eff = authorize_target(ctx, request, "load_table", P.TABLE_READ_PROPERTIES, sec)
    loc, raw = tables_of(ctx).load_raw(ns, name)
    if snapshots == "refs":
        raw = filter_refs(raw)
    ctx.audit("load_table", sec, "issued", {"metadata-location": loc, **eff.detail()})
    location = tables_of(ctx).location_of(loc) if ctx.delegation else None
    return table_result(ctx, ns, name, loc, raw, location, "vend_credentials", eff)


@router.head(T + "/{table}", status_code=204)
async def table_exists(request: Request, prefix: str, namespace: str, table: str) -> Response:
    """One threadpool hop for the whole request (``context.in_context``), as for loadTable."""

    def route(ctx: RequestContext) -> Response:
        ns, name, sec = _table(ctx, prefix, namespace, table)
        ctx.authorize_any("table_exists", (P.TABLE_READ_PROPERTIES, P.TABLE_LIST), sec)
        if tables_of(ctx).metadata_location(ns, name) is None:
            raise NoSuchTable(f"Table does not exist: {ns_str((*ns, name))}")
        return Response(status_code=204)

    return await run_in_threadpool(in_context, request, route)


@router.post(T + "/{table}")
async def commit_table(
    prefix: str,
    namespace: str,
    table: str,
    request: Request,
    body: bytes = Depends(raw_body),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    """One threadpool hop for the context, the commit and its audit (``context.in_context``); a client error
    still reaches ``idem`` (stored as the key's outcome) as it leaves this call."""
    return await run_in_threadpool(
        in_context, request, lambda ctx: _commit_table(ctx, idem, prefix, namespace, table, body)
    )


def _commit_table(
    ctx: RequestContext, idem: Idempotency, prefix: str, namespace: str, table: str, body: bytes
) -> Response:
    ns, name, sec = _table(ctx, prefix, namespace, table)
    if (replayed := idem.replay(ctx, lambda: _replay_commit(ctx, ns, name, sec))) is not None:
        return replayed
    req = _parse(CommitTableBody, body)
    if req.identifier is not None and (tuple(req.identifier.namespace), req.identifier.name) != (ns, name):
        raise BadRequest("Commit identifier does not match the table in the path")
    ts = tables_of(ctx)
    if ts.metadata_location(ns, name) is None and any(r.type == "assert-create" for r in req.requirements):
        ctx.authorize("create_table", P.TABLE_CREATE, Securable.namespace(ns))
    else:
        writes_data = any(u.action in DATA_ACTIONS for u in req.updates)
        ctx.authorize("commit_table", P.TABLE_WRITE_DATA if writes_data else P.TABLE_WRITE_PROPERTIES, sec)
    owner, index = Owner.table(ns, name), locations_of(ctx.services)
    items: list[tuple[str, str]] = []
    moves = creating = any(r.type == "assert-create" for r in req.requirements)
    for update in req.updates:
        if update.action == "set-location":
            items.append((check_location(ctx.services, update.location), "table location"))
        elif update.action == "set-properties":
            check_path_properties(ctx.services, update.updates)
            check_format_version(update.updates.get("format-version"))
            items += path_items(update.updates)
        elif update.action == "remove-properties":
            moves = moves or bool(path_locations(dict.fromkeys(update.removals, "x")))
        elif update.action == "upgrade-format-version":
            check_format_version(update.format_version)
    if creating and not any(u.action == "set-location" for u in req.updates):
        raise BadRequest("A create commit must set the table location (set-location)")
    if items:
        check_in_namespace(ctx, ns, NamespaceStore(ctx.services).properties(ns) or {}, items)
    added = index.claim(owner, items) if items else []  # before the commit: no moment of shared storage
    try:
        with idem.applying("commit_table", 200):
            loc, raw = ts.commit(ns, name, req.requirements, req.updates)
    except BaseException:
        index.release(owner, added)
        raise
    if items or moves:
        doc = json.loads(raw)
        index.sync(owner, [doc["location"], *path_locations(doc.get("properties"))])
    ctx.audit("commit_table", sec, "issued", {"metadata-location": loc, "updates": [u.action for u in req.updates]})
    return idem.done(_commit_response(loc, raw))


@router.delete(T + "/{table}", status_code=204)
def drop_table(
    prefix: str,
    namespace: str,
    table: str,
    purge_requested: bool = Query(False, alias="purgeRequested"),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    ns, name, sec = _table(ctx, prefix, namespace, table)
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    ctx.authorize("drop_table", P.TABLE_DROP, sec, detail={"purge": purge_requested})
    ts = tables_of(ctx)
    if ts.metadata_location(ns, name) is None:
        raise NoSuchTable(f"Table does not exist: {ns_str((*ns, name))}")
    owner, index = Owner.table(ns, name), locations_of(ctx.services)
    try:
        with idem.applying("drop_table", 204):
            if purge_requested:
                ts.purge(ns, name, index.owned(owner))
            else:
                ts.catalog.drop_table(sql_ident(ns, name))
    except NoSuchTableError as e:
        raise NoSuchTable(str(e)) from None
    index.release(owner)  # its storage may be claimed again
    return Response(status_code=204)


@router.post("/v1/{prefix}/tables/rename", status_code=204)
def rename_table(
    prefix: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    check_prefix(ctx.services, prefix)
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    req = parse_body(RenameBody, body)
    src_ns = tuple(req.source.namespace)
    dst_ns = tuple(req.destination.namespace)
    for level in (*src_ns, *dst_ns):
        check_level(level)
    if not src_ns or not dst_ns:
        raise BadRequest("Malformed request: source and destination need a namespace")
    src, dst = check_name("table", req.source.name), check_name("table", req.destination.name)
    ctx.authorize("rename_table", P.TABLE_DROP, Securable.table(src_ns, src))
    ctx.authorize("rename_table", P.TABLE_CREATE, Securable.namespace(dst_ns))
    ts = tables_of(ctx)
    if ts.metadata_location(src_ns, src) is None:
        raise NoSuchTable(f"Table does not exist: {ns_str((*src_ns, src))}")
    require_namespace(ctx.services, dst_ns)
    ts.require_free(dst_ns, dst)
    try:
        with idem.applying("rename_table", 204):
            ts.catalog.rename_table(sql_ident(src_ns, src), sql_ident(dst_ns, dst))
    except TableAlreadyExistsError as e:
        raise Conflict(str(e)) from None
    except NoSuchTableError as e:
        raise NoSuchTable(str(e)) from None
    locations_of(ctx.services).move(Owner.table(src_ns, src), Owner.table(dst_ns, dst))
    return Response(status_code=204)


@router.post(T + "/{table}/metrics", status_code=204)
def report_metrics(
    prefix: str,
    namespace: str,
    table: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> Response:
    ns, name, sec = _table(ctx, prefix, namespace, table)
    ctx.authorize("report_metrics", P.TABLE_READ_PROPERTIES, sec)
    report = parse_json_object(body)
    if not isinstance(report.get("report-type"), str):
        raise BadRequest("Malformed request: metrics report needs a 'report-type'")
    if tables_of(ctx).metadata_location(ns, name) is None:
        raise NoSuchTable(f"Table does not exist: {ns_str((*ns, name))}")
    return Response(status_code=204)


def _commit_response(loc: str, raw: bytes) -> Response:
    return json_bytes(b'{"metadata-location":' + json.dumps(loc).encode() + b',"metadata":' + raw + b"}")


def _replay_commit(ctx: RequestContext, ns: Namespace, name: str, sec: Securable) -> Response:
    """A committed request whose answer was lost: the table as it is now (the spec allows a newer state)."""
    ctx.authorize("commit_table", P.TABLE_READ_PROPERTIES, sec)
    return _commit_response(*tables_of(ctx).load_raw(ns, name))


def _replay_load(ctx: RequestContext, ns: Namespace, body: bytes, action: str) -> Response:
    """A created or registered table, answered afresh (its credentials are never stored)."""
    name = check_name("table", parse_json_object(body).get("name") or "")
    sec = Securable.table(ns, name)
    ctx.authorize(action, P.TABLE_READ_PROPERTIES, sec)
    ts = tables_of(ctx)
    loc, raw = ts.load_raw(ns, name)
    return table_result(ctx, ns, name, loc, raw, ts.location_of(loc), "vend_credentials")
