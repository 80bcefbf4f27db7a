"""The gateway attacked as the JVM (or anything else holding the session secret) could: real HTTP on loopback.

* paths are forwarded exactly as received (``%1F`` namespaces work; an encoded ``?`` cannot
  smuggle ``referenced-by`` past the main route);
* the gateway's own failures (issuer or catalog unreachable) are 503 + Retry-After, never 500;
* no secret in error bodies or DEBUG logs;
* the client path never imports FastAPI.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesession._wire.sockets import bind
from lakesession.gateway import Gateway
from lakesession.identity import ClientCredentials, StaticToken
from lakesession.reference.serving import BackgroundServer
from tests.conftest import SECRETS

P = "/v1/lakesession"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "x", "type": "long", "required": False}]}


class Recorder:
    """A plain ASGI upstream that records exactly what reached it (raw path, raw query) and answers JSON."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self.status = 200
        self.body = b'{"defaults":{},"overrides":{}}'

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.seen.append(
            {
                "method": scope["method"],
                "raw_path": scope["raw_path"],
                "query": scope["query_string"],
                "headers": {k.decode().lower(): v.decode() for k, v in scope["headers"]},
                "body": body,
            }
        )
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


@pytest.fixture()
def recorder() -> Iterator[tuple[Recorder, BackgroundServer]]:
    rec = Recorder()
    server = BackgroundServer(rec, bind("127.0.0.1", 0), "recording-upstream")
    server.start()
    yield rec, server
    server.stop()


