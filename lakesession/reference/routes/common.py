"""Shared route helpers: prefix checks, namespace decoding, pagination, body parsing."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from ..context import Services
from ..errors import BadRequest, NoSuchNamespace, NotFound

M = TypeVar("M", bound=BaseModel)
Namespace = tuple[str, ...]

MAX_PAGE_SIZE = 1000


def services_of(request: Request) -> Services:
    return request.app.state.services


def check_prefix(services: Services, prefix: str) -> None:
    if prefix != services.settings.catalog_name:
        raise NotFound(f"Unknown warehouse prefix {prefix!r}; GET /v1/config tells the prefix to use")


def check_level(level: str) -> str:
    if not level or not level.strip() or not level.isprintable() or "." in level or len(level) > 255:
        raise BadRequest(
            f"Invalid namespace level {level!r}: levels must be printable, not blank, at most 255 characters, without '.'"
        )
    return level


def check_name(kind: str, name: str) -> str:
    if not name or not name.strip() or not name.isprintable() or len(name) > 255 or "/" in name:
        raise BadRequest(f"Invalid {kind} name {name!r}: must be non-empty, at most 255 characters, without '/'")
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
    """Namespaces as stored by pyiceberg's SqlCatalog: levels joined with dots."""
    return ".".join(ns)


def require_namespace(services: Services, ns: Namespace) -> None:
    from pyiceberg.exceptions import NoSuchNamespaceError

    try:
        exists = services.catalog.namespace_exists(ns_str(ns))
    except NoSuchNamespaceError:
        exists = False
    if not exists:
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
    except (ValueError, TypeError, KeyError, AttributeError) as e:  # pyiceberg's own validators
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


PATH_PROPERTIES = ("write.data.path", "write.metadata.path", "write.object-storage.path", "write.folder-storage.path")


def check_location(services: Services, location: str, what: str = "table location") -> str:
    """Files must stay inside the warehouse: no escape through '..', '.', a sibling prefix
    (``…/wh`` never covers ``…/whx``), a relative path or another store. 400 otherwise."""
    location = location.rstrip("/")
    base = services.settings.warehouse.rstrip("/")
    segments = location.split("://", 1)[-1].split("/")
    if ".." in segments or "." in segments or not (location == base or location.startswith(base + "/")):
        raise BadRequest(f"Invalid {what} {location!r}: must be inside the warehouse {base!r}")
    return location


def check_path_properties(services: Services, properties: dict[str, str] | None, kind: str = "table") -> None:
    """Properties that redirect where files are written obey ``check_location`` too."""
    for key, value in (properties or {}).items():
        if key.lower() in PATH_PROPERTIES:
            check_location(services, str(value), f"{kind} property {key}")
