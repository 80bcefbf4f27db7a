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
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, unquote

from .._idempotency import RETRY_STATUSES, advertises_keys, backoff, is_mutation, new_key
from .._wire.singleflight import SingleFlight
from . import _signer
from ._accesslog import AccessLog
from ._chains import ChainRoutes, strip_referenced_by
from ._credcache import CredentialCache
from ._handlers import FORWARD_REQUEST_HEADERS, Call, Handlers
from ._intake import MAX_BODY_BYTES, network, read_body, refuse_client
from ._paths import PathRoutes
from ._policies import policy_for
from ._rewrite import (
    JVM_SEPARATOR,
    credentials_from_table,
    default_region,
    namespace_separator,
    offers_credentials,
    rewrite_table_config,
    stamp_expiry,
)
from ._routes import CATALOG, parse_route
from ._signer import SignerRoutes
from ._upstream import Reply, Upstream, error_reply, send_reply

__all__ = [
    "FORWARD_REQUEST_HEADERS",
    "MAX_BODY_BYTES",
    "GatewayApp",
    "Upstream",
    "create_gateway_app",
    "default_region",
    "rewrite_table_config",
    "stamp_expiry",
]

logger = logging.getLogger("lakesession.gateway")

METHODS = ("GET", "POST", "PUT", "DELETE", "HEAD")
KEYED_RETRY_WINDOW = 30.0  # seconds the gateway retries a keyed mutation (the JVM's request stays open meanwhile)
THREADS = 40  # Starlette's default thread pool: JVM threads block here while a refresh or commit is upstream


def refuse_path(raw_path: str) -> str | None:
    """Why ``raw_path`` may not be forwarded, or None. A segment decoding to ``.``/``..`` would be
    resolved by the HTTP client (reaching another path than the one checked); one decoding to ``?``
    or ``#`` would become a query or fragment for any hop that decodes before re-parsing."""
    if raw_path[:1] != "/":
        return "the path must start with '/'"
    for segment in raw_path.split("/")[1:]:
        decoded = unquote(segment)
        if decoded in (".", ".."):
            return "dot segments ('.', '..') are not allowed in catalog paths"
        if "?" in decoded or "#" in decoded:
            return "an encoded '?' or '#' is not allowed in catalog paths (it would smuggle a query)"
    return None


