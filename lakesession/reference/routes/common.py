"""Shared route helpers: prefix checks, name and location rules, namespace decoding, pagination,
body parsing, and the per-server stores (tables, storage-ownership index) every route reaches."""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from fastapi import Request, Response
from pydantic import BaseModel, ValidationError

from .. import formatversion, nskeys
from ..context import RequestContext, Services
from ..errors import BadRequest, NoSuchNamespace, NotFound
from ..locations import PATH_PROPERTIES, LocationIndex, Owner, normalize, path_locations
from ..nskeys import check_level
from ..tablestore import TableStore

logger = logging.getLogger(__name__)

M = TypeVar("M", bound=BaseModel)
Namespace = tuple[str, ...]

MAX_PAGE_SIZE = 1000


def services_of(request: Request) -> Services:
    return request.app.state.services


def check_prefix(services: Services, prefix: str) -> None:
    if prefix != services.settings.catalog_name:
        raise NotFound(f"Unknown warehouse prefix {prefix!r}; GET /v1/config tells the prefix to use")


def check_name(kind: str, name: str) -> str:
    """Table and view names become path segments of default locations: '.' and '..' would escape."""
    if not name or not name.strip() or not name.isprintable() or len(name) > 255 or "/" in name or name in (".", ".."):
        raise BadRequest(
            f"Invalid {kind} name {name!r}: must be printable, non-empty, at most 255 characters, "
            "without '/', and not '.' or '..'"
        )
    return name


def decode_namespace(services: Services, raw: str) -> Namespace:
    """The path parameter, already percent-decoded by the router, split on the configured separator."""
    sep = services.settings.namespace_separator
    sep = "\x1f" if sep.upper() == "%1F" else sep
    parts = tuple(raw.split(sep))
    for p in parts:
        check_level(p)
    return parts


def ns_str(ns: Namespace) -> str:
    """A namespace in messages (``a.b``, or ``["a.b", "c"]`` when a level contains '.'); stored as ``nskeys.key``."""
    return nskeys.path_text(ns)


def require_namespace(services: Services, ns: Namespace) -> None:
    """The namespace itself exists (pyiceberg's ``namespace_exists`` would also accept a prefix of a
    dotted level: ``a`` "exists" beside ``a.b``)."""
    from pyiceberg.catalog.sql import IcebergNamespaceProperties as NsProps
    from sqlalchemy import select

    t = NsProps.__table__
    with services.catalog.engine.connect() as conn:
        row = conn.execute(
            select(t.c.namespace)
            .where(t.c.catalog_name == services.catalog.name, t.c.namespace == nskeys.key(ns))
            .limit(1)
        ).first()
    if row is None:
        raise NoSuchNamespace(f"Namespace does not exist: {ns_str(ns)}")


def parse_body(model: type[M], raw: bytes) -> M:
    """Validate a JSON body against a pydantic model; every failure is a 400 naming the field."""
    if not raw:
        raise BadRequest("Malformed request: a JSON body is required")
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        details = "; ".join(f"{'.'.join(str(x) for x in err['loc']) or 'body'}: {err['msg']}" for err in e.errors()[:5])
        raise BadRequest(f"Malformed request: {details}") from None
    except (ValueError, TypeError, KeyError, AttributeError, ArithmeticError) as e:  # pyiceberg's own validators
        # ArithmeticError: decimal.InvalidOperation from pyiceberg parsing a decimal default such as "NaN"
        raise BadRequest(f"Malformed request: {type(e).__name__}: {e}") from None


def parse_json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        raise BadRequest("Malformed request: body is not valid JSON") from None
    if not isinstance(value, dict):
        raise BadRequest("Malformed request: a JSON object body is required")
    return value


