"""DEFINER/INVOKER view chains in Spark: ``Session.sql`` / ``Session.table`` over chain-scoped catalogs.

One reference catalog on the S3 emulator (trusted engine: audience ``lakesession``), the seed's
principals, and the suite's shared JVM: each user gets a ``Session`` (own gateway, own catalog
name) on it. Every read of table data goes through credentials vended through the chain.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest

import lakesession
from lakesession._spark.errors import CatalogAccessError
from lakesession.catalog._chains import ViewChainError
from lakesession.errors import ConfigError
from tests.factories import make_catalog
from tests.support import create_view, policy, seed_chain_grants, view_body

pytestmark = [pytest.mark.slow, pytest.mark.spark]

POLICY = policy(
    users=["alice", "bob", "carol"],
    services={"admin": "r_admin"},
    grants=seed_chain_grants("sales")
    + """\
  - {role: r_admin, privilege: CATALOG_MANAGE_CONTENT, on: catalog}
  # DEFINER owned by bob over orders; alice may read the view only
  - {role: r_alice, privilege: VIEW_READ, on: view sales.v_orders}
  - {role: r_bob, privilege: TABLE_READ_DATA, on: table sales.orders}
  # INVOKER view over orders: alice has no grant on orders, so it fails for her
  - {role: r_alice, privilege: VIEW_READ, on: view sales.v_invoker}
  # the seed's INVOKER example: alice may read both the view and its table
  - {role: r_alice, privilege: VIEW_READ, on: view sales.v_public}
  - {role: r_alice, privilege: TABLE_READ_DATA, on: table sales.public}
  - {role: r_alice, privilege: VIEW_READ, on: namespace loops}
  - {role: r_alice, privilege: VIEW_READ, on: namespace deep}