class GatewayApp(Handlers):
    """The ASGI callable serving the main route, the chain routes (``/chain/{id}/…``), ``/sign/{id}`` and
    ``/lakesession/…``: parsed once (``_routes``), answered by the handler table (``_handlers``)."""

    def __init__(
        self,
        upstream: Upstream,
        secret: str,
        access_log: AccessLog,
        gateway_base: Callable[[], str],
        credentials: CredentialCache,
        chains: ChainRoutes | None = None,
        region: str | None = None,
        assumed_ttl: float | None = None,
        access: str | None = None,
        allowed_clients: Sequence[str] | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ):
        self.upstream = upstream
        self.allowed_clients = None if allowed_clients is None else [network(a) for a in allowed_clients]
        self.max_body_bytes = max_body_bytes
        self.assumed_ttl = assumed_ttl  # lifetime assumed for keys vended with no stated expiry
        self.access = access  # the session's access mode (None: the engine's choice, i.e. vended credentials)
        self.policy = policy_for(access, self)  # everything the mode decides (``_policies``), chosen once
        self.signers = SignerRoutes()
        self.region = region if region is not None else default_region()
        self.offers_credentials: bool | None = None  # from the catalog's /v1/config endpoints, once seen
        self.endpoints: list[str] | None = None  # the endpoints that /v1/config listed, once seen
        self.keys_supported = False  # the catalog advertises idempotency-key-lifetime (its /v1/config, once seen)
        self.keyed_retry_window = KEYED_RETRY_WINDOW
        self.namespace_separator = JVM_SEPARATOR  # the catalog's, from its /v1/config (Apache's fixture: %2E)
        self._expected = f"Bearer {secret}".encode()
        self.access_log = access_log
        self._gateway_base = gateway_base
        self.credentials = credentials
        self.routes = chains if chains is not None else ChainRoutes()
        self._flights: SingleFlight[Reply] = SingleFlight()
        self.paths = PathRoutes(upstream, access_log, self.table_credentials)
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def _note_endpoints(self, config_body: bytes) -> None:
        offered = offers_credentials(config_body)
        if offered is not None:
            self.offers_credentials = offered
        self.endpoints = _signer.config_endpoints(config_body)
        self.keys_supported = advertises_keys(config_body)
        self.namespace_separator = namespace_separator(config_body)

    def _note_load(self, path: str, query: str, req_headers: dict[str, str], reply: Reply) -> None:
        """A table load's credentials feed the refresh cache under the keys the table's ``/credentials``
        requests use (same path, same ``referenced-by``; the load's delegation header, or none — Iceberg
        Java's credential refresher sends none); a refused load evicts them."""
        status, content, out_headers = reply
        if status != 200 and status not in (401, 403, 404):
            return  # an outage or a conflict says nothing about the grant
        refresh_query = "&".join(p for p in query.split("&") if p and not strip_referenced_by(p))  # referenced-by
        delegation = req_headers.get("x-iceberg-access-delegation", "")
        vended = status == 200 and b"expires-at-ms" in content  # a load without keys: the data grant is gone
        self.paths.table_answered(path, 403 if status == 200 and "vended" in delegation and not vended else status)
        for key in {f"{path}/credentials?{refresh_query}|{d}" for d in (delegation, "")}:
            if status != 200:
                self.credentials.evict(key)
            elif b"expires-at-ms" in content:
                self.credentials.offer(key, (200, credentials_from_table(content), out_headers))
        if status == 200 and not refresh_query:  # never a chain's table: its keys serve only its chain route
            self.paths.note_table(path, refresh_query, content)

    def table_credentials(self, path: str, query: str, min_valid: float) -> Reply:
        """A loaded table's credentials with ``min_valid`` s of life: the refresh cache, else one refresh."""
        key = f"{path}/credentials?{query}|"
        cached = self.credentials.get(key, min_valid)
        if cached is not None:
            return cached
        headers = {"accept": "application/json"}
        return self._flights.do(key, lambda: self._fetch_credentials(f"{path}/credentials", query, headers, key))[0]

    def _fetch_credentials(self, path: str, query: str, headers: dict[str, str], key: str) -> Reply:
        if self.offers_credentials is False:  # no /credentials upstream: reload the table
            reply = self.upstream.forward("GET", path[: -len("/credentials")], query, headers, b"")
            if reply[0] == 200:
                reply = (200, credentials_from_table(reply[1]), reply[2])
        else:
            reply = self.upstream.forward("GET", path, query, headers, b"")
        if reply[0] == 200:
            reply = (200, stamp_expiry(reply[1], self.assumed_ttl), reply[2])
        self.paths.table_answered(path[: -len("/credentials")], reply[0])  # a 403: no S3A union key covers it
        self.credentials.store(key, reply)
        return reply

    # -- ASGI ------------------------------------------------------------------------------------
    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":  # nothing to set up: startup and shutdown complete at once
            while True:
                kind = (await receive())["type"]
                await send({"type": kind + ".complete"})
                if kind == "lifespan.shutdown":
                    return
        if scope["type"] != "http":
            return
        method = scope["method"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        raw = scope.get("raw_path")
        raw_path = raw.decode("latin-1") if raw else quote(scope["path"])
        query = scope.get("query_string", b"").decode("latin-1")
        # who may talk to us and with which secret is settled before a byte of the body is read:
        # an unauthenticated caller must not make this process buffer anything
        refused = refuse_client(self.allowed_clients, scope.get("client")) or self._early(method, raw_path, headers)
        body = b""
        if refused is None:
            read = await read_body(receive, headers, self.max_body_bytes)
            if read is None:
                return  # the client went away
            body, refused = read
        if refused is not None:
            status, content, out = refused
            await send_reply(send, method, (status, content, {**out, "connection": "close"}))
            return
        try:
            loop = asyncio.get_running_loop()
            reply = await loop.run_in_executor(self._executor(), self.handle, method, raw_path, query, headers, body)
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
        await send_reply(send, method, reply)

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
        """One request through the handler table; a catalog call on the main route keeps INVOKER semantics
        (its ``referenced-by`` stripped: view chains only through chain routes)."""
        route = parse_route(method, raw_path)
        if route.endpoint in CATALOG:
            return self.dispatch(Call(route, strip_referenced_by(query), headers, body, self._gateway_base()))
        return self.dispatch(Call(route, query, headers, body))

    def _forward(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        """Forward upstream; a mutation carries an ``Idempotency-Key`` — the JVM's own when it sent one
        (Iceberg from 1.11 does; 1.10 never does), else one made here — and, when the catalog honours
        keys, is retried with that same key while the catalog is unreachable or answers 502/503/504:
        a commit the catalog saved before dying is then answered from its stored outcome, once."""
        if not is_mutation(method, path):
            return self.upstream.forward(method, path, query, headers, body)
        if "idempotency-key" not in headers:
            headers = {**headers, "idempotency-key": new_key()}
        reply = self.upstream.forward(method, path, query, headers, body)
        if not self.keys_supported:
            return reply
        deadline = time.monotonic() + self.keyed_retry_window
        attempt = 0
        while reply[0] in RETRY_STATUSES and time.monotonic() < deadline:
            attempt += 1
            delay = min(backoff(attempt, reply[2].get("retry-after")), max(0.0, deadline - time.monotonic()))
            logger.info("%s %s: %d; retrying with the same Idempotency-Key in %.1f s", method, path, reply[0], delay)
            time.sleep(delay)
            reply = self.upstream.forward(method, path, query, headers, body)
        return reply


def create_gateway_app(
    upstream: Upstream,
    secret: str,
    access_log: AccessLog,
    gateway_base: Callable[[], str],
    credentials: CredentialCache,
    chains: ChainRoutes | None = None,
    assumed_ttl: float | None = None,
    access: str | None = None,
    allowed_clients: Sequence[str] | None = None,
) -> GatewayApp:
    return GatewayApp(
        upstream,
        secret,
        access_log,
        gateway_base,
        credentials,
        chains,
        assumed_ttl=assumed_ttl,
        access=access,
        allowed_clients=allowed_clients,
    )
