"""The catalog's OpenAPI document: the official Iceberg REST spec for what is implemented, plus the rest.

The Iceberg endpoints are described by the official spec (shipped as package data in
``spec/rest-catalog-open-api.yaml``), restricted to the operations this app actually
serves (``app.state.endpoints`` plus ``GET /v1/config`` and ``POST /v1/oauth/tokens``).
Everything else (``/management/v1/...``, ``/oidc/...``) comes from FastAPI's generated
schema. FastAPI component names that collide with the spec's are prefixed.

Usage::

    from lakesession.reference.openapi import install_openapi
    install_openapi(app)          # app.openapi() now returns the merged document
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import fastapi.routing
import yaml
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

SPEC_PATH = Path(__file__).parent / "spec" / "rest-catalog-open-api.yaml"

#: Iceberg operations served outside ``/v1/{prefix}`` (so not in ``app.state.endpoints``).
ALWAYS = ("GET /v1/config", "POST /v1/oauth/tokens")

#: Prefix given to FastAPI component names that collide with the spec's.
COLLISION_PREFIX = "Lakesession"

_HTTP_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")


def _json_keys(node: Any) -> Any:
    """YAML reads unquoted status codes (``200:``) as ints; JSON (and every OpenAPI tool) wants strings."""
    if isinstance(node, dict):
        return {str(k) if isinstance(k, int) else k: _json_keys(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_json_keys(v) for v in node]
    return node


@functools.lru_cache(maxsize=1)
def _load_spec() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    with SPEC_PATH.open("rb") as f:
        return _json_keys(yaml.load(f, Loader=loader))


def official_spec() -> dict[str, Any]:
    """A fresh deep copy of the official Iceberg REST catalog spec (parsed once per process)."""
    return copy.deepcopy(_load_spec())


def _route_contexts(app: FastAPI) -> list[Any]:
    """Every mounted route, flattened (FastAPI >= 0.16x keeps included routers nested in ``app.routes``)."""
    iter_contexts = getattr(fastapi.routing, "iter_route_contexts", None)
    return list(iter_contexts(app.routes)) if iter_contexts else list(app.routes)


def mounted_endpoints(app: FastAPI) -> list[str]:
    """``METHOD /v1/{prefix}/...`` for every catalog route actually mounted on ``app``."""
    out: set[str] = set()
    for route in _route_contexts(app):
        path = getattr(route, "path_format", None) or getattr(route, "path", None) or ""
        if path.startswith("/v1/{prefix}"):
            out.update(f"{m} {path}" for m in getattr(route, "methods", None) or ())
    return sorted(out)


def _endpoints(app: FastAPI) -> set[str]:
    # What /v1/config advertises; derived from the mounted routes when the app did not record it
    # (or recorded nothing, which is what app.implemented_endpoints yields on FastAPI versions whose
    # app.routes holds included routers instead of their routes).
    endpoints = getattr(app.state, "endpoints", None) or mounted_endpoints(app)
    return {e.strip() for e in endpoints} | set(ALWAYS)


def _rename_refs(node: Any, renames: dict[str, str]) -> Any:
    """Rewrite ``#/components/<section>/<name>`` references according to ``renames`` (keyed by full ref)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str) and v in renames:
                out[k] = renames[v]
            else:
                out[k] = _rename_refs(v, renames)
        return out
    if isinstance(node, list):
        return [_rename_refs(v, renames) for v in node]
    return node


def _needs_bearer(app: FastAPI) -> dict[tuple[str, str], bool]:
    """(path, method) -> whether the route authenticates the caller (depends on ``get_context``)."""
    from .context import get_context

    def walk(dep: Any) -> bool:
        if getattr(dep, "call", None) is get_context:
            return True
        return any(walk(d) for d in getattr(dep, "dependencies", ()) or ())

    out: dict[tuple[str, str], bool] = {}
    for route in _route_contexts(app):
        dependant = getattr(route, "dependant", None)
        if dependant is None:
            continue
        auth = walk(dependant)
        for m in getattr(route, "methods", None) or ():
            out[(route.path_format, m.lower())] = auth
    return out


_VALIDATION_SCHEMAS = ("#/components/schemas/HTTPValidationError",)


def _fix_fastapi_operation(op: dict[str, Any], authenticated: bool | None) -> dict[str, Any]:
    """Make FastAPI's generated operation tell the truth about this app.

    * Request validation failures are answered 400 ``IcebergErrorResponse`` (errors.py), never
      FastAPI's 422 ``HTTPValidationError``.
    * Routes that need a bearer token say so; the others (discovery, JWKS, token) opt out of the
      spec's global security requirement.
    """
    responses = op.get("responses") or {}
    r422 = responses.get("422")
    if r422 is not None:
        schema = ((r422.get("content") or {}).get("application/json") or {}).get("schema") or {}
        if schema.get("$ref") in _VALIDATION_SCHEMAS:
            del responses["422"]
            responses.setdefault("400", {"$ref": "#/components/responses/BadRequestErrorResponse"})
    if authenticated is not None and "security" not in op:
        op["security"] = [{"BearerAuth": []}] if authenticated else []
    if authenticated:
        responses.setdefault("401", {"$ref": "#/components/responses/UnauthorizedResponse"})
        responses.setdefault("403", {"$ref": "#/components/responses/ForbiddenResponse"})
    return op


