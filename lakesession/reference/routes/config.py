"""``GET /v1/config``: light on purpose (no pyiceberg), so a lazily mounted catalog answers it at once.

Spark 3.5's first query (even ``SELECT 1``) loads the default catalog, i.e. asks ``/v1/config``:
the embedded catalog serves it before the catalog routers are even imported (``app.py``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from ..context import RequestContext, in_context
from ..errors import NotFound

router = APIRouter()

IDEMPOTENCY_LIFETIME = "PT30M"  # idempotency.LIFETIME (a test keeps them equal; that module imports more)

#: ``METHOD /v1/{prefix}/...`` of every catalog route, as ``/v1/config`` advertises them; known without
#: importing the routers. ``tests/client/test_embedded_start.py`` checks it equals ``app.implemented_endpoints()``.
CATALOG_ENDPOINTS = (
    "GET /v1/{prefix}/lakesession/location-credentials",
    "GET /v1/{prefix}/lakesession/locations",
    "GET /v1/{prefix}/namespaces",
    "POST /v1/{prefix}/namespaces",
    "DELETE /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "POST /v1/{prefix}/namespaces/{namespace}/properties",
    "POST /v1/{prefix}/namespaces/{namespace}/register",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "POST /v1/{prefix}/namespaces/{namespace}/tables",
    "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/sign",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
    "POST /v1/{prefix}/namespaces/{namespace}/views",
    "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
    "POST /v1/{prefix}/tables/rename",
    "POST /v1/{prefix}/views/rename",
)


@router.get("/v1/config")
async def get_config(request: Request, warehouse: str | None = None) -> Response:
    """One threadpool hop for the whole request (``context.in_context``): clients call it first and often."""
    return await run_in_threadpool(in_context, request, lambda ctx: JSONResponse(_config(ctx, request, warehouse)))


def _config(ctx: RequestContext, request: Request, warehouse: str | None) -> dict[str, Any]:
    services = ctx.services
    settings = services.settings
    if warehouse not in (None, "", settings.catalog_name):
        raise NotFound(f"Unknown warehouse {warehouse!r}; this catalog serves warehouse {settings.catalog_name!r}")
    endpoints = request.app.state.endpoints
    return {
        "defaults": {"namespace-separator": settings.namespace_separator, **settings.extra_config},
        "overrides": {"prefix": settings.catalog_name, "warehouse": settings.catalog_name},
        "endpoints": endpoints,
        "idempotency-key-lifetime": IDEMPOTENCY_LIFETIME,
    }
