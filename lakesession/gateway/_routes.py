"""Which endpoint a gateway request is: one parser from (method, raw path) to an ``Endpoint`` and its path parameters.

Why one parser: routing by substrings (``"/tables" in path``) misreads a namespace called ``tables_x`` and spreads
the API's shape over every handler. Here the raw path is split into segments once and matched against the
endpoint table below — each value is the spec's own spelling (``"GET /v1/{prefix}/namespaces/{namespace}"``, as
a catalog's ``/v1/config`` lists its endpoints and pyiceberg's ``Endpoints`` table holds them); the handlers, the
view-chain check and the access log then read the parsed parameters, never the path again.

``{prefix}`` is optional, as in the spec: a path is matched with its second segment as the prefix first, then
without one. Path parameters stay percent-encoded in ``Route.params``; ``Route.namespace`` and ``Route.name``
decode them (namespace levels joined by the unit separator, ``%1F``, as Iceberg Java sends them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import unquote

__all__ = ["CATALOG", "TABLES", "Endpoint", "Route", "parse_catalog", "parse_route"]

_T = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
_V = "/v1/{prefix}/namespaces/{namespace}/views/{view}"


class Endpoint(StrEnum):
    """One endpoint the gateway tells apart; the value is its ``METHOD /path-template`` (``…``: any tail)."""

    CONFIG = "GET /v1/config"
    LIST_NAMESPACES = "GET /v1/{prefix}/namespaces"
    CREATE_NAMESPACE = "POST /v1/{prefix}/namespaces"
    LOAD_NAMESPACE = "GET /v1/{prefix}/namespaces/{namespace}"
    NAMESPACE_EXISTS = "HEAD /v1/{prefix}/namespaces/{namespace}"
    DROP_NAMESPACE = "DELETE /v1/{prefix}/namespaces/{namespace}"
    UPDATE_NAMESPACE = "POST /v1/{prefix}/namespaces/{namespace}/properties"
    REGISTER_TABLE = "POST /v1/{prefix}/namespaces/{namespace}/register"
    LIST_TABLES = "GET /v1/{prefix}/namespaces/{namespace}/tables"
    CREATE_TABLE = "POST /v1/{prefix}/namespaces/{namespace}/tables"
    LOAD_TABLE = f"GET {_T}"
    TABLE_EXISTS = f"HEAD {_T}"
    COMMIT_TABLE = f"POST {_T}"
    DROP_TABLE = f"DELETE {_T}"
    TABLE_CREDENTIALS = f"GET {_T}/credentials"
    REPORT_METRICS = f"POST {_T}/metrics"
    SIGN_TABLE = f"POST {_T}/sign"
    PLAN_SCAN = f"POST {_T}/plan"
    FETCH_PLAN = f"GET {_T}/plan/{{plan-id}}"
    CANCEL_PLAN = f"DELETE {_T}/plan/{{plan-id}}"
    FETCH_SCAN_TASKS = f"POST {_T}/tasks"
    RENAME_TABLE = "POST /v1/{prefix}/tables/rename"
    COMMIT_TRANSACTION = "POST /v1/{prefix}/transactions/commit"
    LIST_VIEWS = "GET /v1/{prefix}/namespaces/{namespace}/views"
    CREATE_VIEW = "POST /v1/{prefix}/namespaces/{namespace}/views"
    LOAD_VIEW = f"GET {_V}"
    VIEW_EXISTS = f"HEAD {_V}"
    REPLACE_VIEW = f"POST {_V}"
    DROP_VIEW = f"DELETE {_V}"
    RENAME_VIEW = "POST /v1/{prefix}/views/rename"
    OTHER_TABLE = "* /v1/{prefix}/namespaces/{namespace}/tables/…"  # a table path (or method) the table lacks
    CATALOG_OTHER = "* /…"  # any other catalog path: forwarded as it is
    SIGN = "POST /sign/{id}"
    PATH_CREDENTIALS = "GET /lakesession/path-credentials"
    BUCKET_CREDENTIALS = "GET /lakesession/bucket-credentials"
    POLICY_LOCATIONS = "GET /lakesession/policy-locations"
    GATEWAY_OTHER = "* /lakesession/…"  # no such gateway route: 404
    CHAIN = "* /chain/{id}/…"  # a view chain's catalog: ``Route.inner`` is the catalog route under it


def _template(endpoint: Endpoint) -> tuple[str, list[str]]:
    method, path = endpoint.value.split(" ", 1)
    return method, path.split("/")[1:]


# (method, segments, endpoint) of the spec's endpoints below ``/v1/{prefix}``: with the prefix, then without it
_SPEC = [(*_template(e), e) for e in Endpoint if _template(e)[1][:2] == ["v1", "{prefix}"] and "…" not in e.value]
_VARIANTS = (_SPEC, [(m, s[:1] + s[2:], e) for m, s, e in _SPEC])
# the gateway's own routes (``/lakesession/{name}``)
_GATEWAY = {
    _template(e)[1][1]: e for e in (Endpoint.PATH_CREDENTIALS, Endpoint.BUCKET_CREDENTIALS, Endpoint.POLICY_LOCATIONS)
}
# every endpoint under ``…/tables``: their answers are table results or credentials the gateway rewrites
TABLES = frozenset(e for e in Endpoint if "tables" in _template(e)[1])
CATALOG = frozenset(e for e in Endpoint if _template(e)[1][0] in ("v1", "…"))
_ACTIONS = {
    Endpoint.LOAD_TABLE: "load_table",
    Endpoint.COMMIT_TABLE: "commit_table",
    Endpoint.DROP_TABLE: "drop_table",
    Endpoint.CREATE_TABLE: "create_table",
    Endpoint.RENAME_TABLE: "rename_table",
    Endpoint.TABLE_CREDENTIALS: "refresh_credentials",
    Endpoint.LOAD_VIEW: "load_view",
    Endpoint.REPLACE_VIEW: "commit_view",
    Endpoint.DROP_VIEW: "drop_view",
    Endpoint.CREATE_VIEW: "create_view",
    Endpoint.RENAME_VIEW: "rename_view",
}


@dataclass(frozen=True)
class Route:
    """A parsed request: its endpoint, raw path and raw (still percent-encoded) path parameters."""

    method: str
    endpoint: Endpoint
    path: str
    params: dict[str, str] = field(default_factory=dict)
    inner: Route | None = None  # CHAIN: the catalog route below ``/chain/{id}``

    @property
    def namespace(self) -> tuple[str, ...] | None:
        raw = self.params.get("namespace")
        return None if raw is None else tuple(unquote(raw).split("\x1f"))

    @property
    def name(self) -> str | None:
        """The table's or view's name, decoded."""
        raw = self.params.get("table", self.params.get("view"))
        return None if raw is None else unquote(raw)

    @property
    def table(self) -> tuple[tuple[str, ...], str] | None:
        """(namespace levels, table name) of a path below one table."""
        ns, name = self.namespace, self.name
        return (ns, name) if ns is not None and name is not None and "table" in self.params else None

    @property
    def kind(self) -> str:
        return "table" if self.endpoint in TABLES else "view"

    @property
    def action(self) -> str | None:
        """What the access log calls this request (None: not audited — listings, config, metrics…)."""
        return _ACTIONS.get(self.endpoint)

    def audited(self, body: bytes) -> str | None:
        """The object the access log names (``table sales.orders``), or None when the request is not audited;
        a create names its table or view in the body."""
        if self.action is None:
            return None
        if self.namespace is None:  # a rename: the body names both sides
            return self.kind
        name = self.name
        if self.endpoint in (Endpoint.CREATE_TABLE, Endpoint.CREATE_VIEW):
            try:
                name = json.loads(body).get("name")
            except (ValueError, AttributeError):
                return None
            if not isinstance(name, str):
                return None
        return f"{self.kind} {'.'.join(self.namespace)}.{name}"


def parse_route(method: str, raw_path: str) -> Route:
    """The route of ``raw_path`` (as received: percent-encoded, starting with ``/``) for ``method``."""
    segments = raw_path.split("/")[1:]
    head, rest = segments[0], segments[1:]
    if head == "sign" and rest:
        return Route(method, Endpoint.SIGN, raw_path, {"id": "/".join(rest)})
    if head == "lakesession" and rest:
        found = _GATEWAY.get("/".join(rest).rstrip("/")) if method == "GET" else None
        return Route(method, found or Endpoint.GATEWAY_OTHER, raw_path)
    if head == "chain" and rest:
        inner = parse_catalog(method, "/" + "/".join(rest[1:]))
        return Route(method, Endpoint.CHAIN, raw_path, {"id": rest[0]}, inner)
    return parse_catalog(method, raw_path)


def parse_catalog(method: str, raw_path: str) -> Route:
    """A catalog route: the spec's endpoints (``{prefix}`` first tried), else a table path, else any other."""
    segments = raw_path.split("/")[1:]
    if method == "GET" and "/".join(segments).rstrip("/") == "v1/config":
        return Route(method, Endpoint.CONFIG, raw_path)
    for variant in _VARIANTS:
        for m, pattern, endpoint in variant:
            params = _match(pattern, segments) if m == method else None
            if params is not None:
                return Route(method, endpoint, raw_path, params)
    tails = [segments[2:]] if segments[1:2] not in ([], [""]) else []  # with a (non-empty) prefix, then without
    for tail in [*tails, segments[1:]] if segments[:1] == ["v1"] else []:
        if tail[:1] == ["tables"]:
            return Route(method, Endpoint.OTHER_TABLE, raw_path)
        if len(tail) >= 3 and tail[0] == "namespaces" and tail[1] and tail[2] == "tables":
            params = {"namespace": tail[1], **({"table": tail[3]} if tail[3:4] not in ([], [""]) else {})}
            return Route(method, Endpoint.OTHER_TABLE, raw_path, params)
    return Route(method, Endpoint.CATALOG_OTHER, raw_path)


def _match(pattern: list[str], segments: list[str]) -> dict[str, str] | None:
    """The path parameters when ``segments`` fit ``pattern`` one for one (a parameter is never empty)."""
    if len(pattern) != len(segments):
        return None
    params: dict[str, str] = {}
    for want, got in zip(pattern, segments, strict=True):
        if want.startswith("{") and got:
            params[want[1:-1]] = got
        elif want != got:
            return None
    return params
