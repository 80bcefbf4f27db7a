"""The view endpoints: list, create, load, exists, replace (commit), drop, rename.

Views live in our ``ls_views`` table (one row per view: the current metadata
location and a copy of its JSON); every metadata version is also written as
``{location}/metadata/NNNNN-{uuid}.metadata.json`` through pyiceberg's FileIO.
Commits are optimistic: a row is only updated if its metadata location is
still the one the update was computed from, with a few server-side retries
(requirements re-validated against the fresh metadata, as Iceberg Java does).

Authorization always precedes any existence check, so a caller without the
privilege learns nothing (403) about what exists.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from fastapi import APIRouter, Depends, Query, Request, Response
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.view.metadata import ViewMetadata

from ..authz import Privilege as P
from ..authz import Securable
from ..context import RequestContext, Services, get_context
from ..errors import BadRequest, CommitFailed, Conflict, NoSuchView
from ..idempotency import Idempotency, idempotency
from ..locations import Owner
from ..view_rules import check as check_view_metadata
from ..view_rules import check_commit_request, check_create_request
from ..viewmeta import (
    WRITE_METADATA_LOCATION,
    CommitViewRequest,
    CreateViewRequest,
    RemovePropertiesUpdate,
    RenameViewRequest,
    SetPropertiesUpdate,
    TableIdentifier,
    apply_commit,
    metadata_dict,
    metadata_json,
    new_view_metadata,
)
from ..viewsecurity import authorize_target, check_definer_sql_change, check_owner_property_change, check_owner_value
from ..viewstore import ViewStore
from .common import (
    Namespace,
    check_in_namespace,
    check_level,
    check_location,
    check_name,
    check_prefix,
    decode_namespace,
    identifiers_page,
    locations_of,
    namespace_home,
    ns_str,
    parse_body,
    parse_json_object,
    require_namespace,
)
from .namespaces import NamespaceStore, raw_body

logger = logging.getLogger(__name__)

router = APIRouter()

COMMIT_ATTEMPTS = 4
_VERSION_RE = re.compile(r"^(\d+)-")


def _parse(model: Any, body: bytes) -> Any:
    """``parse_body``, also turning model-construction errors (pyiceberg validators) into 400."""
    try:
        return parse_body(model, body)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise BadRequest(f"Malformed request: {type(e).__name__}: {e}") from None


# ---------------------------------------------------------------- locations and files
def _check_location(services: Services, location: str, what: str = "location") -> str:
    """A view's files must stay inside the warehouse (no escape via '..' or a sibling prefix)."""
    return check_location(services, location, f"view {what}")


def _default_location(services: Services, ns: Namespace, name: str) -> str:
    """Like a table's default: under the namespace's home (its ``location`` property, else
    ``{warehouse}/{nskeys.path_segment(ns)}``: levels '.'-joined, ["a", "b"] never lands inside table a.b)."""
    props = NamespaceStore(services).properties(ns) or {}
    return f"{namespace_home(services, ns, props).rstrip('/')}/{name}"


def _file_io(services: Services, location: str) -> FileIO:
    # The catalog's properties carry object-store settings (endpoint, region, credentials).
    return load_file_io(dict(services.catalog.properties), location)


def _metadata_file(services: Services, metadata: ViewMetadata, version: int) -> str:
    custom = metadata.properties.get(WRITE_METADATA_LOCATION)
    folder = _check_location(services, custom, WRITE_METADATA_LOCATION) if custom else f"{metadata.location}/metadata"
    return f"{folder}/{version:05d}-{uuid.uuid4()}.metadata.json"


def _next_version(metadata_location: str) -> int:
    m = _VERSION_RE.match(metadata_location.rsplit("/", 1)[-1])
    return int(m.group(1)) + 1 if m else 0


def _write(services: Services, path: str, text: str) -> None:
    with _file_io(services, path).new_output(path).create(overwrite=False) as f:
        f.write(text.encode())


def _discard(services: Services, path: str) -> None:
    try:
        _file_io(services, path).delete(path)
    except Exception:  # best effort: an orphaned metadata file is harmless
        logger.warning("could not delete orphaned view metadata file %s", path, exc_info=True)


