"""The gateway's handler table: one short handler per endpoint ``_routes`` tells apart.

Why a table: the endpoint is parsed once (``parse_route``) and looked up here, so each handler says only
what its endpoint needs — the view-chain check, the credential cache, the policy's refusals — and the
access-mode decisions stay in the policy (``_policies``). Mixed into ``GatewayApp``, which owns the state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .._wire.singleflight import SingleFlight
from ._accesslog import AccessLog, AccessRecord
from ._chains import ChainRoute, ChainRoutes, with_referenced_by
from ._credcache import CredentialCache, earliest_expiry
from ._paths import PathRoutes
from ._policies import AccessPolicy
from ._rewrite import rewrite_table_config, with_separator, without_namespace_head
from ._routes import TABLES, Endpoint, Route
from ._signer import SignerRoutes, forward_sign, signer_path
from ._upstream import Reply, Upstream, error_reply

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


@dataclass(frozen=True)
class Call:
    """One request on its way through the table: its route and, for catalog calls, the catalog base the JVM
    sees (the main route or a chain's), the view chain, and the path forwarded (in the catalog's separator)."""

    route: Route
    query: str
    headers: dict[str, str]
    body: bytes
    base: str = ""
    chain: ChainRoute | None = None
    path: str = ""

    def forwarded_headers(self) -> dict[str, str]:
        return {k: v for k, v in self.headers.items() if k in FORWARD_REQUEST_HEADERS}


class Handlers:
    """The handlers (see the module docstring); ``GatewayApp`` provides the state below."""

    upstream: Upstream
    access_log: AccessLog
    credentials: CredentialCache
    routes: ChainRoutes
    signers: SignerRoutes
    paths: PathRoutes
    policy: AccessPolicy
    namespace_separator: str
    _flights: SingleFlight[Reply]
    _gateway_base: Callable[[], str]

    def _forward(self, method: str, path: str, query: str, headers: dict[str, str], body: bytes) -> Reply:
        raise NotImplementedError

    def _fetch_credentials(self, path: str, query: str, headers: dict[str, str], key: str) -> Reply:
        raise NotImplementedError

    def _note_endpoints(self, config_body: bytes) -> None:
        raise NotImplementedError

    def dispatch(self, call: Call) -> Reply:
        """``call`` through its endpoint's handler (catalog endpoints: ``catalog`` first)."""
        return HANDLERS.get(call.route.endpoint, Handlers.catalog)(self, call)

    # -- the gateway's own routes -------------------------------------------------------------------
    def _sign(self, call: Call) -> Reply:
        r = call.route
        args = (r.method, r.params["id"], call.query, call.headers, call.body)
        return forward_sign(*args, self.signers, self.routes, self.upstream, self.access_log)

    def _path_credentials(self, call: Call) -> Reply:
        return self.policy.refuse_storage() or self.paths.path_credentials(call.query)

    def _bucket_credentials(self, call: Call) -> Reply:
        return self.policy.refuse_storage() or self.paths.bucket_credentials(call.query)

    def _policy_locations(self, call: Call) -> Reply:
        return self.policy.refuse_storage() or self.paths.policy_locations()

    def _no_gateway_route(self, call: Call) -> Reply:
        missing = error_reply(404, "NotFoundException", f"No gateway route {call.route.method} {call.route.path}")
        return self.policy.refuse_storage() or missing

    def _chain(self, call: Call) -> Reply:
        """``/chain/{id}/…``: a view chain's catalog, narrowed to the tables it reads, with its ``referenced-by``."""
        chain, inner = self.routes.get(call.route.params["id"]), call.route.inner
        if chain is None or inner is None:
            why = "Unknown view-chain catalog: chain catalogs exist only for queries run through Session.sql"
            return error_reply(403, "ForbiddenException", why)
        ok, why = chain.permits_route(inner)
        if not ok:
            return error_reply(403, "ForbiddenException", f"Forbidden through view chain {chain.display}: {why}")
        if inner.endpoint is Endpoint.REPORT_METRICS:
            # a scan report read through a view chain: catalogs refuse every POST carrying referenced-by, and the
            # report is the engine's bookkeeping, not the user's to file — answered here, nothing upstream
            return 204, b"", {}
        query = call.query if inner.endpoint is Endpoint.CONFIG else with_referenced_by(call.query, chain.referenced_by)
        base = f"{self._gateway_base()}/chain/{chain.id}"
        return self.catalog(Call(inner, query, call.headers, call.body, base, chain))

    # -- catalog routes (the main one and the chains') -----------------------------------------------
    def catalog(self, call: Call) -> Reply:
        """A catalog call: never to a signer path; the namespace in the catalog's separator; then its handler."""
        route = call.route
        if route.endpoint is Endpoint.SIGN_TABLE or signer_path(route.path, self.upstream.base_url, self.signers):
            return error_reply(
                403,
                "ForbiddenException",
                "Signer calls go only through the /sign/{id} route the gateway returned in the table load "
                "(its signer.endpoint / s3.signer.endpoint): not through a catalog route",
            )
        call = replace(call, path=with_separator(route.path, self.namespace_separator))
        logger.debug("%s %s -> %s", route.method, call.path, route.endpoint.name)
        return CATALOG_HANDLERS.get(route.endpoint, Handlers._plain)(self, call)

    def _send(self, call: Call) -> Reply:
        headers = self.policy.headers(call.forwarded_headers())
        return self._forward(call.route.method, call.path, call.query, headers, call.body)

    def _config(self, call: Call) -> Reply:
        """``GET /v1/config``: what the catalog offers is noted; its URLs point back at this route."""
        status, content, headers = self._send(call)
        if status == 200:
            self._note_endpoints(content)
            self.paths.note_config(content)
            content = without_namespace_head(rewrite_table_config(content, self.upstream.base_url, call.base))
        return status, content, headers

    def _plain(self, call: Call) -> Reply:
        """Every other catalog call: forwarded; a table answer rewritten; audited ones logged."""
        started = time.monotonic()
        return self._answered(call, self._send(call), started, call.route.audited(call.body))

    def _load_table(self, call: Call) -> Reply:
        """A table load or create: the policy sees the answer first (the refresh cache, or signing checks)."""
        started = time.monotonic()
        obj = call.route.audited(call.body)
        reply = self._send(call)
        if obj is not None:
            args = (call.path, call.query, call.headers, reply, obj)
            reply = self.policy.loaded(*args, load=call.route.endpoint is Endpoint.LOAD_TABLE)
        return self._answered(call, reply, started, obj, loaded=obj is not None)

    def _table_credentials(self, call: Call) -> Reply:
        """``GET …/credentials``: from the refresh cache, else one upstream call shared by concurrent askers."""
        started, obj = time.monotonic(), call.route.audited(call.body)
        refused = self.policy.refuse_refresh()
        if refused is not None:
            return self._answered(call, refused, started, obj)
        key = f"{call.path}?{call.query}|{call.headers.get('x-iceberg-access-delegation', '')}"
        cached = self.credentials.get(key)
        if cached is not None:
            return self._answered(call, cached, started, obj, via="cache")
        headers = self.policy.headers(call.forwarded_headers())
        fetch = lambda: self._fetch_credentials(call.path, call.query, headers, key)  # noqa: E731
        reply, shared = self._flights.do(key, fetch)
        return self._answered(call, reply, started, obj, via="shared" if shared else "upstream")

    def _answered(
        self, call: Call, reply: Reply, started: float, obj: str | None, via: str = "upstream", loaded: bool = False
    ) -> Reply:
        """``reply`` as the JVM gets it (a table answer rewritten by the policy), logged when audited (``obj``)."""
        status, content, headers = reply
        chain = call.chain
        if status == 200 and call.route.endpoint in TABLES:
            args = (content, call.base, call.path, obj or "table", chain.id if chain else None)
            content = self.policy.table_answer(*args, loaded=loaded)
        action = call.route.action
        if obj is not None and action is not None:
            record = AccessRecord(
                time=time.time(),
                action=action,
                object=obj,
                status=status,
                duration_ms=round((time.monotonic() - started) * 1000, 2),
                request_id=headers.get("x-request-id"),
                credentials_expire_at=earliest_expiry(content) if status == 200 else None,
                via=via,
                chain=chain.display if chain else None,
            )
            self.access_log.add(record)
        return status, content, headers


Handler = Callable[[Handlers, Call], Reply]
HANDLERS: dict[Endpoint, Handler] = {
    Endpoint.SIGN: Handlers._sign,
    Endpoint.PATH_CREDENTIALS: Handlers._path_credentials,
    Endpoint.BUCKET_CREDENTIALS: Handlers._bucket_credentials,
    Endpoint.POLICY_LOCATIONS: Handlers._policy_locations,
    Endpoint.GATEWAY_OTHER: Handlers._no_gateway_route,
    Endpoint.CHAIN: Handlers._chain,
}
# catalog endpoints below ``Handlers.catalog``; any other is ``_plain``
CATALOG_HANDLERS: dict[Endpoint, Handler] = {
    Endpoint.CONFIG: Handlers._config,
    Endpoint.LOAD_TABLE: Handlers._load_table,
    Endpoint.CREATE_TABLE: Handlers._load_table,
    Endpoint.TABLE_CREDENTIALS: Handlers._table_credentials,
}