def paginate(
    items: Sequence[Any], page_token: str | None, page_size: int | None, key: Any = str
) -> tuple[list[Any], str | None]:
    """Stable keyset pagination over a sorted list; the token names the last key returned."""
    if page_size is not None and not 1 <= page_size <= MAX_PAGE_SIZE:
        raise BadRequest(f"pageSize must be between 1 and {MAX_PAGE_SIZE}")
    start = 0
    if page_token:
        try:
            last = json.loads(base64.urlsafe_b64decode(page_token.encode() + b"==").decode())
        except (ValueError, UnicodeDecodeError):
            raise BadRequest("Invalid pageToken: pass back the next-page-token of a previous response") from None
        start = next((i for i, it in enumerate(items) if key(it) > str(last)), len(items))
    if page_size is None:
        return list(items[start:]), None
    page = list(items[start : start + page_size])
    more = start + page_size < len(items)
    token = base64.urlsafe_b64encode(json.dumps(key(page[-1])).encode()).decode().rstrip("=") if more and page else None
    return page, token


def identifiers_page(
    ns: Namespace, names: Sequence[str], page_token: str | None, page_size: int | None
) -> dict[str, Any]:
    """A ListTablesResponse-shaped page (tables and views share it)."""
    page, token = paginate(names, page_token, page_size)
    out: dict[str, Any] = {"identifiers": [{"namespace": list(ns), "name": n} for n in page]}
    if token:
        out["next-page-token"] = token
    return out


_IAM_WILDCARDS = ("*", "?", "${")  # would widen a vended credential's session policy


def check_location(services: Services, location: str, what: str = "table location") -> str:
    """Files must stay inside the warehouse: no escape through '..', '.', an empty segment (``a//b``
    is ``a/b`` on a local disk), a sibling prefix (``…/wh`` never covers ``…/whx``), a relative path
    or another store or bucket; no IAM wildcards. 400 otherwise. Ownership is ``check_storage``'s."""
    location = location.rstrip("/")
    base = services.settings.warehouse.rstrip("/")
    segments = location.split("://", 1)[-1].split("/")
    inner = location[len(base) + 1 :].split("/") if location.startswith(base + "/") else []
    if (
        ".." in segments
        or "." in segments
        or "" in inner
        or not location.isprintable()
        or any(w in location for w in _IAM_WILDCARDS)
        or not (location == base or location.startswith(base + "/"))
    ):
        raise BadRequest(
            f"Invalid {what} {location!r}: must be inside the warehouse {base!r}, without '.', '..' or empty "
            "path segments, control characters or IAM wildcards ('*', '?', '${')"
        )
    return location


def storage_items(location: str, properties: dict[str, str] | None, kind: str = "table") -> list[tuple[str, str]]:
    """``(location, what)`` for a table's location and each path property, for ``LocationIndex``."""
    return [(location, f"{kind} location"), *path_items(properties, kind)]


def path_items(properties: dict[str, str] | None, kind: str = "table") -> list[tuple[str, str]]:
    return [(str(v), f"{kind} property {k}") for k, v in (properties or {}).items() if k.lower() in PATH_PROPERTIES]


def check_format_version(version: object) -> None:
    """Format versions 1–3 (``formatversion`` fills pyiceberg 0.12's v3 gaps); anything else is a 400."""
    if version is not None:
        try:
            formatversion.parse_format_version(version)
        except ValueError as e:
            raise BadRequest(str(e)) from None


def check_path_properties(services: Services, properties: dict[str, str] | None, kind: str = "table") -> None:
    """Properties that redirect where files are written obey ``check_location`` too."""
    for key, value in (properties or {}).items():
        if key.lower() in PATH_PROPERTIES:
            check_location(services, str(value), f"{kind} property {key}")


def json_bytes(body: bytes, status: int = 200) -> Response:
    return Response(content=body, status_code=status, media_type="application/json")


def tables_of(ctx: RequestContext) -> TableStore:
    ts = ctx.services.extras.get("tables")
    if ts is None:
        ts = ctx.services.extras.setdefault("tables", TableStore(ctx.services.catalog))
    return ts


_index_lock = threading.Lock()