def _referenced(doc: Any, acc: set[str]) -> set[str]:
    if isinstance(doc, dict):
        ref = doc.get("$ref")
        if isinstance(ref, str):
            acc.add(ref)
        for v in doc.values():
            _referenced(v, acc)
    elif isinstance(doc, list):
        for v in doc:
            _referenced(v, acc)
    return acc


def spec_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (a new dict on every call; ``install_openapi`` caches it)."""
    spec = official_spec()
    implemented = _endpoints(app)

    # 1. The official spec, restricted to implemented operations.
    paths: dict[str, Any] = {}
    covered: set[tuple[str, str]] = set()
    for path, item in spec["paths"].items():
        kept = {m: op for m, op in item.items() if m in _HTTP_METHODS and f"{m.upper()} {path}" in implemented}
        if not kept:
            continue
        covered.update((path, m) for m in kept)
        extra = {k: v for k, v in item.items() if k not in _HTTP_METHODS}
        paths[path] = {**extra, **kept}

    # 2. FastAPI's generated schema for everything the spec does not describe.
    generated = get_openapi(
        title=app.title,
        version=app.version,
        openapi_version=app.openapi_version,
        description=app.description,
        routes=app.routes,
        tags=app.openapi_tags,
    )
    gen_components: dict[str, dict[str, Any]] = generated.get("components") or {}
    spec_components: dict[str, dict[str, Any]] = spec.setdefault("components", {})
    renames: dict[str, str] = {}
    for section, entries in gen_components.items():
        taken = spec_components.get(section) or {}
        for name in entries:
            if name in taken:
                new = COLLISION_PREFIX + name
                while new in taken or new in entries:
                    new = COLLISION_PREFIX + new
                renames[f"#/components/{section}/{name}"] = f"#/components/{section}/{new}"

    auth = _needs_bearer(app)
    for path, item in (generated.get("paths") or {}).items():
        for method, op in item.items():
            if method not in _HTTP_METHODS or (path, method) in covered:
                continue
            op = _fix_fastapi_operation(_rename_refs(op, renames), auth.get((path, method)))
            paths.setdefault(path, {})[method] = op

    # 3. FastAPI's components (renamed where they collide), only those still referenced.
    used = _referenced(paths, set())
    pending = list(used)
    gen_renamed: dict[str, dict[str, Any]] = {}
    for section, entries in gen_components.items():
        for name, value in entries.items():
            ref = renames.get(f"#/components/{section}/{name}", f"#/components/{section}/{name}")
            gen_renamed.setdefault(section, {})[ref.rsplit("/", 1)[1]] = _rename_refs(value, renames)
    while pending:  # transitive closure over FastAPI's own components (renamed ones never collide)
        parts = pending.pop().split("/")
        if len(parts) != 4 or parts[:2] != ["#", "components"]:
            continue
        value = gen_renamed.get(parts[2], {}).get(parts[3])
        if value is None:
            continue  # one of the spec's components
        spec_components.setdefault(parts[2], {})[parts[3]] = value
        for inner in _referenced(value, set()) - used:
            used.add(inner)
            pending.append(inner)

    tags = list(spec.get("tags") or [])
    seen_tags = {t.get("name") for t in tags}
    for t in generated.get("tags") or []:
        if t.get("name") not in seen_tags:
            tags.append(t)

    doc: dict[str, Any] = {
        # The spec and FastAPI both speak OpenAPI 3.1; keep the spec's exact version string.
        "openapi": spec.get("openapi", generated.get("openapi", "3.1.0")),
        "info": {
            "title": app.title,
            "version": app.version,
            "description": (app.description or "").rstrip()
            + f"\n\nIceberg endpoints follow the Apache Iceberg REST Catalog API ({spec['info'].get('version')}).",
        },
        # Relative: the document describes whatever host serves it (the spec's templated servers
        # default to https://localhost, which would be wrong for every real deployment).
        "servers": [{"url": "/"}],
        "security": spec.get("security", []),
        "paths": dict(sorted(paths.items(), key=lambda kv: _path_sort_key(kv[0]))),
        "components": spec_components,
    }
    if tags:
        doc["tags"] = tags
    return doc


def _path_sort_key(path: str) -> tuple[int, str]:
    if path.startswith("/v1/"):
        return (0, path)
    return (1, re.sub(r"\{[^}]*\}", "", path))


def install_openapi(app: FastAPI) -> None:
    """Serve the merged document at ``/openapi.json`` (built on first use, then cached)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            getattr(app.state, "mount_catalog", lambda: None)()  # a lazily mounted catalog: describe it all
            app.openapi_schema = spec_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
