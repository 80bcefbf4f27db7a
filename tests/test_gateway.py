"""The gateway on real loopback servers: secret auth, pass-through, rewriting, single flight, access log."""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
from fastapi import FastAPI, Request, Response

from lakesession._background import BackgroundServer, bind
from lakesession.gateway import Gateway
from lakesession.gateway._app import rewrite_table_config

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


def test_unreachable_catalog_is_a_clean_503() -> None:
    sock = bind("127.0.0.1", 0)
    port = sock.getsockname()[1]
    sock.close()
    with Gateway(f"http://127.0.0.1:{port}", lambda: "t", timeout=2) as g:
        r = httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret}"})
    assert r.status_code == 503 and "unreachable" in r.json()["error"]["message"]


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
            json.dumps({"storage-credentials": [{"prefix": "s3://b/t/", "config": {"s3.access-key-id": "AK"}}]}),
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
    finally:
        server.stop()


def test_rewrite_leaves_other_endpoints_alone() -> None:
    body = json.dumps(
        {"config": {"client.refresh-credentials-endpoint": "v1/p/namespaces/ns/tables/t/credentials"}}
    ).encode()
    assert rewrite_table_config(body, "http://up", "http://gw") == body
