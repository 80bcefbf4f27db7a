"""The gateway's endpoint table (issue #43, point 3): one route parser, a table of short handlers, two policies.

Table-driven: every ``Endpoint`` has a row (method, raw path → endpoint, decoded parameters); the gateway's
own refusals of unknown paths are checked over HTTP against a gateway whose catalog is a closed port (so an
answer that reached "upstream" would be a 400/503 naming the catalog, never these). The last tests hold the
shape by source: short handlers, no substring routing, the access mode decided in one place.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lakesession.gateway import Gateway, _app, _handlers, _policies
from lakesession.gateway._chains import ChainRoute
from lakesession.gateway._routes import CATALOG, TABLES, Endpoint, Route, parse_route
from tests.factories import free_port

GATEWAY = Path(_app.__file__).parent
T = "/v1/wh/namespaces/db/tables/t"
V = "/v1/wh/namespaces/db/views/v"

# (method, raw path, endpoint, namespace, name): one row per endpoint at least
ROWS: list[tuple[str, str, Endpoint, tuple[str, ...] | None, str | None]] = [
    ("GET", "/v1/config", Endpoint.CONFIG, None, None),
    ("GET", "/v1/config/", Endpoint.CONFIG, None, None),
    ("GET", "/v1/wh/namespaces", Endpoint.LIST_NAMESPACES, None, None),
    ("POST", "/v1/wh/namespaces", Endpoint.CREATE_NAMESPACE, None, None),
    ("GET", "/v1/wh/namespaces/db", Endpoint.LOAD_NAMESPACE, ("db",), None),
    ("HEAD", "/v1/wh/namespaces/db", Endpoint.NAMESPACE_EXISTS, ("db",), None),
    ("DELETE", "/v1/wh/namespaces/db", Endpoint.DROP_NAMESPACE, ("db",), None),
    ("POST", "/v1/wh/namespaces/db/properties", Endpoint.UPDATE_NAMESPACE, ("db",), None),
    ("POST", "/v1/wh/namespaces/db/register", Endpoint.REGISTER_TABLE, ("db",), None),
    ("GET", "/v1/wh/namespaces/db/tables", Endpoint.LIST_TABLES, ("db",), None),
    ("POST", "/v1/wh/namespaces/db/tables", Endpoint.CREATE_TABLE, ("db",), None),
    ("GET", T, Endpoint.LOAD_TABLE, ("db",), "t"),
    ("HEAD", T, Endpoint.TABLE_EXISTS, ("db",), "t"),
    ("POST", T, Endpoint.COMMIT_TABLE, ("db",), "t"),
    ("DELETE", T, Endpoint.DROP_TABLE, ("db",), "t"),
    ("GET", f"{T}/credentials", Endpoint.TABLE_CREDENTIALS, ("db",), "t"),
    ("POST", f"{T}/metrics", Endpoint.REPORT_METRICS, ("db",), "t"),
    ("POST", f"{T}/sign", Endpoint.SIGN_TABLE, ("db",), "t"),
    ("POST", f"{T}/plan", Endpoint.PLAN_SCAN, ("db",), "t"),
    ("GET", f"{T}/plan/p1", Endpoint.FETCH_PLAN, ("db",), "t"),
    ("DELETE", f"{T}/plan/p1", Endpoint.CANCEL_PLAN, ("db",), "t"),
    ("POST", f"{T}/tasks", Endpoint.FETCH_SCAN_TASKS, ("db",), "t"),
    ("POST", "/v1/wh/tables/rename", Endpoint.RENAME_TABLE, None, None),
    ("POST", "/v1/wh/transactions/commit", Endpoint.COMMIT_TRANSACTION, None, None),
    ("GET", "/v1/wh/namespaces/db/views", Endpoint.LIST_VIEWS, ("db",), None),
    ("POST", "/v1/wh/namespaces/db/views", Endpoint.CREATE_VIEW, ("db",), None),
    ("GET", V, Endpoint.LOAD_VIEW, ("db",), "v"),
    ("HEAD", V, Endpoint.VIEW_EXISTS, ("db",), "v"),
    ("POST", V, Endpoint.REPLACE_VIEW, ("db",), "v"),
    ("DELETE", V, Endpoint.DROP_VIEW, ("db",), "v"),
    ("POST", "/v1/wh/views/rename", Endpoint.RENAME_VIEW, None, None),
    # a table path or method the spec does not list: still a table answer (rewritten), never audited
    ("PUT", T, Endpoint.OTHER_TABLE, ("db",), "t"),
    ("GET", f"{T}/", Endpoint.OTHER_TABLE, ("db",), "t"),
    ("GET", f"{T}/plan/p1/more", Endpoint.OTHER_TABLE, ("db",), "t"),
    ("GET", "/v1/wh/tables/x", Endpoint.OTHER_TABLE, None, None),
    # anything else is the catalog's to answer
    ("POST", "/v1/config", Endpoint.CATALOG_OTHER, None, None),
    ("POST", "/v1/oauth/tokens", Endpoint.CATALOG_OTHER, None, None),
    ("GET", "/v1/wh/namespaces/db/other", Endpoint.CATALOG_OTHER, None, None),
    ("GET", "/v1//namespaces/db/tables/t", Endpoint.CATALOG_OTHER, None, None),
    ("GET", "/", Endpoint.CATALOG_OTHER, None, None),
    ("GET", "/sign", Endpoint.CATALOG_OTHER, None, None),
    ("GET", "/lakesession", Endpoint.CATALOG_OTHER, None, None),
    # the gateway's own routes
    ("POST", "/sign/abc", Endpoint.SIGN, None, None),
    ("GET", "/lakesession/path-credentials", Endpoint.PATH_CREDENTIALS, None, None),
    ("GET", "/lakesession/bucket-credentials/", Endpoint.BUCKET_CREDENTIALS, None, None),
    ("GET", "/lakesession/policy-locations", Endpoint.POLICY_LOCATIONS, None, None),
    ("POST", "/lakesession/path-credentials", Endpoint.GATEWAY_OTHER, None, None),
    ("GET", "/lakesession/nope", Endpoint.GATEWAY_OTHER, None, None),
    ("GET", "/lakesession/", Endpoint.GATEWAY_OTHER, None, None),
    ("GET", f"/chain/c1{T}", Endpoint.CHAIN, None, None),
]


@pytest.mark.parametrize(
    ("method", "path", "endpoint", "namespace", "name"), ROWS, ids=[f"{r[0]} {r[1]}" for r in ROWS]
)
def test_every_endpoint_parses(
    method: str, path: str, endpoint: Endpoint, namespace: tuple[str, ...] | None, name: str | None
) -> None:
    route = parse_route(method, path)
    assert (route.endpoint, route.namespace, route.name) == (endpoint, namespace, name)
    assert route.method == method and route.path == path


def test_the_table_covers_every_endpoint_and_the_families_are_right() -> None:
    assert {r[2] for r in ROWS} == set(Endpoint)
    assert Endpoint.LOAD_TABLE in TABLES and Endpoint.RENAME_TABLE in TABLES and Endpoint.OTHER_TABLE in TABLES
    assert Endpoint.LOAD_VIEW not in TABLES and Endpoint.CONFIG not in TABLES and Endpoint.LIST_NAMESPACES not in TABLES
    assert Endpoint.CONFIG in CATALOG and Endpoint.CATALOG_OTHER in CATALOG
    assert not {Endpoint.SIGN, Endpoint.CHAIN, Endpoint.PATH_CREDENTIALS, Endpoint.GATEWAY_OTHER} & CATALOG


@pytest.mark.parametrize(
    ("path", "namespace", "name"),
    [
        ("/v1/wh/namespaces/a%1Fb/tables/t", ("a", "b"), "t"),
        ("/v1/wh/namespaces/a%1fb%1Fc/tables/t", ("a", "b", "c"), "t"),  # either case of the hex digits
        ("/v1/wh/namespaces/a%2Eb/tables/t", ("a.b",), "t"),  # a dot inside one level
        ("/v1/wh/namespaces/a%251Fb/tables/t", ("a%1Fb",), "t"),  # an encoded '%': one level
        ("/v1/wh/namespaces/sales/tables/my%20t%2F2", ("sales",), "my t/2"),
        ("/v1/namespaces/tables/tables/tables", ("tables",), "tables"),  # names are parameters, not markers
        ("/v1/namespaces/tables_x/views/v", ("tables_x",), "v"),
    ],
)
def test_namespaces_and_names_are_decoded_after_matching(path: str, namespace: tuple[str, ...], name: str) -> None:
    route = parse_route("GET", path)
    assert (route.namespace, route.name) == (namespace, name)
    assert route.endpoint in (Endpoint.LOAD_TABLE, Endpoint.LOAD_VIEW)
    assert route.params["namespace"] in path  # kept raw, as forwarded


def test_the_prefix_is_optional_and_tried_first() -> None:
    assert parse_route("GET", T).params == {"prefix": "wh", "namespace": "db", "table": "t"}
    assert parse_route("GET", "/v1/namespaces/db/tables/t").params == {"namespace": "db", "table": "t"}
    assert parse_route("GET", "/v1/my%20catalog/namespaces").params == {"prefix": "my%20catalog"}
    # a prefix spelled like a keyword: the spec's reading with a prefix wins, as the old regexes did
    assert parse_route("GET", "/v1/namespaces/namespaces").endpoint is Endpoint.LIST_NAMESPACES
    assert parse_route("GET", "/v1/namespaces/namespaces/db").endpoint is Endpoint.LOAD_NAMESPACE
    route = parse_route("GET", "/v1/namespaces/namespaces/tables/t")
    assert (route.endpoint, route.namespace, route.name) == (Endpoint.LOAD_TABLE, ("namespaces",), "t")


def test_chain_and_signer_routes_carry_their_parameters() -> None:
    chain = parse_route("POST", f"/chain/c1{T}/metrics")
    assert chain.params == {"id": "c1"} and chain.inner is not None
    assert (chain.inner.endpoint, chain.inner.path, chain.inner.table) == (
        Endpoint.REPORT_METRICS,
        f"{T}/metrics",
        (("db",), "t"),
    )
    assert parse_route("GET", "/chain/c1").inner == Route("GET", Endpoint.CATALOG_OTHER, "/")
    assert parse_route("GET", "/chain/").params == {"id": ""}
    assert parse_route("POST", "/sign/a/b").params == {"id": "a/b"}  # refused by the signer route, not here


def test_the_access_log_names_come_from_the_route() -> None:
    assert parse_route("GET", "/v1/wh/namespaces/a%1Fb/tables/t").audited(b"") == "table a.b.t"
    assert parse_route("POST", V).action == "commit_view"
    assert parse_route("POST", "/v1/wh/tables/rename").audited(b"{}") == "table"
    create = parse_route("POST", "/v1/wh/namespaces/db/views")
    assert (create.action, create.audited(b'{"name": "v2"}')) == ("create_view", "view db.v2")
    assert create.audited(b"not json") is None and create.audited(b'{"name": 3}') is None
    assert parse_route("GET", f"{T}/credentials").action == "refresh_credentials"
    assert all(
        parse_route(m, p).audited(b"{}") is None
        for m, p in [("HEAD", T), ("GET", "/v1/config"), ("POST", f"{T}/metrics")]
    )


def test_chain_permits_read_the_parsed_route() -> None:
    chain = ChainRoute("r1", ((("db",), "v"),), "db%1Fv", {(("db",), "t")})
    assert chain.permits("GET", "/v1/config/") == (True, "")
    assert chain.permits("GET", "/v1/wh/namespaces/db/tables") == (
        False,
        "only the tables this view chain reads can be loaded here",
    )
    assert chain.permits("GET", "/v1/wh/namespaces/db/tables/u") == (False, "table db.u is not read by this view chain")
    assert chain.permits("POST", T) == (False, "view chains are read-only")
    assert chain.permits("GET", f"{T}/sign") == (False, "view chains are read-only")


# -- the gateway's own answers to unknown paths: the same as before the table ----------------------------------
@pytest.fixture(scope="module")
def gateways() -> Iterator[dict[str, Gateway]]:
    """A vended and a remote-signing gateway in front of a closed port: a request that reached "upstream"
    would be answered 400/503 naming the catalog."""
    up = f"http://127.0.0.1:{free_port()}"
    out = {"vended": Gateway(up, lambda: "tok").start(), "signing": Gateway(up, lambda: "tok", access="remote-signing")}
    out["signing"].start()
    try:
        yield out
    finally:
        for g in out.values():
            g.stop()


REFUSALS = [
    ("vended", "GET", "/chain/nope/v1/config", 403, "Unknown view-chain catalog: chain catalogs exist only"),
    ("vended", "GET", "/chain/", 403, "Unknown view-chain catalog"),
    ("vended", "GET", "/lakesession/nope", 404, "No gateway route GET /lakesession/nope"),
    ("vended", "POST", "/lakesession/path-credentials", 404, "No gateway route POST /lakesession/path-credentials"),
    ("vended", "GET", "/lakesession/path-credentials?path=/etc", 400, "Expected path=s3://bucket/key"),
    ("signing", "GET", "/lakesession/nope", 403, "This session uses remote signing: no storage credentials"),
    (
        "signing",
        "GET",
        "/lakesession/path-credentials",
        403,
        "This session uses remote signing: no storage credentials",
    ),
    ("signing", "GET", f"{T}/credentials", 403, "Spark gets no storage credentials (the catalog signs each request)"),
    ("vended", "POST", "/sign/nope", 403, "Unknown signer route: signer routes are exactly the /sign/{id}"),
    ("vended", "POST", "/sign/a/b", 403, "Unknown signer route"),
    ("vended", "GET", "/sign/nope", 405, "Method GET is not allowed on a signer route (POST)"),
    ("vended", "POST", f"{T}/sign", 403, "Signer calls go only through the /sign/{id} route"),
    ("vended", "GET", "/v1/aws/s3/sign/x", 403, "Signer calls go only through the /sign/{id} route"),
    ("vended", "GET", "/v1/wh/namespaces/%2E%2E/tables/t", 400, "Malformed request path: dot segments"),
    ("vended", "PATCH", T, 405, "Method PATCH is not part of the Iceberg REST API"),
]


@pytest.mark.parametrize(
    ("mode", "method", "path", "status", "message"), REFUSALS, ids=[f"{r[0]} {r[1]} {r[2]}" for r in REFUSALS]
)
def test_unknown_and_refused_paths_answer_as_before(
    gateways: dict[str, Gateway], mode: str, method: str, path: str, status: int, message: str
) -> None:
    g = gateways[mode]
    r = httpx.request(method, g.uri + path, headers={"Authorization": f"Bearer {g.secret}"}, content=b"{}")
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"]


def test_chain_refusals_and_other_catalog_paths(gateways: dict[str, Gateway]) -> None:
    g = gateways["vended"]
    auth = {"Authorization": f"Bearer {g.secret}"}
    chain = g.chains.register(((("db",), "v"),), "db%1Fv", {(("db",), "t")})
    r = httpx.post(f"{g.uri}/chain/{chain.id}{T}", headers=auth, content=b"{}")
    assert r.status_code == 403
    assert r.json()["error"]["message"] == "Forbidden through view chain db.v: view chains are read-only"
    assert httpx.post(f"{g.uri}/chain/{chain.id}{T}/metrics", headers=auth, content=b"{}").status_code == 204
    # an endpoint the gateway has no handler for is the catalog's to answer: here, a closed port
    r = httpx.get(f"{g.uri}/v1/wh/namespaces/db/other", headers=auth)
    assert r.status_code in (400, 503) and "127.0.0.1" in r.json()["error"]["message"]


# -- the shape, by source -----------------------------------------------------------------------------------
def _functions(path: Path) -> Iterator[ast.FunctionDef]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef):
            yield node


def test_handlers_are_short() -> None:
    handlers = {*_handlers.HANDLERS.values(), *_handlers.CATALOG_HANDLERS.values()}
    handlers |= {
        _handlers.Handlers.dispatch,
        _handlers.Handlers.catalog,
        _handlers.Handlers._plain,
        _app.GatewayApp.handle,
    }
    for fn in handlers:
        lines = len(inspect.getsourcelines(fn)[0])
        assert lines <= 30, f"{fn.__qualname__}: {lines} lines"
    assert not hasattr(_app.GatewayApp, "_handle")  # the ~90-line ladder is gone
    assert all(len(ast.unparse(f).splitlines()) <= 40 for f in _functions(GATEWAY / "_handlers.py"))


ROUTE_MARKERS = (
    "/tables",
    "/views",
    "/namespaces",
    "/config",
    "/credentials",
    "/metrics",
    "/sign",
    "/chain",
    "/lakesession",
)


def _substring_routing(tree: ast.AST, constants: dict[str, object]) -> list[str]:
    """``"/x" in path``, ``path.startswith("/x")``, ``path.endswith(("/x", …))`` on a request path."""

    def literal(node: ast.expr) -> list[str]:
        value = constants.get(node.id) if isinstance(node, ast.Name) else None
        if isinstance(node, ast.Constant):
            value = node.value
        elif isinstance(node, ast.Tuple):
            return [s for e in node.elts for s in literal(e)]
        return list(value) if isinstance(value, tuple) else [value] if isinstance(value, str) else []

    def a_path(node: ast.expr) -> bool:
        while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):  # path.rstrip("/")…
            node = node.func.value
        name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
        return "path" in name.lower() or name == "rest"

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
            if a_path(node.comparators[0]) and any(s.startswith(ROUTE_MARKERS) for s in literal(node.left)):
                found.append(ast.unparse(node))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and a_path(node.func.value):
            if node.func.attr in ("startswith", "endswith") and node.args:
                if any(s.startswith("/") for s in literal(node.args[0])):
                    found.append(ast.unparse(node))
    return found


def _literal(node: ast.expr) -> object:
    try:
        return ast.literal_eval(node)
    except ValueError:  # a tuple naming other constants: not a route marker
        return None


def test_no_substring_routing_in_the_gateway() -> None:
    found = []
    for path in sorted(GATEWAY.glob("*.py")):
        tree = ast.parse(path.read_text())
        constants = {
            t.id: _literal(n.value)
            for n in tree.body
            if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant | ast.Tuple)
            for t in n.targets
            if isinstance(t, ast.Name)
        }
        found += [f"{path.name}: {s}" for s in _substring_routing(tree, constants)]
    assert not found, "routing by substrings of the path (parse it: _routes.parse_route):\n" + "\n".join(found)
    # the checker itself sees the old ladder's idioms
    old = 'if "/tables" in path or raw_path.startswith(PREFIX) or rest.rstrip("/").endswith("/metrics"): pass'
    assert len(_substring_routing(ast.parse(old), {"PREFIX": "/lakesession/"})) == 3


def test_the_access_mode_is_decided_once() -> None:
    sources = {p.name: p.read_text() for p in GATEWAY.glob("*.py")}
    assert sum(s.count("self.access ==") for s in sources.values()) <= 1
    mentions = [name for name, s in sources.items() if re.search(r"\bSIGNING\b|[\"']remote-signing[\"']", s)]
    assert mentions == ["_policies.py"], mentions  # the mode's name is read in one module
    assert isinstance(_policies.policy_for("remote-signing", None), _policies.SigningPolicy)  # type: ignore[arg-type]
    assert isinstance(_policies.policy_for(None, None), _policies.VendedPolicy)  # type: ignore[arg-type]
    assert isinstance(_policies.policy_for("vended-credentials", None), _policies.VendedPolicy)  # type: ignore[arg-type]


def test_the_access_log_does_not_parse_paths() -> None:
    source = (GATEWAY / "_accesslog.py").read_text()
    tree = ast.parse(source)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    assert not imported & {"re", "unquote", "urllib"} and "def classify" not in source
    assert "route.action" in textwrap.dedent(inspect.getsource(_handlers.Handlers._answered))


def test_a_load_is_logged_with_its_parsed_object(gateways: dict[str, Gateway]) -> None:
    g = gateways["vended"]
    before = len(g.access_log.records())
    path = "/v1/wh/namespaces/a%1Fb/tables/t%20x"
    httpx.get(g.uri + path, headers={"Authorization": f"Bearer {g.secret}"})
    record = g.access_log.records()[before:][-1]
    assert (record.action, record.object) == ("load_table", "table a.b.t x")
    assert json.loads(json.dumps(record.as_dict()))["status"] in (400, 503)
