"""Fault: the catalog goes away for 10 s in the middle of a Spark query loop (issue 17, item 6).

The catalog is ``lakesession serve`` in its own process, reached by the session's gateway through an
:class:`~tests._outlet.Outlet` the test switches off (connection refused). The gateway answers the JVM
503 + Retry-After (growing with the outage) and Iceberg's HTTP client retries: no query fails, and
the same session commits again once the catalog is back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from tests._outlet import Outlet
from tests._serve import Served
from tests.asgi_recorder import ResponseRecorder
from tests.conftest import SPARK_TEST_CONF

pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.soak]

POLICY = """\
principals:
  - {name: etl, type: service, client_id: etl, client_secret: etl-cat-fault-4}
roles:
  - {name: eng, members: [etl]}
grants:
  - {role: eng, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
"""
OUTAGE = 10.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("catalog-fault")
    (base / "policy.yaml").write_text(POLICY)
    with Served(["--port", "0", "--data-dir", str(base / "d"), "--bootstrap", str(base / "policy.yaml")]) as s:
        yield s


def test_catalog_down_ten_seconds_mid_query_loop_costs_no_query(served: Served) -> None:
    import lakesession

    catalog = httpx.URL(served.uri)
    outlet = Outlet((catalog.host, catalog.port or 80))
    recorder = ResponseRecorder()
    session = lakesession.connect(
        uri=outlet.url,
        warehouse=served.lines["warehouse"],
        credential="etl:etl-cat-fault-4",
        token_url=served.token_endpoint,
        catalog_name="lake_catdown",
        spark_conf=SPARK_TEST_CONF,
        gateway_options={"wrap_app": recorder.wrap},
    )
    try:
        sp = session.spark()
        sp.sql("CREATE NAMESPACE IF NOT EXISTS lake_catdown.c")
        sp.sql("CREATE TABLE lake_catdown.c.t (id BIGINT) USING iceberg")
        sp.sql("INSERT INTO lake_catdown.c.t SELECT id FROM range(0, 100)")
        assert sp.sql("SELECT count(*) FROM lake_catdown.c.t").collect()[0][0] == 100
        outlet.down()
        threading.Timer(OUTAGE, outlet.up).start()
        down_at = time.monotonic()
        queries = 0
        while time.monotonic() - down_at < OUTAGE + 2:  # the first query meets the outage and outlasts it
            assert sp.sql("SELECT count(*) FROM lake_catdown.c.t").collect()[0][0] == 100
            queries += 1
        refused = [(h, b) for _, status, h, b in recorder.responses if status == 503]
        assert refused, "no request met the outage"
        for headers, body in refused:
            assert b"retry-after: " in headers and b"unreachable" in body, (headers, body)
        assert not [r for _, r, _, _ in recorder.responses if r == 500]
        sp.sql("INSERT INTO lake_catdown.c.t VALUES (100)")  # the same session commits after the outage
        assert sp.sql("SELECT count(*) FROM lake_catdown.c.t").collect()[0][0] == 101
        print(f"\n{queries} queries through a {OUTAGE:.0f} s catalog outage, {len(refused)} answers 503, none failed")
    finally:
        outlet.down()
        session.close()