def _issue(
    ctx: RequestContext,
    action: str,
    ns: Namespace,
    name: str,
    location: str,
    metadata: ViewMetadata,
    detail: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Audit the issuance and answer with the spec's ``LoadViewResult``."""
    ctx.audit(action, Securable.view(ns, name), "issued", {"metadata-location": location, **(detail or {})})
    return {"metadata-location": location, "metadata": metadata_dict(metadata), "config": {}}


# ---------------------------------------------------------------- request helpers
def _identifier(ident: TableIdentifier) -> tuple[Namespace, str]:
    if not ident.namespace:
        raise BadRequest("Malformed request: a view identifier needs a namespace")
    return tuple(check_level(p) for p in ident.namespace), check_name("view", ident.name)


def _view_path(ctx: RequestContext, prefix: str, namespace: str, view: str) -> tuple[Namespace, str]:
    check_prefix(ctx.services, prefix)
    return decode_namespace(ctx.services, namespace), check_name("view", view)


def _load(vs: ViewStore, ns: Namespace, name: str) -> tuple[str, ViewMetadata]:
    found = vs.get(ns, name)
    if found is None:
        raise NoSuchView(f"View does not exist: {ns_str(ns)}.{name}")
    return found


# ---------------------------------------------------------------- routes
@router.get("/v1/{prefix}/namespaces/{namespace}/views")
def list_views(
    prefix: str,
    namespace: str,
    page_token: str | None = Query(None, alias="pageToken"),
    page_size: int | None = Query(None, alias="pageSize"),
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> dict[str, Any]:
    check_prefix(ctx.services, prefix)
    ns = decode_namespace(ctx.services, namespace)
    ctx.authorize("list_views", P.VIEW_LIST, Securable.namespace(ns))
    require_namespace(ctx.services, ns)
    return identifiers_page(ns, ViewStore(ctx.services).names(ns), page_token, page_size)


@router.post("/v1/{prefix}/namespaces/{namespace}/views")
def create_view(
    prefix: str,
    namespace: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Any:
    check_prefix(ctx.services, prefix)
    services = ctx.services
    ns = decode_namespace(services, namespace)
    if (replayed := idem.replay(ctx, lambda: _replay_view(ctx, ns, parse_json_object(body).get("name")))) is not None:
        return replayed
    ctx.authorize("create_view", P.VIEW_CREATE, Securable.namespace(ns))
    req: CreateViewRequest = _parse(CreateViewRequest, body)
    check_create_request(parse_json_object(body))  # as Iceberg Java's REST parser reads it
    name = check_name("view", req.name)
    check_owner_property_change(ctx, req.properties)
    check_owner_value(ctx, req.properties)
    location = (
        _check_location(services, req.location)
        if req.location
        else _check_location(services, _default_location(services, ns, name))
    )
    require_namespace(services, ns)
    check_in_namespace(ctx, ns, NamespaceStore(services).properties(ns) or {}, [(location, "view location")], "view")
    vs = ViewStore(services)
    if vs.table_exists(ns, name):
        raise Conflict(f"Table with same name already exists: {ns_str(ns)}.{name}")
    if vs.get(ns, name) is not None:
        raise Conflict(f"View already exists: {ns_str(ns)}.{name}")
    metadata = new_view_metadata(req, location)
    text = metadata_json(metadata)
    check_view_metadata(text)  # never a file Iceberg Java cannot read
    owner, index = Owner.view(ns, name), locations_of(services)
    added = index.claim(owner, [(location, "view location")])  # a view owns its prefix like a table
    try:
        path = _metadata_file(services, metadata, 0)
        _write(services, path, text)
        with idem.applying("create_view", 200):
            inserted = vs.insert(ns, name, path, text)
        if not inserted:
            _discard(services, path)
            raise Conflict(f"View already exists: {ns_str(ns)}.{name}")
    except BaseException:
        index.release(owner, added)
        raise
    return idem.done_json(_issue(ctx, "create_view", ns, name, path, metadata))


@router.get("/v1/{prefix}/namespaces/{namespace}/views/{view}")
def load_view(
    prefix: str,
    namespace: str,
    view: str,
    request: Request,
    referenced_by: str | None = Query(None, alias="referenced-by"),  # read raw in viewsecurity (%2C)
    ctx: RequestContext = Depends(get_context, scope="function"),
) -> dict[str, Any]:
    # ``referenced-by`` from a trusted engine walks the view chain (DEFINER/INVOKER); otherwise ignored.
    ns, name = _view_path(ctx, prefix, namespace, view)
    eff = authorize_target(ctx, request, "load_view", P.VIEW_READ, Securable.view(ns, name))
    return _issue(ctx, "load_view", ns, name, *_load(ViewStore(ctx.services), ns, name), eff.detail())


@router.head("/v1/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def view_exists(
    prefix: str, namespace: str, view: str, ctx: RequestContext = Depends(get_context, scope="function")
) -> Response:
    ns, name = _view_path(ctx, prefix, namespace, view)
    ctx.authorize("view_exists", P.VIEW_READ, Securable.view(ns, name))
    _load(ViewStore(ctx.services), ns, name)
    return Response(status_code=204)


@router.post("/v1/{prefix}/namespaces/{namespace}/views/{view}")
def replace_view(
    prefix: str,
    namespace: str,
    view: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Any:
    ns, name = _view_path(ctx, prefix, namespace, view)
    if (replayed := idem.replay(ctx, lambda: _replay_view(ctx, ns, name))) is not None:
        return replayed
    services = ctx.services
    ctx.authorize("replace_view", P.VIEW_WRITE_PROPERTIES, Securable.view(ns, name))
    req: CommitViewRequest = _parse(CommitViewRequest, body)
    check_commit_request(parse_json_object(body))  # as Iceberg Java's REST parser reads it
    if req.identifier is not None and _identifier(req.identifier) != (ns, name):
        raise BadRequest("Malformed request: the identifier in the body does not match the view in the path")
    for u in req.updates:
        if isinstance(u, SetPropertiesUpdate):
            check_owner_property_change(ctx, u.updates)
            check_owner_value(ctx, u.updates)
        elif isinstance(u, RemovePropertiesUpdate):
            check_owner_property_change(ctx, u.removals, removing=True)
    vs = ViewStore(services)
    for _ in range(COMMIT_ATTEMPTS):
        base_location, base = _load(vs, ns, name)
        metadata, changed = apply_commit(base, req)
        actions = {"updates": [u.action for u in req.updates]}
        if not changed:
            return _issue(ctx, "replace_view", ns, name, base_location, base, actions)
        text = metadata_json(metadata)
        check_view_metadata(text)  # never a file Iceberg Java cannot read
        check_definer_sql_change(ctx, Securable.view(ns, name), base, metadata)  # against the base swapped
        owner, index, added = Owner.view(ns, name), locations_of(services), []
        if metadata.location != base.location:  # claimed as this view's: it may move inside its old prefix
            moved = [(_check_location(services, metadata.location), "view location")]
            check_in_namespace(ctx, ns, NamespaceStore(services).properties(ns) or {}, moved, "view")
            added = index.claim(owner, moved)
        path = _metadata_file(services, metadata, _next_version(base_location))
        try:
            _write(services, path, text)
            with idem.applying("replace_view", 200):
                swapped = vs.swap(ns, name, base_location, path, text)
        except BaseException:
            index.release(owner, added)
            raise
        if swapped:
            if added:
                index.sync(owner, [metadata.location])
            return idem.done_json(_issue(ctx, "replace_view", ns, name, path, metadata, actions))
        index.release(owner, added)
        _discard(services, path)  # a concurrent commit won: retry against its metadata
    raise CommitFailed(f"Commit failed: view {ns_str(ns)}.{name} was concurrently modified; retry")


@router.delete("/v1/{prefix}/namespaces/{namespace}/views/{view}", status_code=204)
def drop_view(
    prefix: str,
    namespace: str,
    view: str,
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    ns, name = _view_path(ctx, prefix, namespace, view)
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    ctx.authorize("drop_view", P.VIEW_DROP, Securable.view(ns, name))
    with idem.applying("drop_view", 204):
        deleted = ViewStore(ctx.services).delete(ns, name)
    if not deleted:
        raise NoSuchView(f"View does not exist: {ns_str(ns)}.{name}")
    locations_of(ctx.services).release(Owner.view(ns, name))  # its storage may be claimed again
    return Response(status_code=204)


@router.post("/v1/{prefix}/views/rename", status_code=204)
def rename_view(
    prefix: str,
    body: bytes = Depends(raw_body),
    ctx: RequestContext = Depends(get_context, scope="function"),
    idem: Idempotency = Depends(idempotency, scope="function"),
) -> Response:
    check_prefix(ctx.services, prefix)
    if (replayed := idem.replay(ctx)) is not None:
        return replayed
    req: RenameViewRequest = _parse(RenameViewRequest, body)
    src, dst = _identifier(req.source), _identifier(req.destination)
    ctx.authorize(
        "rename_view", P.VIEW_DROP, Securable.view(*src), detail={"destination": f"{ns_str(dst[0])}.{dst[1]}"}
    )
    ctx.authorize(
        "rename_view", P.VIEW_CREATE, Securable.namespace(dst[0]), detail={"source": f"{ns_str(src[0])}.{src[1]}"}
    )
    vs = ViewStore(ctx.services)
    _load(vs, *src)
    require_namespace(ctx.services, dst[0])
    if vs.table_exists(*dst):
        raise Conflict(
            f"Cannot rename {ns_str(src[0])}.{src[1]} to {ns_str(dst[0])}.{dst[1]}: a table with that name exists"
        )
    with idem.applying("rename_view", 204):
        renamed = vs.rename(src, dst) if src != dst else None
    if renamed is None:
        raise Conflict(
            f"Cannot rename {ns_str(src[0])}.{src[1]} to {ns_str(dst[0])}.{dst[1]}: a view with that name exists"
        )
    if not renamed:
        raise NoSuchView(f"View does not exist: {ns_str(src[0])}.{src[1]}")
    locations_of(ctx.services).move(Owner.view(*src), Owner.view(*dst))
    return Response(status_code=204)


def _replay_view(ctx: RequestContext, ns: Namespace, name: object) -> dict[str, Any]:
    """A created or replaced view whose answer was lost: the view as it is now."""
    name = check_name("view", name if isinstance(name, str) else "")
    ctx.authorize("load_view", P.VIEW_READ, Securable.view(ns, name))
    return _issue(ctx, "load_view", ns, name, *_load(ViewStore(ctx.services), ns, name))
