"""The gateway's ASGI app: authenticate the JVM by session secret, forward upstream as the user.

A plain ASGI callable (no FastAPI or Starlette: the client path stays light to import). The JVM's
Iceberg REST client only ever holds the per-session secret. Each call is forwarded with the user's
current token, its path exactly as received (``scope["raw_path"]``, still percent-encoded: Iceberg's
namespace separator ``%1F`` stays encoded, an encoded ``?`` can never become a query upstream);
status codes and error bodies pass through unchanged; table configs get their credential-refresh
endpoint pointed back at the gateway; concurrent refreshes of one table are coalesced into one
upstream call (single flight). Forwarding is blocking I/O (the token source may talk to the issuer),
so it runs in the app's own thread pool, sized like Starlette's.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import os
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, unquote

from .._singleflight import SingleFlight
from ._accesslog import AccessLog, AccessRecord, classify
from ._chains import ChainRoutes, strip_referenced_by, with_referenced_by
from ._credcache import CredentialCache, earliest_expiry
from ._upstream import Reply, Upstream, error_reply

__all__ = ["GatewayApp", "Upstream", "create_gateway_app", "default_region", "rewrite_table_config"]

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
METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD")
REFRESH_ENDPOINT = "client.refresh-credentials-endpoint"
CREDENTIALS_ENDPOINT = "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}/credentials"
THREADS = 40  # Starlette's default thread pool: JVM threads block here while a refresh or commit is upstream


def default_region() -> str:
    """The region the JVM gets when the catalog names none: the environment's, else us-east-1."""
    return os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"


def rewrite_table_config(
    body: bytes, upstream_base: str, gateway_base: str, region: str | None = None, refresh_endpoint: str | None = None
) -> bytes:
    """Point every absolute catalog URL in a table's configs (credential refresh endpoint, remote
    signer URI) at the gateway, so the JVM never needs the user's token (relative paths already do).

    A table result without ``client.region`` gets one (the catalog's ``s3.region``, else ``region``):
    Iceberg Java's S3 client cannot start without a region, and catalogs for S3-compatible stores
    (SeaweedFS, MinIO) often advertise none.

    ``refresh_endpoint`` (the gateway's own ``…/credentials`` for this table) is set as the table's
    ``client.refresh-credentials-endpoint`` when vended credentials come without one, so the JVM
    refreshes through the gateway even where the catalog has no ``/credentials`` route."""
    urls = upstream_base.encode() in body
    inject = refresh_endpoint is not None and b"refresh-credentials-endpoint" not in body and b"access-key-id" in body
    if not urls and not inject and (region is None or b'"client.region"' in body):
        return body
    try:
        doc = json.loads(body)
    except ValueError:
        return body
    if not isinstance(doc, dict):
        return body
    holders = [doc.get("config") or {}] + [c.get("config") or {} for c in doc.get("storage-credentials") or []]
    changed = False
    for holder in holders if urls else []:
        for key, value in holder.items():
            if isinstance(value, str) and (value == upstream_base or value.startswith(upstream_base + "/")):
                holder[key] = gateway_base + value[len(upstream_base) :]
                changed = True
    if region is not None and "metadata" in doc and not any("client.region" in h for h in holders):
        named = next((h["s3.region"] for h in holders if isinstance(h.get("s3.region"), str)), None)
        doc["config"] = {**(doc.get("config") or {}), "client.region": named or region}
        changed = True
    if inject and "metadata" in doc:
        doc["config"] = {**(doc.get("config") or {}), REFRESH_ENDPOINT: refresh_endpoint}
        changed = True
    return json.dumps(doc).encode() if changed else body


def credentials_from_table(body: bytes) -> bytes:
    """A LoadCredentialsResponse made from a LoadTableResult (a reload vends fresh credentials on
    catalogs without ``/credentials``): its ``storage-credentials``, else the config's keys for the table."""
    doc = json.loads(body)
    creds = doc.get("storage-credentials") or []
    config = {k: v for k, v in (doc.get("config") or {}).items() if isinstance(v, str) and k != REFRESH_ENDPOINT}
    if not creds and any(k.endswith(("access-key-id", "secret-access-key", "session-token")) for k in config):
        creds = [{"prefix": doc["metadata"]["location"], "config": config}]
    return json.dumps({"storage-credentials": creds}).encode()


