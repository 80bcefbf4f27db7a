"""The gateway's ASGI app: authenticate the JVM by session secret, forward upstream as the user.

The JVM's Iceberg REST client only ever holds the per-session secret. Each
call is forwarded with the user's current token; status codes and error
bodies pass through unchanged; table configs get their credential-refresh
endpoint pointed back at the gateway; concurrent refreshes of one table are
coalesced into one upstream call (single flight).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import unquote

import httpx
from fastapi import Depends, FastAPI, Request, Response

from .._singleflight import SingleFlight
from ._accesslog import AccessLog, AccessRecord, classify
from ._chains import ChainRoutes, strip_referenced_by, with_referenced_by
from ._credcache import CredentialCache, earliest_expiry

logger = logging.getLogger("lakesession.gateway")

FORWARD_REQUEST_HEADERS = (
    "content-type",
    "accept",
    "x-iceberg-access-delegation",
    "x-request-id",
    "if-none-match",
    "idempotency-key",
    "accept-encoding",
)
FORWARD_RESPONSE_HEADERS = ("content-type", "etag", "cache-control", "www-authenticate", "x-request-id", "retry-after")
METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD"]


def error(status: int, type_: str, message: str) -> Response:
    body = json.dumps({"error": {"message": message, "type": type_, "code": status}})
    return Response(body, status_code=status, media_type="application/json")


@dataclass
class Upstream:
    """Where and as whom to forward. ``base`` may be a callable so the catalog can finish starting
    while the JVM launches (the first forwarded call waits for it)."""

    base: str | Callable[[], str]
    token: Callable[[], str]
    invalidate: Callable[[], None]
    client: httpx.Client

    @property
    def base_url(self) -> str:
        return (self.base() if callable(self.base) else self.base).rstrip("/")


def rewrite_table_config(body: bytes, upstream_base: str, gateway_base: str) -> bytes:
    """Point every absolute catalog URL in a table's configs (credential refresh endpoint, remote
    signer URI) at the gateway, so the JVM never needs the user's token (relative paths already do)."""
    if upstream_base.encode() not in body:
        return body
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    changed = False
    for holder in [doc.get("config") or {}] + [c.get("config") or {} for c in doc.get("storage-credentials") or []]:
        for key, value in holder.items():
            if isinstance(value, str) and (value == upstream_base or value.startswith(upstream_base + "/")):
                holder[key] = gateway_base + value[len(upstream_base) :]
                changed = True
    return json.dumps(doc).encode() if changed else body


def create_gateway_app(
    upstream: Upstream,
    secret: str,
    access_log: AccessLog,
    gateway_base: Callable[[], str],
    credentials: CredentialCache,
    chains: ChainRoutes | None = None,
) -> FastAPI:
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    routes = chains if chains is not None else ChainRoutes()
    flights = SingleFlight()
    expected = f"Bearer {secret}".encode()

    def forward(
        method: str, path: str, query: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, dict[str, str]]:
        url = upstream.base_url + path + (f"?{query}" if query else "")
        for attempt in (1, 2):
            h = {**headers, "Authorization": f"Bearer {upstream.token()}"}
            try:
                r = upstream.client.request(method, url, headers=h, content=body or None)
            except httpx.HTTPError as e:
                logger.warning("catalog unreachable: %s %s (%s)", method, path, type(e).__name__)
                msg = f"Catalog at {upstream.base_url} is unreachable ({type(e).__name__}); retry when it is back"
                return (
                    503,
                    json.dumps(
                        {"error": {"message": msg, "type": "ServiceUnavailableException", "code": 503}}
                    ).encode(),
                    {"content-type": "application/json"},
                )
            if r.status_code == 401 and attempt == 1:
                upstream.invalidate()  # the token may have been revoked or expired early: fetch a new one once
                continue
            out_headers = {k: v for k, v in r.headers.items() if k.lower() in FORWARD_RESPONSE_HEADERS}
            return r.status_code, r.content, out_headers
        raise AssertionError("unreachable")

    async def raw_body(request: Request) -> bytes:
        return await request.body()

    @app.api_route("/{path:path}", methods=METHODS)
    def proxy(request: Request, path: str, body: bytes = Depends(raw_body)) -> Response:
        auth = request.headers.get("authorization", "").encode()
        if not hmac.compare_digest(auth, expected):
            return error(401, "NotAuthorizedException", "Not authorized: wrong or missing lakesession session secret")
        query = request.url.query
        if not path.startswith("chain/"):
            # the main catalog keeps INVOKER semantics: view chains only through chain routes
            return _handle(
                request.method,
                "/" + path,
                strip_referenced_by(query),
                dict(request.headers),
                body,
                gateway_base(),
                None,
            )
        route_id, _, rest = path[len("chain/") :].partition("/")
        route = routes.get(route_id)
        if route is None:
            return error(
                403,
                "ForbiddenException",
                "Unknown view-chain catalog: chain catalogs exist only for queries run through Session.sql",
            )
        ok, why = route.permits(request.method, "/" + rest)
        if not ok:
            return error(403, "ForbiddenException", f"Forbidden through view chain {route.display}: {why}")
        if rest.rstrip("/") != "v1/config":
            query = with_referenced_by(query, route.referenced_by)
        return _handle(
            request.method,
            "/" + rest,
            query,
            dict(request.headers),
            body,
            f"{gateway_base()}/chain/{route.id}",
            route.display,
        )

    def _handle(
        method: str, path: str, query: str, req_headers: dict[str, str], body: bytes, base: str, chain: str | None
    ) -> Response:
        headers = {k: v for k, v in req_headers.items() if k.lower() in FORWARD_REQUEST_HEADERS}
        started = time.monotonic()
        what = classify(method, path)
        logger.debug("%s %s -> %s", method, path, what)
        if what is None and method == "POST" and path.endswith(("/tables", "/views")):
            what = _create_target(path, body)
        via = "upstream"
        if what and what[0] == "refresh_credentials":
            key = f"{path}?{query}|{req_headers.get('x-iceberg-access-delegation', '')}"
            cached = credentials.get(key)
            if cached is not None:
                (status, content, out_headers), via = cached, "cache"
            else:

                def fetch() -> tuple[int, bytes, dict[str, str]]:
                    reply = forward(method, path, query, headers, body)
                    credentials.store(key, reply)
                    return reply

                (status, content, out_headers), shared = flights.do(key, fetch)
                via = "shared" if shared else "upstream"
        else:
            status, content, out_headers = forward(method, path, query, headers, body)
        out_headers = dict(out_headers)
        if status == 200 and "/tables" in path:
            content = rewrite_table_config(content, upstream.base_url, base)
        if what:
            access_log.add(
                AccessRecord(
                    time=time.time(),
                    action=what[0],
                    object=what[1],
                    status=status,
                    duration_ms=round((time.monotonic() - started) * 1000, 2),
                    request_id=out_headers.get("x-request-id"),
                    credentials_expire_at=earliest_expiry(content) if status == 200 else None,
                    via=via,
                    chain=chain,
                )
            )
        media = out_headers.pop("content-type", None)
        return Response(content if method != "HEAD" else b"", status_code=status, headers=out_headers, media_type=media)

    return app


def _create_target(path: str, body: bytes) -> tuple[str, str] | None:
    parts = path.rstrip("/").split("/")
    try:
        name = json.loads(body).get("name")
        ns = unquote(parts[-2]).replace("\x1f", ".")
    except (ValueError, AttributeError, IndexError):
        return None
    kind = parts[-1][:-1]
    return (f"create_{kind}", f"{kind} {ns}.{name}") if isinstance(name, str) else None