def closed_port() -> int:
    sock = bind("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    sock.close()
    return port


def raw_get(uri: str, raw_target: str, secret: str) -> httpx.Response:
    """GET ``raw_target`` byte for byte (httpx resolves dot segments even in a raw path; http.client does not)."""
    url = httpx.URL(uri)
    conn = http.client.HTTPConnection(url.host, url.port, timeout=30)
    try:
        conn.request("GET", raw_target, headers={"Authorization": f"Bearer {secret}"})
        r = conn.getresponse()
        return httpx.Response(r.status, headers=r.getheaders(), content=r.read())
    finally:
        conn.close()


def through_gateway(server: Any, raw_target: str) -> httpx.Response:
    """``raw_target`` sent byte for byte through a fresh gateway in front of the recording ``server``."""
    with Gateway(f"http://127.0.0.1:{server.port}", lambda: "user-token") as g:
        return raw_get(g.uri, raw_target, g.secret)


# -- the path, exactly as received ------------------------------------------------------------------


def test_namespace_separator_paths_are_forwarded_raw(catalog) -> None:  # type: ignore[no-untyped-def]
    """Nested namespaces and Iceberg's metadata-table probe (``ns%1Ft``) used to answer 500."""
    with Gateway(catalog.uri, lambda: catalog.admin.token_for("etl")) as g:
        h = {"Authorization": f"Bearer {g.secret}"}
        with httpx.Client(base_url=g.uri, headers=h, timeout=30) as c:
            c.post(f"{P}/namespaces", json={"namespace": ["atk"]})
            nested = c.post(f"{P}/namespaces", json={"namespace": ["atk", "inner"]})
            assert nested.status_code in (200, 409), nested.text
            created = c.post(f"{P}/namespaces/atk%1Finner/tables", json={"name": "t", "schema": SCHEMA})
            assert created.status_code in (200, 409), created.text
            loaded = c.get(f"{P}/namespaces/atk%1Finner/tables/t")
            assert loaded.status_code == 200, loaded.text
            assert c.get(f"{P}/namespaces/atk%1Finner").json()["namespace"] == ["atk", "inner"]
            probe = c.get(f"{P}/namespaces/atk%1Finner%1Ft")  # what Spark asks before `atk.inner.t.snapshots`
            assert probe.status_code == 404 and probe.json()["error"]["type"] == "NoSuchNamespaceException"
    loads = [r for r in g.access_log.records() if r.action == "load_table"]
    assert [r.object for r in loads] == ["table atk.inner.t"]


def test_raw_path_reaches_upstream_byte_for_byte(recorder) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    target = "/v1/p/namespaces/a%1Fb/tables/t%2Cx%25y%20z"
    r = through_gateway(server, target + "?snapshots=refs&x=a%2Cb+c")
    assert r.status_code == 200
    assert rec.seen[-1]["raw_path"] == target.encode()
    assert rec.seen[-1]["query"] == b"snapshots=refs&x=a%2Cb+c"


SMUGGLED = [
    # an encoded '?' in the last segment: decoded and re-joined, it became a query string upstream
    "/v1/p/namespaces/hr/tables/salaries%3Freferenced-by%3Dsales%251Fv_orders",
    "/v1/p/namespaces/hr/tables/salaries%3freferenced-by%3dsales%251Fv_orders",
    "/v1/p/namespaces/hr/tables/salaries%3Freferenced-by%3Dsales%251Fv_orders/credentials",
    "/v1/p/namespaces/hr/tables/salaries%23frag",
]


@pytest.mark.parametrize("target", SMUGGLED)
def test_encoded_query_in_the_path_cannot_smuggle_referenced_by(recorder, target: str) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    r = through_gateway(server, target)
    assert not [s for s in rec.seen if b"referenced-by" in s["query"] or b"frag" in s["query"]], rec.seen
    assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException"
    assert rec.seen == []  # refused before anything went upstream


QUERIES = [
    "referenced-by=sales%1Fv_orders",
    "Referenced-By=sales%1Fv_orders",
    "referenced%2Dby=sales%1Fv_orders",
    "referenced%252Dby=sales%1Fv_orders",
    "snapshots=all;referenced-by=sales%1Fv_orders",
    "referenced-by",
    "x=1&referenced-by=a&referenced-by=b",
]


@pytest.mark.parametrize("query", QUERIES)
def test_referenced_by_never_reaches_the_catalog_from_the_main_route(recorder, query: str) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    r = through_gateway(server, f"/v1/p/namespaces/hr/tables/salaries?{query}")
    assert r.status_code == 200
    forwarded = rec.seen[-1]["query"].decode()
    assert "referenced" not in httpx.URL("http://h/?" + forwarded).params.multi_items().__repr__().lower()
    assert "referenced" not in forwarded.lower().replace("%2d", "-").replace("%252d", "-")


def test_dot_segments_are_refused(recorder) -> None:  # type: ignore[no-untyped-def]
    """``..`` would be resolved by the HTTP client, reaching a path other than the one authorized."""
    rec, server = recorder
    with Gateway(f"http://127.0.0.1:{server.port}", lambda: "user-token") as g:
        for target in (
            "/v1/p/namespaces/ns/tables/t/../../../../config",
            "/v1/p/namespaces/ns/tables/%2E%2E",
            "/v1/p/namespaces/./tables/t",
        ):
            r = raw_get(g.uri, target, g.secret)
            assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException", target
    assert rec.seen == []


def test_chain_route_checks_the_raw_path(recorder) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    with Gateway(f"http://127.0.0.1:{server.port}", lambda: "user-token") as g:
        route = g.chains.register(((("sales",), "v"),), "sales%1Fv", {(("sales",), "orders")})
        ok = raw_get(g.uri, f"/chain/{route.id}/v1/p/namespaces/sales/tables/orders", g.secret)
        assert ok.status_code == 200
        assert rec.seen[-1]["raw_path"] == b"/v1/p/namespaces/sales/tables/orders"
        assert rec.seen[-1]["query"] == b"referenced-by=sales%1Fv"
        for target in (
            "/v1/p/namespaces/sales/tables/orders%3Freferenced-by%3Devil%251Fv",
            "/v1/p/namespaces/sales/tables/orders%2Fcredentials",
            "/v1/p/namespaces/sales/tables/orders/../salaries",
        ):
            r = raw_get(g.uri, f"/chain/{route.id}{target}", g.secret)
            assert r.status_code in (400, 403), (target, r.status_code)
        # the main route never serves a chain route through an encoded slash
        r = raw_get(g.uri, f"/chain%2F{route.id}/v1/p/namespaces/sales/tables/orders", g.secret)
        assert rec.seen[-1]["query"] == b"" or r.status_code in (400, 403)
    assert len([s for s in rec.seen if b"referenced-by" in s["query"]]) == 1


# -- the gateway's own failures: 503 + Retry-After, never a 500 ----------------------------------


def test_an_issuer_never_reached_is_a_400_naming_the_address(catalog) -> None:  # type: ignore[no-untyped-def]
    """Token fetch fails and no token was ever obtained: nothing reached the catalog, so no 500 (CommitStateUnknown),
    and no 503 either (Iceberg would retry it for minutes): a wrong address is the likely cause, said at once.
    (A session that has worked before gets 503 + Retry-After: test_catalog_stopped_mid_session_is_a_503_then_recovers.)"""
    url = f"http://127.0.0.1:{closed_port()}/token"
    source = ClientCredentials(url, "etl", SECRETS["etl"], scope="catalog")
    with Gateway(catalog.uri, source.token, invalidate=source.invalidate) as g:
        h = {"Authorization": f"Bearer {g.secret}"}
        commit = httpx.post(f"{g.uri}{P}/namespaces/atk/tables/t", headers=h, json={"updates": []}, timeout=60)
        load = httpx.get(f"{g.uri}{P}/namespaces/atk/tables/t", headers=h, timeout=60)
    for r in (commit, load):
        assert r.status_code == 400 and "retry-after" not in r.headers, r.text
        err = r.json()["error"]
        assert err["type"] == "BadRequestException" and err["code"] == 400
        assert url in err["message"] and "LAKESESSION_TOKEN_URL" in err["message"] and "Traceback" not in r.text
        assert SECRETS["etl"] not in r.text and g.secret not in r.text


def test_a_dead_login_is_a_401_naming_the_fix(catalog) -> None:  # type: ignore[no-untyped-def]
    source = ClientCredentials(f"{catalog.issuer_uri}/token", "etl", "wrong-secret-456", scope="catalog")
    with Gateway(catalog.uri, source.token, invalidate=source.invalidate) as g:
        r = httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret}"}, timeout=60)
    # retrying cannot help: a clean NotAuthorizedException in the JVM, with the identity layer's fix-it hint
    assert r.status_code == 401 and r.json()["error"]["type"] == "NotAuthorizedException", r.text
    assert "Check the client id" in r.json()["error"]["message"]
    assert "wrong-secret-456" not in r.text and g.secret not in r.text