def refuse_path(raw_path: str) -> str | None:
    """Why ``raw_path`` may not be forwarded, or None. A segment decoding to ``.``/``..`` would be
    resolved by the HTTP client (reaching another path than the one checked); one decoding to ``?``
    or ``#`` would become a query or fragment for any hop that decodes before re-parsing."""
    if not raw_path.startswith("/"):
        return "the path must start with '/'"
    for segment in raw_path.split("/")[1:]:
        decoded = unquote(segment)
        if decoded in (".", ".."):
            return "dot segments ('.', '..') are not allowed in catalog paths"
        if "?" in decoded or "#" in decoded:
            return "an encoded '?' or '#' is not allowed in catalog paths (it would smuggle a query)"
    return None


class GatewayApp:
    """The ASGI callable serving the main route and the chain routes (``/chain/{id}/…``)."""

    def __init__(
        self,
        upstream: Upstream,
        secret: str,
        access_log: AccessLog,
        gateway_base: Callable[[], str],
        credentials: CredentialCache,
        chains: ChainRoutes | None = None,
        region: str | None = None,
    ):
        self.upstream = upstream
        self.region = region if region is not None else default_region()
        self.offers_credentials: bool | None = None  # from the catalog's /v1/config endpoints, once seen
        self._expected = f"Bearer {secret}".encode()
        self.access_log = access_log
        self._gateway_base = gateway_base
        self.credentials = credentials
        self.routes = chains if chains is not None else ChainRoutes()
        self._flights: SingleFlight[Reply] = SingleFlight()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _note_endpoints(self, config_body: bytes) -> None:
        offered = _offers_credentials(config_body)
        if offered is not None:
            self.offers_credentials = offered

    def _note_load(self, path: str, query: str, req_headers: dict[str, str], reply: Reply) -> None:
        """A table load's credentials feed the refresh cache under the keys the table's ``/credentials``
        requests use (same path, same ``referenced-by``; the load's delegation header, or none — Iceberg
        Java's credential refresher sends none); a refused load evicts them."""
        status, content, out_headers = reply
        if status != 200 and status not in (401, 403, 404):
            return  # an outage or a conflict says nothing about the grant
        refresh_query = "&".join(p for p in query.split("&") if p and not strip_referenced_by(p))  # referenced-by
        delegation = req_headers.get("x-iceberg-access-delegation", "")
        for key in {f"{path}/credentials?{refresh_query}|{d}" for d in (delegation, "")}:
            if status != 200:
                self.credentials.evict(key)
            elif b"expires-at-ms" in content:
                self.credentials.offer(key, (200, credentials_from_table(content), out_headers))

    # -- ASGI ------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # served with lifespan="off"; nothing to set up if not
            while True:
                kind = (await receive())["type"]
                await send({"type": kind + ".complete"})
                if kind == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        method = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        raw = scope.get("raw_path")
        raw_path = raw.decode("latin-1") if raw else quote(scope["path"])
        query = scope.get("query_string", b"").decode("latin-1")
        try:
            reply = self._early(method, raw_path, headers)
            if reply is None:
                loop = asyncio.get_running_loop()
                reply = await loop.run_in_executor(
                    self._executor(), self.handle, method, raw_path, query, headers, bytes(body)
                )
        except Exception as exc:  # a bug of the gateway: still a clean, secret-free ErrorModel, never a 500
            logger.error(
                "gateway failure on %s %s (%s)\n%s",
                method,
                raw_path,
                type(exc).__name__,
                "".join(traceback.format_tb(exc.__traceback__)),
            )
            msg = f"The lakesession gateway failed ({type(exc).__name__}) before the catalog answered; retry"
            reply = error_reply(503, "ServiceUnavailableException", msg, 1)
        await _send(send, method, reply)

    def _executor(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="lakesession-gateway")
            return self._pool

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False, cancel_futures=True)
                self._pool = None
        self.upstream.close()

    def _early(self, method: str, raw_path: str, headers: dict[str, str]) -> Reply | None:
        """Answers that need no upstream call: wrong secret, method or path."""
        if not hmac.compare_digest(headers.get("authorization", "").encode("latin-1"), self._expected):
            return error_reply(
                401, "NotAuthorizedException", "Not authorized: wrong or missing lakesession session secret"
            )
        if method not in METHODS:
            return error_reply(405, "BadRequestException", f"Method {method} is not part of the Iceberg REST API")
        why = refuse_path(raw_path)
        if why is not None:
            return error_reply(400, "BadRequestException", f"Malformed request path: {why}")
        return None

    # -- routing (blocking, in the pool) ---------------------------------------------------------------
    def handle(self, method: str, raw_path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        if not raw_path.startswith("/chain/"):
            # the main catalog keeps INVOKER semantics: view chains only through chain routes
            return self._handle(method, raw_path, strip_referenced_by(query), headers, body, self._gateway_base(), None)
        route_id, _, rest = raw_path[len("/chain/") :].partition("/")
        route = self.routes.get(route_id)
        if route is None:
            return error_reply(
                403,
                "ForbiddenException",
                "Unknown view-chain catalog: chain catalogs exist only for queries run through Session.sql",
            )
        ok, why = route.permits(method, "/" + rest)
        if not ok:
            return error_reply(403, "ForbiddenException", f"Forbidden through view chain {route.display}: {why}")
        if rest.rstrip("/") != "v1/config":
            query = with_referenced_by(query, route.referenced_by)
        return self._handle(
            method, "/" + rest, query, headers, body, f"{self._gateway_base()}/chain/{route.id}", route.display
        )

    def _handle(
        self, method: str, path: str, query: str, req_headers: dict[str, str], body: bytes, base: str, chain: str | None
    ) -> Reply:
        headers = {k: v for k, v in req_headers.items() if k in FORWARD_REQUEST_HEADERS}
        started = time.monotonic()
        what = classify(method, path)
        logger.debug("%s %s -> %s", method, path, what)
        if what is None and method == "POST" and path.endswith(("/tables", "/views")):
            what = _create_target(path, body)
        via = "upstream"
        if what and what[0] == "refresh_credentials":
            key = f"{path}?{query}|{req_headers.get('x-iceberg-access-delegation', '')}"
            cached = self.credentials.get(key)
            if cached is not None:
                (status, content, out_headers), via = cached, "cache"
            else:

                def fetch() -> Reply:
                    if self.offers_credentials is False:  # no /credentials upstream: reload the table
                        reply = self.upstream.forward(method, path[: -len("/credentials")], query, headers, body)
                        if reply[0] == 200:
                            reply = (200, credentials_from_table(reply[1]), reply[2])
                    else:
                        reply = self.upstream.forward(method, path, query, headers, body)
                    self.credentials.store(key, reply)
                    return reply

                (status, content, out_headers), shared = self._flights.do(key, fetch)
                via = "shared" if shared else "upstream"
        else:
            status, content, out_headers = self.upstream.forward(method, path, query, headers, body)
            if what and what[0] == "load_table" and method == "GET":
                self._note_load(path, query, req_headers, (status, content, out_headers))
        if status == 200 and path.rstrip("/").endswith("/v1/config"):
            self._note_endpoints(content)
        if status == 200 and "/tables" in path:
            own = f"{base}{path}/credentials" if what and what[0] in ("load_table", "create_table") else None
            content = rewrite_table_config(content, self.upstream.base_url, base, self.region, own)
        if what:
            self.access_log.add(
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
        return status, content, out_headers


def create_gateway_app(
    upstream: Upstream,
    secret: str,
    access_log: AccessLog,
    gateway_base: Callable[[], str],
    credentials: CredentialCache,
    chains: ChainRoutes | None = None,
) -> GatewayApp:
    return GatewayApp(upstream, secret, access_log, gateway_base, credentials, chains)


def _offers_credentials(config_body: bytes) -> bool | None:
    """Whether a ``/v1/config`` answer lists the loadCredentials endpoint (None: it lists no endpoints,
    which per the spec means only the defaults, among which ``/credentials`` is not)."""
    try:
        endpoints = json.loads(config_body).get("endpoints")
    except (ValueError, AttributeError):
        return None
    return CREDENTIALS_ENDPOINT in endpoints if isinstance(endpoints, list) else False


async def _send(send: Any, method: str, reply: Reply) -> None:
    status, content, out_headers = reply
    body = b"" if method == "HEAD" or status in (204, 304) else content
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in out_headers.items() if k != "content-length"]
    if status not in (204, 304):
        headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _create_target(path: str, body: bytes) -> tuple[str, str] | None:
    parts = path.rstrip("/").split("/")
    try:
        name = json.loads(body).get("name")
        ns = unquote(parts[-2]).replace("\x1f", ".")
    except (ValueError, AttributeError, IndexError):
        return None
    kind = parts[-1][:-1]
    return (f"create_{kind}", f"{kind} {ns}.{name}") if isinstance(name, str) else None