def locations_of(services: Services) -> LocationIndex:
    """The storage-ownership index; objects made before it existed are indexed on first use."""
    index = services.extras.get("locations")
    if index is not None:
        return index
    with _index_lock:
        index = services.extras.get("locations")
        if index is None:
            index = LocationIndex(services.catalog.engine, services.catalog.name, services.settings.warehouse)
            if index.is_empty():
                ts = services.extras.setdefault("tables", TableStore(services.catalog))
                n = index.backfill(_existing_objects(services, ts))
                if n:
                    logger.info("storage-ownership index: %d prefixes of existing objects indexed", n)
            services.extras["locations"] = index
    return index


def default_namespace_location(services: Services, ns: Namespace) -> str:
    """Where a namespace's tables go when it has no ``location``: pyiceberg's ``{warehouse}/a.b``, with a
    dot inside a level escaped (``nskeys.path_segment``) so ``["a.b"]`` never lands on ``["a", "b"]``."""
    return f"{services.settings.warehouse.rstrip('/')}/{nskeys.path_segment(ns)}"


def namespace_home(services: Services, ns: Namespace, properties: dict[str, str]) -> str:
    return properties.get("location") or default_namespace_location(services, ns)


def check_in_namespace(
    ctx: RequestContext,
    ns: Namespace,
    ns_props: dict[str, str],
    items: Sequence[tuple[str, str]],
    kind: str = "table",
) -> None:
    """A table's or view's storage must lie inside its own namespace's location (``ns_props``: the
    namespace's properties). Else anyone who may create in ``scratch`` could place a table at another
    (perhaps not yet existing) namespace's home, ``{warehouse}/finance``, and squat it: 400 instead.
    (Registered storage locations overlap nothing, so no table may lie in one: ``storage_locations``.)"""
    home = normalize(namespace_home(ctx.services, ns, ns_props))
    for location, what in items:
        cand = normalize(location)
        if cand.startswith(home) and cand != home:
            continue
        raise BadRequest(
            f"Invalid {what} {location!r}: a {kind} must lie inside its namespace's location {home.rstrip('/')!r}; "
            "leave the location out for the default"
        )


def _existing_objects(services: Services, ts: TableStore) -> Iterator[tuple[Owner, list[str]]]:
    from pyiceberg.catalog.sql import IcebergNamespaceProperties as NsProps
    from sqlalchemy import select

    from .. import store

    engine, name = services.catalog.engine, services.catalog.name
    t = ts._t
    with engine.connect() as conn:
        tables = conn.execute(
            select(t.c.table_namespace, t.c.table_name, t.c.metadata_location).where(t.c.catalog_name == name)
        ).all()
        views = conn.execute(
            select(store.views.c.namespace, store.views.c.name, store.views.c.metadata_json).where(
                store.views.c.catalog_name == name
            )
        ).all()
        n = NsProps.__table__
        ns_rows = conn.execute(
            select(n.c.namespace, n.c.property_key, n.c.property_value).where(n.c.catalog_name == name)
        ).all()
    for ns_key, table, meta in tables:
        if not meta:
            continue
        try:
            doc = json.loads(ts.cache.get(meta, ts.catalog.properties))
        except (OSError, ValueError):
            logger.warning("backfill: cannot read the metadata of %s.%s", ns_str(nskeys.from_key(ns_key)), table)
            continue
        yield Owner.table(nskeys.from_key(ns_key), table), [doc["location"], *path_locations(doc.get("properties"))]
    for ns_key, view, text in views:
        yield Owner.view(nskeys.from_key(ns_key), view), [json.loads(text)["location"]]
    homes: dict[str, dict[str, str]] = {}
    for ns_key, key, value in ns_rows:
        homes.setdefault(ns_key, {})[key] = value
    for ns_key, props in homes.items():
        ns = nskeys.from_key(ns_key)
        yield Owner.namespace_(ns), [namespace_home(services, ns, props)]
