"""Remote signing through the gateway (issue 15, item 5), attacked as a local process holding the session secret would.

A reference catalog on the S3 emulator (which verifies SigV4); mallory may read and write ``ns.orders``
only. Her session's gateway runs in remote-signing mode. Every attack is the real HTTP request to the
gateway, then — when something came back that could reach storage — the S3 call it would enable.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from fastapi import FastAPI, Request

from lakesession._wire.sockets import bind
from lakesession.gateway import Gateway
from lakesession.gateway._signer import SignerRoutes, is_credential_key, rewrite_signing, signer_path
from lakesession.reference.serving import BackgroundServer
from tests._lake import Lake
from tests.factories import make_catalog, seed_tables
from tests.security.test_attack_signer import POLICY

BUCKET = "gw-signer-bucket"
P = "/v1/lakesession"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


@dataclass
class Calls:
    """Every request path the catalog received (an ASGI wrapper in front of the real app)."""

    paths: list[str] = field(default_factory=list)

    def wrap(self, app: Any) -> Callable[..., Any]:
        async def recorded(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                self.paths.append(scope["path"])
            await app(scope, receive, send)

        return recorded


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    calls = Calls()
    with make_catalog(
        POLICY, bucket=BUCKET, data_dir=tmp_path_factory.mktemp("gw-signer"), wrap_app=calls.wrap
    ) as handle:
        loc = seed_tables(handle, BUCKET, ("orders", "secret"))
        yield Lake(handle, bucket=BUCKET, loc=loc, calls=calls)


@pytest.fixture()
def gw(lake: Lake) -> Iterator[Gateway]:
    token = lake.handle.admin.token_for("mallory")
    with Gateway(lake.handle.uri, lambda: token, access="remote-signing") as g:
        yield g


def auth(g: Gateway) -> dict[str, str]:
    return {"Authorization": f"Bearer {g.secret}"}


def load(g: Gateway, table: str, delegation: str = "vended-credentials") -> httpx.Response:
    """The engine's loadTable — asking for vended credentials, as an engine reconfigured by the user could."""
    headers = {**auth(g), "X-Iceberg-Access-Delegation": delegation}
    return httpx.get(f"{g.uri}{P}/namespaces/ns/tables/{table}", headers=headers, timeout=30)


def sign_body(lake: Lake, method: str, uri: str, headers: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "region": lake.region,
        "uri": uri,
        "method": method,
        "headers": {k: [v] for k, v in (headers or {}).items()},
    }


def signer_endpoint(g: Gateway, table: str) -> str:
    r = load(g, table)
    assert r.status_code == 200, r.text
    return str(r.json()["config"]["s3.signer.endpoint"])


def replay(method: str, uri: str, signed: httpx.Response, content: bytes | None = None) -> httpx.Response:
    """The S3 call with exactly the headers the signer returned."""
    headers = {k: v[0] for k, v in signed.json()["headers"].items()}
    return httpx.request(method, signed.json()["uri"], headers=headers, content=content, timeout=30)


# ---------------------------------------------------------------- the mode itself
def test_loads_point_the_signer_at_the_gateway_and_carry_no_credentials(lake: Lake, gw: Gateway) -> None:
    since = time.time()
    r = load(gw, "orders")
    assert r.status_code == 200, r.text
    doc = r.json()
    config = doc["config"]
    assert config["s3.remote-signing-enabled"] == "true"
    assert config["s3.signer.uri"] == gw.uri
    assert config["s3.signer.endpoint"].startswith(f"{gw.uri}/sign/")
    # Iceberg 1.12 reads signer.endpoint (else its per-table default on the catalog route, refused below)
    assert config["signer.endpoint"] == config["s3.signer.endpoint"]
    assert not doc.get("storage-credentials")
    assert not [k for k in config if is_credential_key(k)], config
    assert lake.handle.uri not in r.text  # nothing in the JVM points at the catalog itself
    # the engine asked for vended credentials: the gateway asked the catalog for remote signing instead
    loads = lake.audit(since, "load_table")
    vended = [a for a in loads if a.detail and "expires_at" in a.detail]  # a credential issuance record
    assert vended == [], loads
    assert {a.principal for a in loads} == {"mallory"}


