"""The gateway on real loopback servers: secret auth, pass-through, rewriting, single flight, access log."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from lakesession._wire.sockets import bind
from lakesession.gateway import AccessLog, AccessRecord, Gateway
from lakesession.gateway._app import rewrite_table_config
from lakesession.reference.serving import BackgroundServer
from tests._stub import QuietHandler, StubServer

P = "/v1/lakesession"


class CountingToken:
    def __init__(self, catalog, principal: str):  # type: ignore[no-untyped-def]
        self.catalog, self.principal = catalog, principal
        self.issued: list[str] = []
        self.invalidated = 0

    def token(self) -> str:
        if not self.issued:
            self.issued.append(self.catalog.admin.token_for(self.principal))
        return self.issued[-1]

    def invalidate(self) -> None:
        self.invalidated += 1
        self.issued.clear()


@pytest.fixture()
def gw(catalog):  # type: ignore[no-untyped-def]
    source = CountingToken(catalog, "etl")
    with Gateway(catalog.uri, source.token, invalidate=source.invalidate) as g:
        g.source = source  # type: ignore[attr-defined]
        yield g


def test_wrong_or_missing_secret_is_401(gw) -> None:  # type: ignore[no-untyped-def]
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Bearer {gw.secret}x"}):
        r = httpx.get(f"{gw.uri}/v1/config", headers=headers)
        assert r.status_code == 401 and r.json()["error"]["type"] == "NotAuthorizedException"
    assert gw.access_log.records() == []


def test_forwards_as_user_and_never_leaks_token(gw, catalog) -> None:  # type: ignore[no-untyped-def]
    h = {"Authorization": f"Bearer {gw.secret}"}
    with httpx.Client(base_url=gw.uri, headers=h) as c:
        cfg = c.get("/v1/config")
        assert cfg.status_code == 200 and cfg.json()["overrides"]["prefix"] == "lakesession"
        c.post(f"{P}/namespaces", json={"namespace": ["gwns"]})
        schema = {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "x", "type": "long", "required": False}],
        }
        created = c.post(f"{P}/namespaces/gwns/tables", json={"name": "t1", "schema": schema})
        assert created.status_code == 200
        loaded = c.get(f"{P}/namespaces/gwns/tables/t1")
        assert loaded.status_code == 200 and loaded.json()["metadata"]["format-version"] == 2
        token = gw.source.issued[-1]
        for r in (cfg, created, loaded):
            assert token not in r.text and token not in str(r.headers)
        # error bodies pass through unchanged
        missing = c.get(f"{P}/namespaces/gwns/tables/nope")
        direct = httpx.get(
            f"{catalog.uri}{P}/namespaces/gwns/tables/nope", headers={"Authorization": f"Bearer {token}"}
        )
        assert missing.status_code == direct.status_code == 404
        assert missing.json() == direct.json()
        assert c.head(f"{P}/namespaces/gwns/tables/t1").status_code == 204
    actions = [(r.action, r.object, r.status) for r in gw.access_log.records()]
    assert ("create_table", "table gwns.t1", 200) in actions
    assert ("load_table", "table gwns.t1", 200) in actions
    assert ("load_table", "table gwns.nope", 404) in actions
    assert "token" not in repr(gw) and gw.secret not in repr(gw)


def test_upstream_401_refreshes_the_token_once(gw, catalog) -> None:  # type: ignore[no-untyped-def]
    gw.source.issued[:] = ["expired-or-revoked-token"]
    r = httpx.get(f"{gw.uri}/v1/config", headers={"Authorization": f"Bearer {gw.secret}"})
    assert r.status_code == 200 and gw.source.invalidated == 1


def test_a_catalog_never_reached_is_a_final_400_naming_the_url() -> None:
    """A wrong address, not an outage: a 400 (Iceberg retries 429/502/503/504: twelve 503s cost 412 s) naming the
    URL and uri=, whose message Spark's conversion raises as CatalogUnreachableError. Was a 503 + Retry-After."""
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    with Gateway(f"http://127.0.0.1:{port}", lambda: "t", timeout=2) as g:
        r = httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret}"})
    err = r.json()["error"]
    assert r.status_code == 400 and err["type"] == "BadRequestException" and "retry-after" not in r.headers
    assert f"http://127.0.0.1:{port}" in err["message"] and "uri= (LAKESESSION_URI)" in err["message"]
    assert "(CatalogUnreachableError)" in err["message"] and "retry" not in err["message"].lower()