""",
)


@pytest.fixture(scope="module")
def views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with make_catalog(
        POLICY,
        bucket="views-bucket",
        data_dir=tmp_path_factory.mktemp("views"),
        trusted_engines=[{"principal": ["alice", "bob", "carol", "admin"]}],
    ) as handle:
        admin = lakesession.connect(uri=handle.uri, token=handle.admin.token_for("admin"))
        cat = admin.catalog
        cat.create_namespace("sales")
        cat.create_namespace("loops")
        cat.create_namespace("deep")
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField

        schema = Schema(NestedField(1, "id", LongType(), required=False))
        for name, ids in (("t_chain", [1, 2, 3]), ("orders", [10, 20, 30, 40]), ("public", [7])):
            cat.create_table(f"sales.{name}", schema)
            admin.table(f"sales.{name}").append(pa.table({"id": pa.array(ids, pa.int64())}))
        bodies = [
            ("sales", view_body("v1", "SELECT * FROM v2", "bob")),
            ("sales", view_body("v2", "SELECT id FROM sales.v3 WHERE id > 1")),
            ("sales", view_body("v3", "WITH recent AS (SELECT id FROM t_chain) SELECT r.id FROM recent r", "carol")),
            ("sales", view_body("v_orders", "SELECT o.id FROM orders o WHERE o.id >= 20", "bob")),
            ("sales", view_body("v_invoker", "SELECT id FROM orders")),
            ("sales", view_body("v_public", "SELECT id FROM sales.public")),
            ("loops", view_body("a", "SELECT * FROM b", namespace="loops")),
            ("loops", view_body("b", "SELECT * FROM a", namespace="loops")),
        ]
        for i in range(11):  # deep.d0 -> deep.d1 -> ... -> deep.d10 -> sales.t_chain
            nxt = f"d{i + 1}" if i < 10 else "sales.t_chain"
            bodies.append(("deep", view_body(f"d{i}", f"SELECT * FROM {nxt}", namespace="deep")))
        for ns, body in bodies:
            create_view(handle, ns, body)
        admin.close()
        yield handle


@pytest.fixture(scope="module")
def alice(views: Any, lake: Any) -> Iterator[lakesession.Session]:
    """alice's session on the shared JVM (catalog ``as_alice``); the suite's default catalog is restored after."""
    spark = lake.spark()
    default = spark.conf.get("spark.sql.defaultCatalog")
    session = lakesession.connect(uri=views.uri, token=views.admin.token_for("alice"), catalog_name="as_alice")
    session.spark()
    spark.conf.set("spark.sql.defaultCatalog", default)
    yield session
    session.close()
    spark.conf.set("spark.sql.defaultCatalog", default)


def ids(df: Any) -> list[int]:
    return sorted(r["id"] for r in df.collect())


def chain_checks(views: Any, since: float, table: str) -> list[tuple[str, str, int, str]]:
    """(object, user checked, step, decision) of the last chain load of ``table``, as audited."""
    records = views.admin.audit(principal="alice", since=since)
    loads = [
        r
        for r in records
        if r.action == "load_table" and r.securable == f"table {table}" and (r.detail or {}).get("step")
    ]
    assert loads, f"no chain load of {table} audited"
    return [
        (r.securable, (r.detail or {}).get("user_in_effect"), (r.detail or {}).get("step"), r.decision)
        for r in records
        if r.request_id == loads[-1].request_id and (r.detail or {}).get("step")
    ]


def test_seed_invoker_view_checks_alice_twice(alice: lakesession.Session, views: Any) -> None:
    since = time.time()
    assert ids(alice.sql("SELECT * FROM sales.v_public")) == [7]
    assert chain_checks(views, since, "sales.public") == [
        ("view sales.v_public", "alice", 1, "allow"),
        ("table sales.public", "alice", 2, "allow"),
    ]


def test_definer_view_reads_in_spark_and_the_table_stays_out_of_reach(alice: lakesession.Session, views: Any) -> None:
    since = time.time()
    assert ids(alice.sql("SELECT * FROM as_alice.sales.v_orders")) == [20, 30, 40]
    assert ids(alice.sql("SELECT id FROM sales.v_orders WHERE id < 40")) == [20, 30]  # namespace-qualified
    assert ids(alice.view("sales.v_orders")) == [20, 30, 40]
    with pytest.raises(ConfigError, match=r"is a view, not a table: read it with session\.view"):
        alice.table("sales.v_orders")  # one return type: table() never turns into a DataFrame
    assert chain_checks(views, since, "sales.orders") == [
        ("view sales.v_orders", "alice", 1, "allow"),
        ("table sales.orders", "bob", 2, "allow"),
    ]
    # the same Spark session, directly: alice has no grant on orders
    with pytest.raises(CatalogAccessError, match="orders"):
        alice.spark().sql("SELECT * FROM as_alice.sales.orders").collect()
    with pytest.raises(CatalogAccessError, match="orders"):
        alice.sql("SELECT * FROM sales.orders").collect()
    # joining the view with the table directly fails as a whole
    with pytest.raises(CatalogAccessError, match="orders"):
        alice.sql("SELECT v.id FROM sales.v_orders v JOIN sales.orders o ON v.id = o.id").collect()
    # the chain catalog's name is not a way in either
    assert "sales.v_orders" in {r["chain"] for r in alice.accesses().to_dict("records")}
    with pytest.raises(ViewChainError, match="internal view-chain catalog"):
        alice.sql(f"SELECT * FROM {next(iter(alice._chain_catalogs))}.sales.orders")
    # the catalog delegated to bob for the table load and vended credentials as delegated
    loads = [
        r
        for r in views.admin.audit(principal="alice", since=since, action="load_table")
        if r.securable == "table sales.orders"
    ]
    assert any(r.decision == "allow" and (r.detail or {}).get("user_in_effect") == "bob" for r in loads), loads
    issued = [
        r
        for r in views.admin.audit(principal="alice", since=since)
        if r.decision == "issued" and r.securable == "table sales.orders" and (r.detail or {}).get("mode")
    ]
    assert issued and all((r.detail or {}).get("delegated") is True for r in issued)
    assert all((r.detail or {}).get("mode") == "read" for r in issued)


def test_plain_spark_sql_keeps_invoker_semantics(alice: lakesession.Session) -> None:
    # Spark resolving the DEFINER view itself loads the table as alice: denied
    with pytest.raises(CatalogAccessError):
        alice.spark().sql("SELECT * FROM as_alice.sales.v_orders").collect()
    # an INVOKER view over a table alice may not read fails through Session.sql too
    with pytest.raises(CatalogAccessError, match="orders"):
        alice.sql("SELECT * FROM sales.v_invoker").collect()


def test_seed_mixed_chain_through_spark(alice: lakesession.Session, views: Any) -> None:
    since = time.time()
    assert ids(alice.sql("SELECT * FROM sales.v1")) == [2, 3]
    # exactly the seed's checks, in one request: v1 as alice, v2 and v3 as bob, the table as carol
    assert chain_checks(views, since, "sales.t_chain") == [
        ("view sales.v1", "alice", 1, "allow"),
        ("view sales.v2", "bob", 2, "allow"),
        ("view sales.v3", "bob", 3, "allow"),
        ("table sales.t_chain", "carol", 4, "allow"),
    ]
    audit = alice.audit()
    assert "sales.v1 → sales.v2 → sales.v3" in set(audit["via_chain"])


def test_cycle_and_depth_end_in_clear_errors(alice: lakesession.Session) -> None:
    with pytest.raises(ViewChainError, match="cycle"):
        alice.sql("SELECT * FROM loops.a")
    with pytest.raises(ViewChainError, match="deeper than 10"):
        alice.sql("SELECT * FROM deep.d0")


def test_refresh_endpoint_keeps_the_chain(views: Any) -> None:
    """Credentials loaded through a DEFINER chain refresh through the same chain (alice alone: 403)."""
    headers = {
        "Authorization": f"Bearer {views.admin.token_for('alice')}",
        "X-Iceberg-Access-Delegation": "vended-credentials",
    }
    base = f"{views.uri}/v1/lakesession/namespaces/sales/tables/orders"
    r = httpx.get(base + "?referenced-by=sales%1Fv_orders", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    endpoint = r.json()["config"]["client.refresh-credentials-endpoint"]
    assert endpoint.endswith("/credentials?referenced-by=sales%1Fv_orders"), endpoint
    refreshed = httpx.get(f"{views.uri}/{endpoint}", headers=headers, timeout=30)
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["storage-credentials"][0]["config"]["s3.access-key-id"]
    assert httpx.get(base + "/credentials", headers=headers, timeout=30).status_code == 403


def test_chain_routes_are_narrow_and_read_only(alice: lakesession.Session) -> None:
    alice.sql("SELECT * FROM sales.v_orders")
    gw = alice.gateway
    route = gw.chains.register(((("sales",), "v_orders"),), "sales%1Fv_orders")
    auth = {"Authorization": f"Bearer {gw.secret}"}
    chain_base = f"{gw.uri}/chain/{route.id}/v1/lakesession/namespaces/sales"
    assert httpx.get(f"{chain_base}/tables/orders", headers=auth, timeout=30).status_code == 200
    denied = {
        "other table": httpx.get(f"{chain_base}/tables/t_chain", headers=auth, timeout=30),
        "listing": httpx.get(f"{chain_base}/tables", headers=auth, timeout=30),
        "commit": httpx.post(
            f"{chain_base}/tables/orders", headers=auth, json={"requirements": [], "updates": []}, timeout=30
        ),
        "drop": httpx.delete(f"{chain_base}/tables/orders", headers=auth, timeout=30),
        "unknown route": httpx.get(f"{gw.uri}/chain/0123456789abcdef/v1/config", headers=auth, timeout=30),
    }
    for what, r in denied.items():
        assert r.status_code == 403, (what, r.text)
        assert r.json()["error"]["type"] == "ForbiddenException"
    # the main route never forwards a chain: alice alone is checked
    direct = httpx.get(
        f"{gw.uri}/v1/lakesession/namespaces/sales/tables/orders?referenced-by=sales%1Fv_orders",
        headers=auth,
        timeout=30,
    )
    assert direct.status_code == 403


def test_remote_signing_through_a_chain(views: Any) -> None:
    """Remote signing keeps the chain: bob's read privilege signs alice's GETs, never her writes."""
    headers = {"Authorization": f"Bearer {views.admin.token_for('alice')}"}
    base = f"{views.uri}/v1/lakesession/namespaces/sales/tables/orders"
    r = httpx.get(
        base + "?referenced-by=sales%1Fv_orders",
        timeout=30,
        headers={**headers, "X-Iceberg-Access-Delegation": "remote-signing"},
    )
    assert r.status_code == 200, r.text
    config, metadata_location = r.json()["config"], r.json()["metadata-location"]
    endpoint = config["s3.signer.endpoint"]
    assert endpoint.endswith("/sign?referenced-by=sales%1Fv_orders"), endpoint
    bucket, _, key = metadata_location[len("s3://") :].partition("/")
    s3 = config["s3.endpoint"].rstrip("/")

    def sign(method: str, url: str, chain: bool = True) -> httpx.Response:
        target = f"{config['s3.signer.uri'].rstrip('/')}/{endpoint if chain else endpoint.split('?')[0]}"
        return httpx.post(
            target,
            headers=headers,
            timeout=30,
            json={
                "region": config.get("client.region", "us-east-1"),
                "method": method,
                "uri": url,
                "headers": {"Host": [s3.split("//")[1]]},
            },
        )

    assert sign("GET", f"{s3}/{bucket}/{key}").status_code == 200
    assert sign("GET", f"{s3}/{bucket}/{key}", chain=False).status_code == 403  # alice alone
    assert sign("PUT", f"{s3}/{bucket}/{key.rsplit('/', 1)[0]}/evil.parquet").status_code == 403  # read-only chain


def test_a_closed_sessions_leftover_active_spark_session_does_not_redirect_sql(
    alice: lakesession.Session, views: Any
) -> None:
    """pyspark's createDataFrame leaves its session active on the JVM thread for good; Spark resolves the
    current catalog through the active session's conf. Session.sql must still resolve as its own session,
    not through the other (closed) session's catalog and dead gateway (seen on Spark 3.5)."""
    other = lakesession.connect(uri=views.uri, token=views.admin.token_for("bob"), catalog_name="as_bob_gone")
    other.spark().createDataFrame([(1,)], "id BIGINT").collect()  # makes bob's session the thread's active one
    other.close()
    assert ids(alice.sql("SELECT * FROM sales.v_public")) == [7]