def test_a_failing_token_source_of_any_kind_is_not_a_500(recorder) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder

    def broken() -> str:
        raise RuntimeError("token cache file is corrupt: secret-value-789")

    with Gateway(f"http://127.0.0.1:{server.port}", broken) as g:
        r = httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret}"})
    assert r.status_code == 503 and "retry-after" in r.headers
    assert "secret-value-789" not in r.text and "Traceback" not in r.text
    assert rec.seen == []


def test_catalog_stopped_mid_session_is_a_503_then_recovers(recorder) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    port = server.port
    with Gateway(f"http://127.0.0.1:{port}", lambda: "user-token", timeout=5) as g:
        h = {"Authorization": f"Bearer {g.secret}"}
        assert httpx.get(f"{g.uri}/v1/config", headers=h).status_code == 200  # a kept-alive connection
        server.stop()
        down = httpx.post(f"{g.uri}/v1/p/namespaces/ns/tables/t", headers=h, json={"updates": []})
        assert down.status_code == 503 and int(down.headers["retry-after"]) >= 1
        assert down.json()["error"]["type"] == "ServiceUnavailableException"
        assert "unreachable" in down.json()["error"]["message"]
        # the catalog comes back on the same port
        again = BackgroundServer(rec, bind("127.0.0.1", port), "recording-upstream-2")
        again.start()
        try:
            assert httpx.get(f"{g.uri}/v1/config", headers=h).status_code == 200
        finally:
            again.stop()


class DiesAfterReading:
    """A catalog that reads each request and dies before answering (kill -9 between saving and answering)."""

    def __init__(self) -> None:
        self.sock = bind("127.0.0.1", 0)
        self.port = int(self.sock.getsockname()[1])
        self.requests: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests.append(data)
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, no answer

    def close(self) -> None:
        self.sock.close()