def test_signer_route_signs_as_the_user_and_the_store_accepts_it(lake: Lake, gw: Gateway) -> None:
    since = time.time()
    uri = lake.object_url("orders", "data/orders.parquet")
    endpoint = signer_endpoint(gw, "orders")
    signed = httpx.post(endpoint, json=sign_body(lake, "GET", uri), headers=auth(gw), timeout=30)
    assert signed.status_code == 200, signed.text
    # the catalog allows caching (private); the gateway does not: Iceberg's signature cache is JVM-wide
    assert signed.headers["cache-control"] == "no-store"
    got = replay("GET", uri, signed)
    assert got.status_code == 200 and got.content == b"orders rows"
    # written too: a PUT signed through the route lands in the table's prefix
    put_uri = lake.object_url("orders", "data/new.parquet")
    signed = httpx.post(endpoint, json=sign_body(lake, "PUT", put_uri), headers=auth(gw), timeout=30)
    assert signed.status_code == 200, signed.text
    assert replay("PUT", put_uri, signed, b"new rows").status_code == 200
    assert lake.s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/new.parquet")["Body"].read() == b"new rows"
    allowed = [a for a in lake.audit(since, "sign_request") if a.decision == "allow"]
    assert {a.principal for a in allowed} == {"mallory"} and {a.securable for a in allowed} == {"table ns.orders"}
    signed_ops = sorted(a.detail["operation"] for a in allowed if a.detail and "operation" in a.detail)
    assert signed_ops == ["GetObject", "PutObject"]
    logged = [rec for rec in gw.access_log.records() if rec.action == "sign_request"]
    assert sum(rec.count for rec in logged) == 2 and {rec.object for rec in logged} == {"table ns.orders"}


# ---------------------------------------------------------------- the attacks
def test_credentials_cannot_be_had_through_a_remote_signing_gateway(lake: Lake, gw: Gateway) -> None:
    """A local process with the session secret asks for storage keys (a load asking for vended credentials,
    then the refresh endpoint), to read the table with them directly: nothing to use comes back."""
    loaded = load(gw, "orders").json()
    keys = [c["config"] for c in loaded.get("storage-credentials") or []] + [loaded["config"]]
    refresh = httpx.get(
        f"{gw.uri}{P}/namespaces/ns/tables/orders/credentials",
        headers={**auth(gw), "X-Iceberg-Access-Delegation": "vended-credentials"},
        timeout=30,
    )
    assert refresh.status_code == 403, refresh.text
    assert "remote signing" in refresh.json()["error"]["message"]
    usable = [k for k in keys if k.get("s3.access-key-id")]
    stolen = None
    if usable:  # what the attacker would do with them
        k = usable[0]
        s3 = lake.handle.s3_emulator.client(
            credentials={
                "AccessKeyId": k["s3.access-key-id"],
                "SecretAccessKey": k["s3.secret-access-key"],
                "SessionToken": k.get("s3.session-token"),
            }
        )
        stolen = s3.get_object(Bucket=BUCKET, Key=f"{lake.loc['orders']}/data/orders.parquet")["Body"].read()
    assert usable == [] and stolen is None


def test_signing_another_tables_object_through_the_route_is_refused(lake: Lake, gw: Gateway) -> None:
    endpoint = signer_endpoint(gw, "orders")
    uri = lake.object_url("secret", "data/secret.parquet")
    since = time.time()
    r = httpx.post(endpoint, json=sign_body(lake, "GET", uri), headers=auth(gw), timeout=30)
    assert r.status_code == 403, r.text
    assert r.json()["error"]["type"] == "ForbiddenException"
    decided = lake.audit(since, "sign_request")
    assert {a.principal for a in decided} == {"mallory"}
    assert [a.detail["reason"] for a in decided if a.decision == "deny"] == ["outside table location"]
    assert not [a for a in decided if a.decision == "allow" and a.detail and "operation" in a.detail]
    # and mallory cannot get a route of the other table at all: its load is refused by the catalog
    assert load(gw, "secret").status_code == 403


