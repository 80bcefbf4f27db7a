"""Fault: the issuer goes down while Spark commits (issue 17, item 6).

The catalog is ``lakesession serve`` in its own process; the session gets its tokens through an
:class:`~tests._outlet.Outlet` in front of the issuer's token endpoint, which the test switches off.
The gateway then cannot obtain a token: it must answer 503 + Retry-After, which Iceberg's HTTP client
retries (any method), never a 500. Iceberg Java (1.10 and 1.12, ``ErrorHandlers.CommitErrorHandler``)
turns a *final* 500, 502, 503 or 504 on a commit into ``CommitStateUnknownException`` although nothing
reached the catalog; only its HTTP-level retries of 503 (+ Retry-After) make the outage harmless, so the
gateway's Retry-After grows with the outage. Two shapes: the token expires during the write stage (the
load before the commit meets the outage), and the outage begins exactly as the commit arrives (the
commit itself is refused and retried). Either way the commit lands exactly once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests._outlet import Outlet
from tests._serve import Served
from tests.asgi_recorder import ResponseRecorder
from tests.conftest import SPARK_TEST_CONF

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.soak]

POLICY = """\
principals:
  - {name: etl, type: service, client_id: etl, client_secret: etl-fault-9}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
TOKEN_TTL = 8
OUTAGE_AFTER_EXPIRY = 10
COMMIT_OUTAGE = 6.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("issuer-fault")
    (base / "policy.yaml").write_text(POLICY)
    args = ["--port", "0", "--data-dir", str(base / "d"), "--bootstrap", str(base / "policy.yaml")]
    with Served([*args, "--token-ttl", str(TOKEN_TTL)]) as s:
        yield s


def test_issuer_down_during_a_spark_commit_is_retried_once_without_commit_state_unknown(served: Served) -> None:
    import httpx

    import lakesession

    issuer = httpx.URL(served.token_endpoint)
    outlet = Outlet((issuer.host, issuer.port or 80))
    recorder = ResponseRecorder()
    session = lakesession.connect(
        uri=served.uri,
        warehouse=served.lines["warehouse"],
        credential="etl:etl-fault-9",
        token_url=f"{outlet.url}{issuer.path}",
        catalog_name="lake_issuer",
        spark_conf=SPARK_TEST_CONF,
        gateway_options={"wrap_app": recorder.wrap},
    )
    try:
        sp = session.spark()
        sp.sql("CREATE NAMESPACE IF NOT EXISTS lake_issuer.f")
        sp.sql("CREATE TABLE lake_issuer.f.t (id BIGINT) USING iceberg")
        sp.sql("INSERT INTO lake_issuer.f.t VALUES (0)")
        session.identity.invalidate()
        session.identity.token()  # a fresh token: valid for TOKEN_TTL s from now
        expires = session.identity.expires_at
        assert expires is not None and expires - time.time() > TOKEN_TTL - 2
        outlet.down()
        # the write stage sleeps past the token's expiry: the load before it works, the commit after it cannot
        sleep_ms = int((expires - time.time() + 3) * 1000)
        failure: list[BaseException] = []

        def insert() -> None:
            try:
                sp.sql(
                    "INSERT INTO lake_issuer.f.t SELECT id FROM range(1, 4, 1, 1) "
                    "WHERE coalesce(length(CASE WHEN id = 1 THEN "
                    f"reflect('java.lang.Thread', 'sleep', CAST({sleep_ms} AS BIGINT)) END), 0) >= 0"
                )
            except BaseException as exc:
                failure.append(exc)

        writer = threading.Thread(target=insert)
        writer.start()
        # the issuer stays down until 10 s after the token expired: whatever the JVM sends after the write
        # stage (the refresh before the commit, the commit) meets the outage
        while time.time() < expires + OUTAGE_AFTER_EXPIRY and writer.is_alive():
            time.sleep(0.2)
        outlet.up()
        writer.join(120)
        assert not writer.is_alive(), "the commit did not finish within 2 minutes of the issuer's return"
        assert not failure, f"the commit failed: {failure[0]!r}"[:2000]
        after = session.access_log.records(since=expires)
        statuses = [(r.action, r.status) for r in after if r.object == "table f.t"]
        refused = [(h, b) for _, status, h, b in recorder.responses if status == 503]
        assert refused, f"nothing met the outage: {statuses}"
        assert all(status != 500 for _, status in statuses), statuses
        assert [s for a, s in statuses if a == "commit_table"][-1:] == [200], statuses
        for headers, body in refused:
            assert b"retry-after: " in headers and b"could not get the user's access token" in body, (headers, body)
        assert sorted(r[0] for r in sp.sql("SELECT id FROM lake_issuer.f.t").collect()) == [0, 1, 2, 3]
        snapshots = sp.sql("SELECT count(*) FROM lake_issuer.f.t.snapshots").collect()[0][0]
        assert snapshots == 2, f"{snapshots} snapshots: the commit was applied more than once"
        print(f"\nrequests through the issuer outage: {statuses}")
    finally:
        outlet.down()
        session.close()


