"""Two `lakesession serve` replicas behind one URL (a round-robin proxy), sharing PostgreSQL and the data
dir's issuer key: tokens from one validate on the other, a revoke on one is honoured by the other from the
next request on (far below one credential TTL), and both write one audit log."""

from __future__ import annotations

import http.client
import itertools
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from tests._pg import new_database
from tests._serve import Served
from tests._stub import QuietHandler, StubServer

P = "/v1/lakesession"
CREDENTIAL_TTL = 900  # what the replicas vend; a revoke must be honoured well within it
POLICY = """\
  principals:
    - {name: etl, type: service, client_secret: etl-pw-9}
    - {name: ann, type: user, client_secret: ann-pw-9}
  roles:
    - {name: eng, members: [etl]}
    - {name: readers, members: [ann]}
  grants:
    - {role: eng, privilege: CATALOG_MANAGE_ACCESS, on: catalog}
    - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""


class RoundRobin:
    """A tiny HTTP proxy: each request goes to the next backend, raw path kept (``%1F`` stays encoded)."""

    def __init__(self) -> None:
        self.backends: list[str] = []
        self.served: list[str] = []
        turn = itertools.count()
        proxy = self

        class Handler(QuietHandler):
            def _forward(self) -> None:
                backend = proxy.backends[next(turn) % len(proxy.backends)]
                proxy.served.append(backend)
                target = urlsplit(backend)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

            do_GET = do_POST = do_DELETE = do_HEAD = do_PUT = _forward

        self.server = StubServer(Handler)
        self.url = self.server.url

    def close(self) -> None:
        self.server.close()


@pytest.fixture(scope="module")
def replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RoundRobin, Served, Served]]:
    base = tmp_path_factory.mktemp("replicas")
    proxy = RoundRobin()
    cfg = base / "serve.yaml"
    cfg.write_text(
        f"port: 0\nbase_url: {proxy.url}\ndb_url: {new_database('replicas')}\n"
        f"warehouse: {(base / 'wh').as_uri()}\ncredential_ttl: {CREDENTIAL_TTL}\nbootstrap:\n{POLICY}"
    )
    (base / "wh").mkdir()
    args = ["--config", str(cfg), "--data-dir", str(base / "shared")]  # issuer key + admin secret: one copy
    started: dict[int, Served] = {}
    threads = [threading.Thread(target=lambda i=i: started.__setitem__(i, Served(args))) for i in (0, 1)]
    for t in threads:  # both replicas start at the same moment on an empty database and an empty data dir
        t.start()
    for t in threads:
        t.join(120)
    assert len(started) == 2, "a replica did not start"
    a, b = started[0], started[1]
    proxy.backends = [a.lines["listening"], b.lines["listening"]]
    yield proxy, a, b
    a.stop()
    b.stop()
    proxy.close()


def direct(srv: Served) -> str:
    """The replica's own listening address (``catalog:`` prints the public URL, the proxy's)."""
    return srv.lines["listening"]


@pytest.mark.slow
def test_replicas_share_tokens_revocations_and_audit(replicas: tuple[RoundRobin, Served, Served]) -> None:
    proxy, a, b = replicas
    assert a.uri == b.uri == proxy.url and a.lines["issuer"] == proxy.url + "/oidc"

    # a token minted by replica a (asked directly) is valid on replica b, and the other way round
    def token(srv: Served, who: str, secret: str) -> str:
        r = httpx.post(
            f"{direct(srv)}/oidc/token", data={"grant_type": "client_credentials"}, auth=(who, secret), timeout=30
        )
        assert r.status_code == 200, r.text
        return str(r.json()["access_token"])

    etl_a, ann_b = token(a, "etl", "etl-pw-9"), token(b, "ann", "ann-pw-9")
    ha, hb = {"Authorization": f"Bearer {etl_a}"}, {"Authorization": f"Bearer {ann_b}"}
    assert httpx.post(f"{direct(b)}{P}/namespaces", json={"namespace": ["rep"]}, headers=ha).status_code == 200
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    r = httpx.post(f"{direct(a)}{P}/namespaces/rep/tables", json={"name": "t", "schema": schema}, headers=ha)
    assert r.status_code == 200, r.text
    assert httpx.get(f"{direct(a)}{P}/namespaces/rep/tables/t", headers=hb).status_code == 403

    # grant on a, visible on b; revoke on b, honoured on a — each from the very next request on (the shared
    # grants version), far below one credential TTL; a's grants were cached just before the revoke
    grant = {"role": "readers", "privilege": "TABLE_READ_DATA", "on": "table rep.t"}
    assert httpx.post(f"{direct(a)}/management/v1/grants", json=grant, headers=ha).status_code in (200, 201)
    assert httpx.get(f"{direct(b)}{P}/namespaces/rep/tables/t", headers=hb).status_code == 200
    for _ in range(3):
        assert httpx.get(f"{direct(a)}{P}/namespaces/rep/tables/t", headers=hb).status_code == 200
    assert httpx.request("DELETE", f"{direct(b)}/management/v1/grants", json=grant, headers=ha).status_code == 204
    assert httpx.get(f"{direct(a)}{P}/namespaces/rep/tables/t", headers=hb).status_code == 403
    assert httpx.get(f"{direct(a)}{P}/namespaces/rep/tables/t/credentials", headers=hb).status_code == 403
    # one audit log: a denied load on each replica, both read back through the proxy (either replica answers)
    since = time.time() - 0.001
    for srv in (a, b):
        assert httpx.get(f"{direct(srv)}{P}/namespaces/rep/tables/t", headers=hb).status_code == 403
    for _ in range(2):  # round robin: ask both
        records = httpx.get(
            f"{proxy.url}/management/v1/audit",
            params={"principal": "ann", "since": str(since), "action": "load_table"},
            headers=ha,
            timeout=30,
        ).json()
        assert [r["decision"] for r in records].count("deny") == 2, records
    assert set(proxy.served) == {a.lines["listening"], b.lines["listening"]}
