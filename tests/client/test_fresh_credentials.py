"""Fresh credentials under a Spark query loop (issue 17, item 5 and the acceptance line): the short
version of ``benchmarks/fresh_credentials.py`` — 4 TTLs of 5 s on the suite's JVM.

The gateway goes upstream for credentials about once per TTL per table (≤ 1.2), the catalog hands
out credentials with ≥ 90 % of their lifetime left, and STS sees a bounded number of AssumeRole calls
per TTL whatever the JVM asks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Response

from benchmarks.fresh_credentials import run
from lakesession._wire.sockets import bind
from lakesession.gateway import Gateway
from lakesession.reference.serving import BackgroundServer
from tests.conftest import SPARK_TEST_CONF

TTL = 5
T = "/v1/p/namespaces/ns/tables/t"


def _vended(ttl: float) -> dict[str, object]:
    expires = str(int((time.time() + ttl) * 1000))
    config = {"s3.access-key-id": f"AK{time.time_ns()}", "s3.session-token-expires-at-ms": expires}
    return {"storage-credentials": [{"prefix": "s3://b/t/", "config": config}]}


@pytest.fixture()
def upstream() -> Iterator[tuple[str, dict[str, int]]]:
    """A spec-shaped catalog on loopback: loads vend 60 s credentials (or answer 403 once revoked)."""
    state = {"credentials": 0, "revoked": 0}
    app = FastAPI()

    @app.get(T)
    def load() -> Response:
        if state["revoked"]:
            return Response(
                json.dumps({"error": {"message": "revoked", "type": "ForbiddenException", "code": 403}}), 403
            )
        body = {"metadata-location": "s3://b/t/metadata/1.json", "metadata": {"format-version": 2}, "config": {}}
        return Response(json.dumps({**body, **_vended(60)}), media_type="application/json")

    @app.get(T + "/credentials")
    def creds() -> Response:
        state["credentials"] += 1
        if state["revoked"]:
            return Response(
                json.dumps({"error": {"message": "revoked", "type": "ForbiddenException", "code": 403}}), 403
            )
        return Response(json.dumps(_vended(60)), media_type="application/json")

    server = BackgroundServer(app, bind("127.0.0.1", 0), "fresh-upstream")
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}", state
    finally:
        server.stop()


def test_table_loads_feed_the_refresh_cache_and_a_refused_load_evicts_it(upstream: tuple[str, dict[str, int]]) -> None:
    """A query loop loads the table on every query: those fresh credentials serve the JVM's refreshes,
    so the catalog's /credentials is not called at all; a 403 on a load drops them at once."""
    uri, state = upstream
    delegation = {"X-Iceberg-Access-Delegation": "vended-credentials"}
    with Gateway(uri, lambda: "user-token") as g, httpx.Client(base_url=g.uri, timeout=10) as c:
        c.headers.update({"Authorization": f"Bearer {g.secret}", **delegation})
        bare = {"Authorization": f"Bearer {g.secret}"}  # Iceberg Java's credential refresher sends no delegation
        plain = httpx.Client(base_url=g.uri, headers=bare, timeout=10)
        for _ in range(3):
            loaded = c.get(T)
            assert loaded.status_code == 200
            served = [client.get(T + "/credentials") for client in (c, plain) for _ in range(10)]
            assert all(r.status_code == 200 for r in served)
            # the JVM gets exactly what the load brought
            assert {json.dumps(r.json()["storage-credentials"]) for r in served} == {
                json.dumps(loaded.json()["storage-credentials"])
            }
        assert state["credentials"] == 0
        other = c.get(T + "/credentials", headers={"X-Iceberg-Access-Delegation": "remote-signing"})
        assert other.status_code == 200 and state["credentials"] == 1  # another delegation: its own entry
        state["revoked"] = 1
        assert c.get(T).status_code == 403
        refused = c.get(T + "/credentials")
        assert refused.status_code == 403 and state["credentials"] == 2  # not served from the cache any more
        refused = plain.get(T + "/credentials")
        assert refused.status_code == 403 and state["credentials"] == 3
        plain.close()


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.soak
def test_query_loop_over_four_ttls_refreshes_about_once_per_ttl_with_fresh_credentials(
    lake: Any, tmp_path: Path
) -> None:
    import lakesession

    lake.spark()  # the suite's JVM; this session gets its own SparkSession on it
    s = lakesession.connect(
        data_dir=tmp_path, credential_ttl=TTL, catalog_name="lake_fresh", spark_conf=SPARK_TEST_CONF
    )
    try:
        figures = run(s, TTL, 4, 1, "lake_fresh")
        print("\n" + figures.report())
        # the loop runs >= 4 TTLs however slow the machine (a loaded one may finish only a few queries)
        assert figures.elapsed >= 4 * TTL and figures.queries >= 1 and figures.jvm_loads >= figures.queries
        assert figures.refreshes_per_ttl_per_table <= 1.2, figures.report()
        assert figures.left_at_handout and min(figures.left_at_handout) >= 0.85, figures.report()
        # at most one AssumeRole per tenth of a TTL (credentials are reused while >= 90 % remains), plus the first
        assert figures.sts_calls <= 10 * figures.elapsed / TTL + 2, figures.report()
        failed = [r for r in s.access_log.records(since=figures.started) if r.status != 200]
        assert not failed, failed
    finally:
        s.close()