def test_bucket_policy_through_the_route_is_refused(lake: Lake, gw: Gateway) -> None:
    endpoint = signer_endpoint(gw, "orders")
    policy = json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/*"}
            ],
        }
    ).encode()
    uri = f"{lake.endpoint}/{BUCKET}?policy"
    r = httpx.post(endpoint, json=sign_body(lake, "PUT", uri), headers=auth(gw), timeout=30)
    s3 = replay("PUT", uri, r, policy) if r.status_code == 200 else None
    with pytest.raises(ClientError, match="NoSuchBucketPolicy"):
        lake.s3.get_bucket_policy(Bucket=BUCKET)
    assert r.status_code == 403 and s3 is None, r.text


def test_signer_route_without_the_session_secret_is_401(lake: Lake, gw: Gateway) -> None:
    endpoint = signer_endpoint(gw, "orders")
    body = sign_body(lake, "GET", lake.object_url("orders", "data/orders.parquet"))
    before = len(lake.calls.paths)
    user = {"Authorization": f"Bearer {lake.handle.admin.token_for('mallory')}"}  # not the gateway's secret
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {gw.secret}x"}, user):
        r = httpx.post(endpoint, json=body, headers=headers, timeout=30)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["type"] == "NotAuthorizedException"
    assert lake.calls.paths[before:] == []  # refused before anything reached the catalog


def test_signer_route_reaches_no_other_catalog_endpoint(lake: Lake, gw: Gateway) -> None:
    endpoint = signer_endpoint(gw, "orders")
    rid = endpoint.rsplit("/", 1)[1]
    before = len(lake.calls.paths)
    h = auth(gw)
    attempts = {
        f"/sign/{rid}/../../v1/lakesession/namespaces/ns/tables/secret": ("POST", 400),  # dot segments
        f"/sign/{rid}/%2E%2E/%2E%2E/v1/config": ("POST", 400),
        f"/sign/{rid}/extra": ("POST", 403),
        f"/sign/{rid}?referenced-by=ns%1Fv": ("POST", 403),  # no query: the chain is the route's, never the engine's
        "/sign/0123456789abcdef01234567": ("POST", 403),  # not a route the gateway returned
        "/sign/": ("POST", 403),
        f"/sign/{rid}": ("GET", 405),
    }
    host, port = gw.uri.removeprefix("http://").split(":")
    for path, (method, status) in attempts.items():
        conn = http.client.HTTPConnection(host, int(port), timeout=30)  # sends the path as is (no dot-segment removal)
        conn.request(method, path, body=b"{}", headers={**h, "Content-Type": "application/json"})
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        assert r.status == status, (path, r.status, text)
    assert lake.calls.paths[before:] == []


def test_catalog_routes_refuse_signer_paths(lake: Lake, gw: Gateway) -> None:
    """Iceberg 1.12 with only ``s3.signer.*`` set posted its signer calls to the table's ``…/tables/t/sign``
    through the gateway's main route. The attack: a local process with the session secret asks the main
    route (and a view-chain route) to sign at the catalog's signer paths. Before the fix the catalog signed
    (200, a URL the store accepted); now the gateway refuses before any upstream call: signing goes only
    through the ``/sign/{id}`` routes it handed out."""
    signer_endpoint(gw, "orders")  # the table was loaded: the gateway knows the catalog's signer target
    uri = lake.object_url("orders", "data/orders.parquet")
    body = sign_body(lake, "GET", uri)
    chain = gw.chains.register(((("ns",), "v"),), "ns%1Fv", {(("ns",), "orders")})
    paths = [
        f"{P}/namespaces/ns/tables/orders/sign",  # the spec's per-table signer: Iceberg 1.12's default
        f"{P}/namespaces/ns/tables/orders/sign/",
        f"{P}/namespaces/ns/tables/orders%2Fsign",  # encoded: decodes to the same path
        "/v1/aws/s3/sign",  # the legacy S3 signer (Iceberg 1.10's default)
        f"/chain/{chain.id}{P}/namespaces/ns/tables/orders/sign",  # a view-chain route permits no signing either
    ]
    before = len(lake.calls.paths)
    since = time.time()
    for path in paths:
        r = httpx.post(f"{gw.uri}{path}", json=body, headers=auth(gw), timeout=30)
        read = replay("GET", uri, r).status_code if r.status_code == 200 else None  # the S3 call it would enable
        assert r.status_code == 403 and read is None, (path, r.status_code, read, r.text)
        error = r.json()["error"]
        assert error["type"] == "ForbiddenException" and "/sign/{id}" in error["message"], error
    assert lake.calls.paths[before:] == []  # nothing reached the catalog
    assert lake.audit(since, "sign_request") == []
    # a table that happens to be named "sign" is still a table: its load reaches the catalog (which decides)
    named_sign = httpx.get(f"{gw.uri}{P}/namespaces/ns/tables/sign", headers=auth(gw), timeout=30)
    assert named_sign.status_code in (403, 404) and "/sign/{id}" not in named_sign.text
    assert lake.calls.paths[before:] == [f"{P}/namespaces/ns/tables/sign"]


def test_a_signer_off_the_catalogs_origin_never_gets_the_token() -> None:
    """A catalog naming a signer on another server: the gateway refuses rather than send the user's token there."""
    seen: list[dict[str, str]] = []
    other = FastAPI()

    @other.post("/v1/aws/s3/sign")
    async def sign(request: Request) -> dict[str, Any]:
        seen.append(dict(request.headers))
        return {"uri": "http://x", "headers": {}}

    catalog = FastAPI()
    box: dict[str, str] = {}

    @catalog.get("/v1/p/namespaces/ns/tables/t")
    def load_t() -> dict[str, Any]:
        return {
            "metadata-location": "s3://b/t/metadata/1.json",
            "metadata": {"format-version": 2, "location": "s3://b/t"},
            "config": {"s3.remote-signing-enabled": "true", "s3.signer.uri": box["other"]},
        }

    servers = [BackgroundServer(app, bind("127.0.0.1", 0), name) for app, name in ((other, "other"), (catalog, "cat"))]
    for s in servers:
        s.start()
    box["other"] = f"http://127.0.0.1:{servers[0].port}"
    try:
        with Gateway(f"http://127.0.0.1:{servers[1].port}", lambda: "the-users-token") as g:
            loaded = httpx.get(f"{g.uri}/v1/p/namespaces/ns/tables/t", headers=auth(g), timeout=30).json()
            endpoint = loaded["config"]["s3.signer.endpoint"]
            assert endpoint.startswith(f"{g.uri}/sign/") and loaded["config"]["s3.signer.uri"] == g.uri
            r = httpx.post(endpoint, json={"region": "r", "uri": "http://s3/b/t/x", "method": "GET"}, headers=auth(g))
            assert r.status_code == 403 and "origin" in r.json()["error"]["message"], r.text
    finally:
        for s in servers:
            s.stop()
    assert seen == []


def test_rewrite_signing_resolves_targets_like_iceberg_and_keeps_the_chain_apart() -> None:
    routes = SignerRoutes()
    table = {
        "metadata-location": "s3://b/t/m.json",
        "metadata": {},
        "config": {"s3.remote-signing-enabled": "true", "s3.signer.endpoint": "v1/p/namespaces/ns/tables/t/sign"},
    }
    body = json.dumps(table).encode()
    main = json.loads(rewrite_signing(body, "http://cat:1/api", "http://gw", "http://gw", routes, "table ns.t", None))
    chained = json.loads(
        rewrite_signing(body, "http://cat:1/api", "http://gw/chain/c1", "http://gw", routes, "table ns.t", "c1")
    )
    m_id = main["config"]["s3.signer.endpoint"].rsplit("/", 1)[1]
    c_id = chained["config"]["s3.signer.endpoint"].rsplit("/", 1)[1]
    assert m_id != c_id and chained["config"]["s3.signer.uri"] == "http://gw/chain/c1"
    route = routes.get(m_id)
    assert route is not None and route.target == "http://cat:1/api/v1/p/namespaces/ns/tables/t/sign"
    legacy = {**table, "config": {"s3.remote-signing-enabled": "true"}}
    out = json.loads(
        rewrite_signing(json.dumps(legacy).encode(), "http://cat:1", "http://gw", "http://gw", routes, "t", None)
    )
    legacy_route = routes.get(out["config"]["s3.signer.endpoint"].rsplit("/", 1)[1])
    assert legacy_route is not None and legacy_route.target == "http://cat:1/v1/aws/s3/sign"
    # a catalog naming its signer with Iceberg 1.12's keys: the target comes from them, and both keys point here
    named_112 = {**table, "config": {"s3.remote-signing-enabled": "true", "signer.endpoint": "v1/sign/x"}}
    out = json.loads(
        rewrite_signing(json.dumps(named_112).encode(), "http://cat:1", "http://gw", "http://gw", routes, "t", None)
    )
    route_112 = routes.get(out["config"]["signer.endpoint"].rsplit("/", 1)[1])
    assert route_112 is not None and route_112.target == "http://cat:1/v1/sign/x"
    assert out["config"]["s3.signer.endpoint"] == out["config"]["signer.endpoint"]
    # the paths the catalog routes refuse: the spec's, the legacy one, and every target the catalog named
    refused = ["/v1/p/namespaces/ns/tables/t/sign", "/v1/aws/s3/sign", "/x/v1/aws/s3/sign/abc", "/v1/sign/x"]
    passed = ["/v1/p/namespaces/ns/tables/sign", "/v1/p/namespaces/sign/tables/t", "/v1/p/namespaces/ns/tables/t"]
    assert all(signer_path(p, "http://cat:1", routes) for p in refused)
    assert not any(signer_path(p, "http://cat:1", routes) for p in passed)
    assert signer_path("/v1/p/namespaces/ns/tables/t/sign", "http://cat:1/api", routes)  # the API below a base path
    assert signer_path("/sign", "http://cat:1/api/v1", SignerRoutes()) is False
    # vended mode leaves credentials alone; remote-signing mode removes every one of them
    vended = {**table, "config": {"s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.endpoint": "http://s3"}}
    raw = json.dumps(vended).encode()
    assert (
        rewrite_signing(raw, "http://cat:1", "http://gw", "http://gw", routes, "t", None, strip_credentials=False)
        == raw
    )
    stripped = json.loads(
        rewrite_signing(raw, "http://cat:1", "http://gw", "http://gw", routes, "t", None, strip_credentials=True)
    )
    assert stripped["config"] == {"s3.endpoint": "http://s3"}


def test_signer_routes_carry_their_routes_chain_and_no_other() -> None:
    """On the main route a signer call never carries ``referenced-by`` (INVOKER, whatever the catalog or the
    engine put there); on a view-chain route it carries exactly that chain."""
    queries: list[str] = []
    catalog = FastAPI()

    @catalog.get("/v1/p/namespaces/ns/tables/t")
    def load_t() -> dict[str, Any]:
        return {
            "metadata-location": "s3://b/t/metadata/1.json",
            "metadata": {"format-version": 2, "location": "s3://b/t"},
            "config": {
                "s3.remote-signing-enabled": "true",
                "s3.signer.endpoint": "v1/p/namespaces/ns/tables/t/sign?referenced-by=ns%1Fdefiner&x=1",
            },
        }

    @catalog.post("/v1/p/namespaces/ns/tables/t/sign")
    async def sign(request: Request) -> dict[str, Any]:
        queries.append(request.url.query)
        return {"uri": "http://s3/b/t/x", "headers": {}}

    server = BackgroundServer(catalog, bind("127.0.0.1", 0), "cat")
    server.start()
    try:
        with Gateway(f"http://127.0.0.1:{server.port}", lambda: "tok", access="remote-signing") as g:
            route = g.chains.register(((("ns",), "v"),), "ns%1Fv", {(("ns",), "t")})
            body = {"region": "r", "uri": "http://s3/b/t/x", "method": "GET"}
            for base in (g.uri, f"{g.uri}/chain/{route.id}"):
                loaded = httpx.get(f"{base}/v1/p/namespaces/ns/tables/t", headers=auth(g), timeout=30).json()
                assert loaded["config"]["s3.signer.uri"] == base
                r = httpx.post(loaded["config"]["s3.signer.endpoint"], json=body, headers=auth(g), timeout=30)
                assert r.status_code == 200, r.text
    finally:
        server.stop()
    assert queries == ["x=1", "x=1&referenced-by=ns%1Fv"]


def test_connect_access_option_reaches_spark_conf_and_gateway(lake: Lake) -> None:
    import lakesession
    from lakesession._spark.session import catalog_conf
    from lakesession.errors import ConfigError

    with pytest.raises(ConfigError, match="remote-signing"):
        lakesession.connect(access="remote_signing")  # refused before any catalog starts
    token = lake.handle.admin.token_for("mallory")
    with lakesession.connect(uri=lake.handle.uri, token=token, access="remote-signing") as s:
        assert s.access == "remote-signing"
        conf = catalog_conf("lake", s.gateway.uri, s.gateway.secret, None, s.access)
        assert conf["spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation"] == "remote-signing"
        loaded = load(s.gateway, "orders")  # the session's gateway asks for signing whatever the engine says
        assert loaded.json()["config"]["s3.signer.endpoint"].startswith(f"{s.gateway.uri}/sign/")
        status = s.status()
        assert status["access"] == "remote-signing"
        rows = [r for r in status["credentials"] if r["engine"] == "spark"]
        assert [(r["table"], r["state"]) for r in rows] == [("ns.orders", "remote-signing")]
    with lakesession.connect(uri=lake.handle.uri, token=token) as s:
        assert s.access == "vended-credentials"
        assert "s3.access-key-id" in json.dumps(load(s.gateway, "orders").json())


def test_staged_creates_are_signed_for_creators_only_inside_their_location(lake: Lake) -> None:
    """CTAS writes its files before the table exists (a staged create, committed at the end): the signer signs
    inside the staged table's location for a principal who may create tables there, and nothing else."""
    etl_token = lake.handle.admin.token_for("etl")
    with Gateway(lake.handle.uri, lambda: etl_token, access="remote-signing") as g:
        body = {"name": "staged", "schema": SCHEMA, "stage-create": True}
        r = httpx.post(f"{g.uri}{P}/namespaces/ns/tables", json=body, headers=auth(g), timeout=30)
        assert r.status_code == 200, r.text
        location = r.json()["metadata"]["location"].split(f"s3://{BUCKET}/", 1)[1]
        endpoint = r.json()["config"]["s3.signer.endpoint"]
        uri = f"{lake.endpoint}/{BUCKET}/{location}/data/part-0.parquet"
        signed = httpx.post(endpoint, json=sign_body(lake, "PUT", uri), headers=auth(g), timeout=30)
        assert signed.status_code == 200, signed.text
        assert replay("PUT", uri, signed, b"ctas rows").status_code == 200
        outside = httpx.post(
            endpoint,
            json=sign_body(lake, "PUT", lake.object_url("secret", "data/x.parquet")),
            headers=auth(g),
            timeout=30,
        )
        assert outside.status_code == 403, outside.text
    # mallory may not create tables in ns: no signature for a table that does not exist
    mallory = lake.handle.admin.token_for("mallory")
    uri = f"{lake.endpoint}/{BUCKET}/{location.rsplit('/', 1)[0]}/mine/data/x.parquet"
    r = httpx.post(
        f"{lake.handle.uri}{P}/namespaces/ns/tables/mine/sign",
        json=sign_body(lake, "PUT", uri),
        headers={"Authorization": f"Bearer {mallory}"},
        timeout=30,
    )
    assert r.status_code == 403, r.text
