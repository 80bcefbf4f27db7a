"""Two users in remote-signing mode on one JVM (issue 15): every signer call of each is hers, through her gateway.

Iceberg keeps its S3 signer's HTTP client and auth manager in static fields, one per JVM, and 1.12 reads the
signer's address from other properties than 1.10/1.11 did (``signer.uri``/``signer.endpoint``, else the
per-table ``rest.remote-signing.endpoint`` against the catalog ``uri``). Here alice and bob — each with a
``lakesession.connect(..., access="remote-signing")`` Session of her/his own, each Session a SparkSession on
the same SparkContext — write and read a table only she/he may touch. Ground truth is on both sides: the
catalog's audit (who asked to sign what) and each gateway's access log (which signer calls went through
its ``/sign/{id}`` route). A signer call that left through the gateway's main route, or through the other
user's gateway, shows as a mismatch between the two.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import lakesession
from lakesession.reference import ReferenceCatalog
from tests.conftest import SPARK_TEST_CONF
from tests.factories import Policy, make_catalog

pytestmark = [pytest.mark.slow, pytest.mark.spark]

POLICY = (
    Policy()
    .service("etl", role="eng")
    .user("alice", "alice-signing-123", role="r_alice")
    .user("bob", "bob-signing-123", role="r_bob")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("r_alice", "CATALOG_MANAGE_CONTENT", "namespace na")
    .grant("r_bob", "CATALOG_MANAGE_CONTENT", "namespace nb")
)
USERS = {"alice": "na", "bob": "nb"}


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, bucket="two-signers", data_dir=tmp_path_factory.mktemp("two-signers")) as handle:
        import httpx

        etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
        for ns in USERS.values():
            r = httpx.post(f"{handle.uri}/v1/lakesession/namespaces", json={"namespace": [ns]}, headers=etl, timeout=30)
            assert r.status_code == 200, r.text
        yield handle


@pytest.fixture(scope="module")
def sessions(catalog: ReferenceCatalog) -> Iterator[dict[str, lakesession.Session]]:
    out: dict[str, lakesession.Session] = {}
    try:
        for user in USERS:
            out[user] = lakesession.connect(
                uri=catalog.uri,
                credential=f"{user}:{user}-signing-123",
                token_url=f"{catalog.issuer_uri}/token",
                warehouse=catalog.warehouse,
                access="remote-signing",
                catalog_name=f"lake_{user}",
                master="local[2]",
                spark_conf=SPARK_TEST_CONF,
            )
        yield out
    finally:
        for s in out.values():
            s.close()


def _signs(catalog: ReferenceCatalog, since: float, table: str) -> list[Any]:
    audit = catalog.admin.audit(since=since, securable=f"table {table}", action="sign_request")
    return [a for a in audit if a.detail and "operation" in a.detail]


def _routed(session: lakesession.Session, since: float, table: str) -> int:
    """Signer calls for ``table`` this session's gateway forwarded through its ``/sign/{id}`` route."""
    return sum(
        r.count
        for r in session.access_log.records(since)
        if r.action == "sign_request" and r.object == f"table {table}"
    )


def test_two_users_signing_on_one_jvm_each_sign_as_themselves_through_their_own_gateway(
    catalog: ReferenceCatalog, sessions: dict[str, lakesession.Session]
) -> None:
    since = time.time()
    sparks = {user: s.spark() for user, s in sessions.items()}
    assert sparks["alice"] is not sparks["bob"] and sparks["alice"].sparkContext is sparks["bob"].sparkContext
    # interleaved: each user's work runs after the other's signer clients exist in the JVM
    for round_ in (1, 2):
        for user, ns in USERS.items():
            spark, t = sparks[user], f"lake_{user}.{ns}.t"
            if round_ == 1:
                spark.sql(f"CREATE TABLE {t} (id BIGINT, who STRING) USING iceberg")
            spark.sql(f"INSERT INTO {t} VALUES ({round_}, '{user}')")
    for user, ns in USERS.items():
        rows = [tuple(r) for r in sparks[user].sql(f"SELECT id, who FROM lake_{user}.{ns}.t ORDER BY id").collect()]
        assert rows == [(1, user), (2, user)]

    for user, ns in USERS.items():
        other = next(u for u in USERS if u != user)
        signs = _signs(catalog, since, f"{ns}.t")
        # the catalog signed this table's objects for its owner only, and every request was allowed
        assert signs and {a.principal for a in signs} == {user}, [(a.principal, a.decision) for a in signs]
        assert {a.decision for a in signs} == {"allow"}
        assert {"PutObject", "GetObject"} <= {a.detail["operation"] for a in signs}
        # every one of them went through this user's own gateway's signer route, none through the other's
        assert _routed(sessions[user], since, f"{ns}.t") >= len(signs) > 0
        assert _routed(sessions[other], since, f"{ns}.t") == 0
    # the other user's table: refused by the catalog (never signed as the wrong user)
    with pytest.raises(Exception, match=r"(?i)forbidden|not authorized"):
        sparks["bob"].sql("SELECT * FROM lake_bob.na.t").collect()