def test_catalog_dying_after_a_commit_was_sent_is_504_not_503() -> None:
    """The commit may have been saved: 503 would make Iceberg retry it blindly; 504 is
    CommitStateUnknown, the truth. A read is safe to retry: 503."""
    dead = DiesAfterReading()
    try:
        with Gateway(f"http://127.0.0.1:{dead.port}", lambda: "user-token", timeout=5) as g:
            h = {"Authorization": f"Bearer {g.secret}"}
            commit = httpx.post(f"{g.uri}/v1/p/namespaces/ns/tables/t", headers=h, json={"updates": []})
            load = httpx.get(f"{g.uri}/v1/p/namespaces/ns/tables/t", headers=h)
    finally:
        dead.close()
    assert any(r.startswith(b"POST /v1/p/namespaces/ns/tables/t") for r in dead.requests)  # it did arrive
    assert commit.status_code == 504 and commit.json()["error"]["type"] == "ServiceFailureException"
    assert "may or may not" in commit.json()["error"]["message"]
    assert load.status_code == 503 and "retry-after" in load.headers


def test_retry_after_grows_with_the_outage(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Iceberg waits Retry-After instead of its own exponential backoff: the delay must grow like it."""
    from lakesession.gateway import _upstream

    now = [1000.0]
    monkeypatch.setattr(_upstream.time, "monotonic", lambda: now[0])
    outage = _upstream.Outage()
    waits = []
    for _ in range(6):
        waits.append(outage.failed())
        now[0] += waits[-1]
    assert waits == [1, 1, 2, 4, 8, 16]  # five retries span ~31 s, like Iceberg's 1+2+4+8+16
    now[0] += 1000
    assert outage.failed() == 60  # capped
    outage.recovered()
    assert outage.failed() == 1


# -- secrets ------------------------------------------------------------------------------------


def test_no_secret_in_debug_logs_or_error_bodies(catalog, caplog) -> None:  # type: ignore[no-untyped-def]
    token = catalog.admin.token_for("etl")
    caplog.set_level(logging.DEBUG)
    bodies: list[str] = []
    with Gateway(catalog.uri, StaticToken(token).token) as g:
        h = {"Authorization": f"Bearer {g.secret}"}
        with httpx.Client(base_url=g.uri, headers=h, timeout=30) as c:
            bodies += [c.get("/v1/config").text, c.get(f"{P}/namespaces/nope/tables/nope").text]
            bodies += [c.get(f"{P}/namespaces/atk/tables/x%3Fy").text, c.get(f"{P}/namespaces/a/tables/%2E%2E").text]
        bodies.append(httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {g.secret[:-1]}"}).text)
        bodies.append(httpx.get(f"{g.uri}/v1/config", headers={"Authorization": f"Bearer {token}"}).text)
        secret = g.secret
    logged = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "lakesession.gateway" in logged  # the gateway did log at DEBUG
    for value in (token, secret, secret[:-1]):
        assert value not in logged
        assert not any(value in b for b in bodies)


# -- start-up: no FastAPI on the client path --------------------------------------------------------

CLIENT_PATH = """
import json, sys, time
import httpx
import lakesession
s = lakesession.connect(uri=sys.argv[1], token="static-user-token")
gw = s.gateway  # starts the gateway, as spark() does before launching the JVM
r = httpx.get(gw.uri + "/v1/config", headers={"Authorization": "Bearer " + gw.secret}, timeout=30)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("fastapi", "pydantic", "starlette", "websockets"))
print(json.dumps({"status": r.status_code, "heavy": heavy}))
s.close()
"""


def test_client_path_never_imports_fastapi(recorder, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    rec, server = recorder
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2]), "LAKESESSION_CONFIG": "/nonexistent"}
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", CLIENT_PATH, f"http://127.0.0.1:{server.port}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 200
    assert result["heavy"] == [], result["heavy"]
    assert rec.seen[-1]["headers"]["authorization"] == "Bearer static-user-token"
    assert time.monotonic() - started < 60