def test_a_token_endpoint_never_reached_is_a_final_400_too() -> None:
    from lakesession.identity import ClientCredentials

    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    source = ClientCredentials(f"http://127.0.0.1:{port}/v1/oauth/tokens", "who", "secret-never-shown")
    with Gateway(f"http://127.0.0.1:{port}", source.token, timeout=2) as g:
        start = time.monotonic()
        r = httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret}"})
        took = time.monotonic() - start
    err = r.json()["error"]
    assert r.status_code == 400 and "(IssuerUnreachableError)" in err["message"] and "retry-after" not in r.headers
    assert f"http://127.0.0.1:{port}/v1/oauth/tokens" in err["message"] and "secret-never-shown" not in r.text
    assert took < 2  # no blocking retries for an address that never answered


def test_refresh_endpoint_rewritten_and_refreshes_single_flight() -> None:
    """Against a minimal spec-shaped upstream that vends credentials slowly."""
    calls = {"credentials": 0}
    app = FastAPI()
    upstream_box: dict[str, str] = {}

    @app.get("/v1/p/namespaces/ns/tables/t")
    def load() -> dict:  # type: ignore[type-arg]
        return {
            "metadata-location": "s3://b/t/metadata/1.json",
            "metadata": {"format-version": 2},
            "config": {
                "client.refresh-credentials-endpoint": upstream_box["uri"] + "/v1/p/namespaces/ns/tables/t/credentials",
                "s3.session-token-expires-at-ms": str(int(time.time() * 1000) + 60_000),
            },
        }

    @app.get("/v1/p/namespaces/ns/tables/t/credentials")
    def creds(request: Request) -> Response:
        calls["credentials"] += 1
        time.sleep(0.3)
        return Response(
            json.dumps(
                {
                    "storage-credentials": [
                        {
                            "prefix": "s3://b/t/",
                            "config": {
                                "s3.access-key-id": "AK",
                                "s3.session-token-expires-at-ms": str(int(time.time() * 1000) + 60_000),
                            },
                        }
                    ]
                }
            ),
            media_type="application/json",
        )

    sock = bind("127.0.0.1", 0)
    server = BackgroundServer(app, sock, "fake-upstream")
    upstream_box["uri"] = f"http://127.0.0.1:{server.port}"
    server.start()
    try:
        with Gateway(upstream_box["uri"], lambda: "user-token") as g:
            h = {"Authorization": f"Bearer {g.secret}"}
            loaded = httpx.get(f"{g.uri}/v1/p/namespaces/ns/tables/t", headers=h).json()
            assert (
                loaded["config"]["client.refresh-credentials-endpoint"]
                == f"{g.uri}/v1/p/namespaces/ns/tables/t/credentials"
            )
            results: list[int] = []

            def refresh() -> None:
                results.append(
                    httpx.get(f"{g.uri}/v1/p/namespaces/ns/tables/t/credentials", headers=h, timeout=10).status_code
                )

            threads = [threading.Thread(target=refresh) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert results == [200] * 8
            assert calls["credentials"] == 1, "concurrent refreshes of one table must share one upstream call"
            recs = [r for r in g.access_log.records() if r.action == "load_table"]
            assert recs and recs[0].credentials_expire_at and recs[0].credentials_expire_at > time.time()
            # the JVM keeps asking (S3FileIO asks on nearly every request): served from the cache,
            # logged as one aggregated record per minute instead of one record each
            with httpx.Client(base_url=g.uri, headers=h) as c:
                for _ in range(300):
                    assert c.get("/v1/p/namespaces/ns/tables/t/credentials").status_code == 200
            assert calls["credentials"] == 1
            refreshes = [r for r in g.access_log.records() if r.action == "refresh_credentials"]
            cached = [r for r in refreshes if r.via == "cache"]
            assert [r.via for r in refreshes if r.via != "cache"].count("upstream") == 1
            assert 1 <= len(cached) <= 2  # at most a minute boundary in between
            assert sum(r.count for r in cached) >= 300 and g.access_log.requests() == 1 + 8 + 300
            assert all(r.credentials_expire_at and r.credentials_expire_at > time.time() for r in cached)
            assert all(r.until is not None and r.until >= r.time for r in cached if r.count > 1)
            assert len(g.access_log) <= 1 + 8 + 2
    finally:
        server.stop()


def test_rewrite_leaves_other_endpoints_alone() -> None:
    body = json.dumps(
        {"config": {"client.refresh-credentials-endpoint": "v1/p/namespaces/ns/tables/t/credentials"}}
    ).encode()
    assert rewrite_table_config(body, "http://up", "http://gw") == body


def test_access_log_aggregates_cache_served_refreshes_and_keeps_hours() -> None:
    """≈ 280 cache-served refreshes/s for an hour must not push loads and commits out of 10,000 records."""
    log = AccessLog()
    start = 1_700_000_000.0 - 1_700_000_000.0 % 60
    for second in range(3600):
        t = start + second
        if second % 60 == 30:
            log.add(AccessRecord(t, "load_table", "table s.a", 200, 3.0, via="upstream"))
            log.add(AccessRecord(t, "commit_table", "table s.a", 200, 9.0, via="upstream"))
            log.add(AccessRecord(t, "refresh_credentials", "table s.a", 200, 5.0, via="upstream"))
        for table in ("table s.a", "table s.b"):
            log.add(AccessRecord(t, "refresh_credentials", table, 200, 0.1, via="cache", credentials_expire_at=t + 60))
    records = log.records()
    assert len(records) == 60 * 3 + 60 * 2  # individual loads/commits/upstream refreshes + one per table-minute
    assert [r.action for r in records].count("load_table") == 60  # the first load, an hour ago, is still here
    assert records[0].action == "refresh_credentials" and records[0].count == 60  # placed at the minute's first
    assert records[0].time == start and records[0].until == start + 59
    cached = [r for r in records if r.via == "cache"]
    assert sum(r.count for r in cached) == 3600 * 2 and log.requests() == 3600 * 2 + 180
    assert all(r.count == 60 and r.until == r.time + 59 for r in cached)
    assert cached[-1].credentials_expire_at == start + 3599 + 60
    # since: a record counts if any of its requests is at or after the time
    assert {r.object for r in log.records(since=start + 3599)} == {"table s.a", "table s.b"}
    # failed cache-served answers are kept apart from successful ones
    log.add(AccessRecord(start + 3599, "refresh_credentials", "table s.a", 403, 0.1, via="cache"))
    assert log.records()[-1].status == 403 and log.records()[-1].count == 1


def test_access_log_bound_still_holds_for_aggregates() -> None:
    log = AccessLog(maxlen=5)
    t = 1_700_000_000.0 - 1_700_000_000.0 % 60
    log.add(AccessRecord(t, "refresh_credentials", "table s.a", 200, 0.1, via="cache"))
    for i in range(5):
        log.add(AccessRecord(t + 1, "load_table", f"table s.t{i}", 200, 1.0))
    assert [r.action for r in log.records()] == ["load_table"] * 5  # the aggregate fell off the end
    log.add(AccessRecord(t + 2, "refresh_credentials", "table s.a", 200, 0.1, via="cache"))
    log.add(AccessRecord(t + 3, "refresh_credentials", "table s.a", 200, 0.1, via="cache"))
    assert len(log) == 5 and log.records()[-1].count == 2 and log.records()[-1].time == t + 2


def test_table_results_get_a_client_region_when_the_catalog_names_none() -> None:
    """Iceberg Java cannot build its S3 client without a region; SeaweedFS-like catalogs send none."""
    import json as _json

    from lakesession.gateway._app import rewrite_table_config

    up, gw = "http://catalog:1", "http://127.0.0.1:2"
    bare = _json.dumps({"metadata": {}, "config": {"s3.endpoint": "http://s3:9"}}).encode()
    out = _json.loads(rewrite_table_config(bare, up, gw, "eu-west-3"))
    assert out["config"] == {"s3.endpoint": "http://s3:9", "client.region": "eu-west-3"}
    named = _json.dumps(
        {"metadata": {}, "storage-credentials": [{"prefix": "s3://b", "config": {"s3.region": "ap-south-1"}}]}
    )
    assert (
        _json.loads(rewrite_table_config(named.encode(), up, gw, "eu-west-3"))["config"]["client.region"]
        == "ap-south-1"
    )
    given = _json.dumps({"metadata": {}, "config": {"client.region": "us-west-2"}}).encode()
    assert rewrite_table_config(given, up, gw, "eu-west-3") == given  # the catalog's own choice stays
    listing = _json.dumps({"identifiers": []}).encode()
    assert rewrite_table_config(listing, up, gw, "eu-west-3") == listing  # only table results


def test_namespace_levels_reach_the_catalog_joined_by_its_own_separator() -> None:
    """Iceberg Java < 1.11 joins namespace levels with %1F whatever /v1/config says; Apache's REST fixture
    (Jetty 12) refuses %1F in a path with 400 "Suspicious Path Character" and asks for %2E instead."""
    seen: list[str] = []
    config = {"defaults": {}, "overrides": {"namespace-separator": "%2E"}}

    class JettyLike(QuietHandler):
        def do_GET(self) -> None:
            seen.append(self.path)  # raw, still percent-encoded
            if "%1f" in self.path.lower():
                status, body = 400, b"Suspicious Path Character"
            elif self.path == "/v1/config":
                status, body = 200, json.dumps(config).encode()
            elif self.path == "/v1/namespaces/sales%2Eeu":
                status, body = 200, json.dumps({"namespace": ["sales", "eu"], "properties": {}}).encode()
            else:
                status, body = (
                    404,
                    json.dumps({"error": {"message": "no", "type": "NoSuchNamespaceException", "code": 404}}).encode(),
                )
            self.reply(status, body)

    with StubServer(JettyLike) as server:
        with Gateway(server.url, lambda: "user-token") as g:
            with httpx.Client(base_url=g.uri, headers={"Authorization": f"Bearer {g.secret}"}) as c:
                assert c.get("/v1/config").status_code == 200
                assert c.get("/v1/namespaces/sales%1Feu").json()["namespace"] == ["sales", "eu"]
                assert c.get("/v1/namespaces/sales%1Feu/tables/orders").status_code == 404  # a metadata-table probe
                assert c.get("/v1/namespaces/a%251Fb").status_code == 404  # a literal "%1F" in one level stays
                config["overrides"] = {"namespace-separator": "/"}  # never a path or query character
                assert c.get("/v1/config").status_code == 200
                assert c.get("/v1/namespaces/sales%1Feu").status_code == 400
        assert seen[1:5] == [
            "/v1/namespaces/sales%2Eeu",
            "/v1/namespaces/sales%2Eeu/tables/orders",
            "/v1/namespaces/a%251Fb",
            "/v1/config",
        ]
        assert seen[5] == "/v1/namespaces/sales%1Feu"


def test_config_answers_naming_the_catalogs_own_uri_keep_the_jvm_on_the_gateway() -> None:
    """Nessie's /v1/config overrides ``uri`` with its own address: unrewritten, Iceberg Java would leave the gateway."""
    up, gw = "http://nessie:19120/iceberg", "http://127.0.0.1:2"
    body = json.dumps(
        {
            "defaults": {"prefix": "main%7Cwarehouse", "uri": up},
            "overrides": {"uri": up + "/", "nessie.core-base-uri": "http://nessie:19120/api/"},
        }
    ).encode()
    doc = json.loads(rewrite_table_config(body, up, gw))
    assert doc["overrides"]["uri"] == gw + "/" and doc["defaults"]["uri"] == gw
    assert doc["overrides"]["nessie.core-base-uri"] == "http://nessie:19120/api/"  # not the Iceberg REST root
    assert doc["defaults"]["prefix"] == "main%7Cwarehouse"


def test_refresh_endpoint_only_for_credentials_that_state_their_expiry() -> None:
    """Iceberg Java's refresh fails without ``s3.session-token-expires-at-ms`` (Nessie 0.99 vends none): the JVM
    then keeps the load's keys, and the next query's reload brings fresh ones."""
    up, gw, own = "http://catalog:1", "http://127.0.0.1:2", "http://127.0.0.1:2/v1/p/namespaces/ns/tables/t/credentials"
    keys = {"s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.session-token": "ST", "client.region": "r"}
    bare = json.dumps({"metadata": {"location": "s3://b/t"}, "config": keys}).encode()
    assert rewrite_table_config(bare, up, gw, "r", own) == bare
    timed = json.dumps(
        {"metadata": {"location": "s3://b/t"}, "config": {**keys, "s3.session-token-expires-at-ms": "1"}}
    ).encode()
    assert (
        json.loads(rewrite_table_config(timed, up, gw, "r", own))["config"]["client.refresh-credentials-endpoint"]
        == own
    )


def test_keys_without_a_stated_expiry_get_the_assumed_lifetime_only_when_one_is_set() -> None:
    from lakesession.gateway._app import stamp_expiry

    keys = {"s3.access-key-id": "AK", "s3.secret-access-key": "SK", "s3.session-token": "ST"}
    bare = json.dumps({"metadata": {"location": "s3://b/t"}, "config": keys}).encode()
    assert stamp_expiry(bare, None) == bare
    before = time.time()
    stamped = json.loads(stamp_expiry(bare, 60))["config"]["s3.session-token-expires-at-ms"]
    assert before + 59 <= int(stamped) / 1000 <= time.time() + 60
    creds = json.dumps({"storage-credentials": [{"prefix": "s3://b/t", "config": keys}]}).encode()
    assert "s3.session-token-expires-at-ms" in json.loads(stamp_expiry(creds, 5))["storage-credentials"][0]["config"]
    stated = json.dumps({"config": {**keys, "s3.session-token-expires-at-ms": "1"}}).encode()
    assert stamp_expiry(stated, 60) == stated  # the catalog's own expiry stays
    assert stamp_expiry(b'{"config": {"s3.endpoint": "x"}}', 60) == b'{"config": {"s3.endpoint": "x"}}'