def test_commit_request_meeting_an_issuer_outage_is_retried_by_iceberg_and_applied_once(served: Served) -> None:
    """The outage begins exactly as the commit POST arrives at the gateway (a seam in front of the
    gateway's app cuts the issuer and drops the cached token): the commit itself gets 503 +
    Retry-After, Iceberg's HTTP client retries it, and it lands once the issuer is back. (With the
    gateway's own keyed retry on — the default against a catalog honouring Idempotency-Key — the JVM
    sees one late 200 instead: ``tests/catalog/test_idempotency_faults.py``.)"""
    import httpx

    import lakesession

    issuer = httpx.URL(served.token_endpoint)
    outlet = Outlet((issuer.host, issuer.port or 80))
    recorder = ResponseRecorder()
    box: dict[str, Any] = {"armed": False}

    def cut_issuer_at_commit(app: Any) -> Any:
        async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if box["armed"] and scope["type"] == "http" and scope["method"] == "POST":
                if scope["path"].endswith("/f2/tables/t"):
                    box["armed"] = False
                    outlet.down()
                    box["session"].identity.invalidate()  # the next token needs the issuer
                    threading.Timer(COMMIT_OUTAGE, outlet.up).start()
            await app(scope, receive, send)

        return recorder.wrap(wrapped)

    session = lakesession.connect(
        uri=served.uri,
        warehouse=served.lines["warehouse"],
        credential="etl:etl-fault-9",
        token_url=f"{outlet.url}{issuer.path}",
        catalog_name="lake_issuer2",
        spark_conf=SPARK_TEST_CONF,
        gateway_options={"wrap_app": cut_issuer_at_commit},
    )
    box["session"] = session
    try:
        sp = session.spark()
        # the reference catalog honours Idempotency-Key, so the gateway would retry the keyed commit itself
        # through the outage (the JVM seeing one late 200); here Iceberg's own retry of the 503 is under test
        session.gateway._app.keyed_retry_window = 0.0
        sp.sql("CREATE NAMESPACE IF NOT EXISTS lake_issuer2.f2")
        sp.sql("CREATE TABLE lake_issuer2.f2.t (id BIGINT) USING iceberg")
        sp.sql("INSERT INTO lake_issuer2.f2.t VALUES (0)")
        started = time.time()
        box["armed"] = True
        sp.sql("INSERT INTO lake_issuer2.f2.t VALUES (1), (2), (3)")  # raises on CommitStateUnknownException
        assert not box["armed"], "the commit never reached the gateway"
        commits = [r.status for r in session.access_log.records(since=started) if r.action == "commit_table"]
        assert commits[-1] == 200 and set(commits[:-1]) == {503} and len(commits) >= 2, commits
        refused = [
            (h, b) for path, status, h, b in recorder.responses if status == 503 and path.endswith("/f2/tables/t")
        ]
        assert len(refused) == len(commits) - 1
        for headers, body in refused:
            assert b"retry-after: " in headers and b"nothing was sent to the catalog" in body, (headers, body)
        assert sorted(r[0] for r in sp.sql("SELECT id FROM lake_issuer2.f2.t").collect()) == [0, 1, 2, 3]
        assert sp.sql("SELECT count(*) FROM lake_issuer2.f2.t.snapshots").collect()[0][0] == 2
        print(f"\ncommit statuses through the issuer outage: {commits}")
    finally:
        outlet.down()
        session.close()
