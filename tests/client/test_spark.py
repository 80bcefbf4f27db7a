"""Spark through gateway → reference catalog: DDL, DML, views, cross-engine visibility, secrets, errors.

All tests share one SparkSession (the ``lake`` fixture).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def spark(lake):  # type: ignore[no-untyped-def]
    s = lake.spark()
    s.sql("CREATE NAMESPACE IF NOT EXISTS lake.suite")
    return s


def rows(df) -> list[tuple]:  # type: ignore[no-untyped-def,type-arg]
    return [tuple(r) for r in df.collect()]


def test_ddl_and_dml_round_trip(spark) -> None:  # type: ignore[no-untyped-def]
    spark.sql("CREATE TABLE lake.suite.orders (id BIGINT, customer STRING, amount DOUBLE) USING iceberg")
    spark.sql("INSERT INTO lake.suite.orders VALUES (1, 'ann', 10.0), (2, 'ben', 20.0), (3, NULL, 30.0)")
    spark.sql("UPDATE lake.suite.orders SET amount = amount + 1 WHERE id = 1")
    spark.sql("DELETE FROM lake.suite.orders WHERE id = 2")
    spark.sql("CREATE TABLE lake.suite.updates (id BIGINT, customer STRING, amount DOUBLE) USING iceberg")
    spark.sql("INSERT INTO lake.suite.updates VALUES (3, 'cid', 33.0), (4, 'dee', 40.0)")
    spark.sql("""
        MERGE INTO lake.suite.orders t USING lake.suite.updates s ON t.id = s.id
        WHEN MATCHED THEN UPDATE SET t.customer = s.customer, t.amount = s.amount
        WHEN NOT MATCHED THEN INSERT *
    """)
    assert rows(spark.sql("SELECT id, customer, amount FROM lake.suite.orders ORDER BY id")) == [
        (1, "ann", 11.0),
        (3, "cid", 33.0),
        (4, "dee", 40.0),
    ]
    spark.sql(
        "CREATE TABLE lake.suite.big AS SELECT id, amount * 2 AS doubled FROM lake.suite.orders WHERE amount > 20"
    )
    assert rows(spark.sql("SELECT id, doubled FROM lake.suite.big ORDER BY id")) == [(3, 66.0), (4, 80.0)]
    spark.sql("ALTER TABLE lake.suite.orders ADD COLUMN note STRING")
    spark.sql("ALTER TABLE lake.suite.orders SET TBLPROPERTIES ('team' = 'suite')")
    spark.sql("INSERT INTO lake.suite.orders VALUES (5, 'eve', 50.0, 'new')")
    assert rows(spark.sql("SELECT note FROM lake.suite.orders WHERE id = 5")) == [("new",)]
    props = dict(rows(spark.sql("SHOW TBLPROPERTIES lake.suite.orders")))
    assert props["team"] == "suite"
    spark.sql("CREATE VIEW lake.suite.rich AS SELECT id, customer FROM lake.suite.orders WHERE amount >= 33")
    assert rows(spark.sql("SELECT * FROM lake.suite.rich ORDER BY id")) == [(3, "cid"), (4, "dee"), (5, "eve")]
    spark.sql("DROP VIEW lake.suite.rich")
    spark.sql("DROP TABLE lake.suite.big")
    spark.sql("DROP TABLE lake.suite.updates")
    tables = {r.tableName for r in spark.sql("SHOW TABLES IN lake.suite").collect()}
    assert "big" not in tables and "updates" not in tables and "orders" in tables


def test_none_survives_to_pandas(spark) -> None:  # type: ignore[no-untyped-def]
    spark.sql("CREATE TABLE lake.suite.nulls (s STRING) USING iceberg")
    spark.sql("INSERT INTO lake.suite.nulls VALUES ('a'), (NULL)")
    import pandas as pd

    values = spark.sql("SELECT s FROM lake.suite.nulls ORDER BY s NULLS FIRST").toPandas()["s"].tolist()
    # missing, not the string 'NaN' (what pandas 3 + pyspark 3.5 produce without Arrow)
    assert pd.isna(values[0]) and values[0] != "NaN" and values[1] == "a"


def test_spark_sees_pyiceberg_commits_without_restart(lake, spark) -> None:  # type: ignore[no-untyped-def]
    spark.sql("CREATE TABLE lake.suite.shared (id BIGINT, who STRING) USING iceberg")
    spark.sql("INSERT INTO lake.suite.shared VALUES (1, 'spark')")
    assert spark.sql("SELECT count(*) FROM lake.suite.shared").collect()[0][0] == 1
    table = lake.table("suite.shared")
    table.append(pa.table({"id": pa.array([2], pa.int64()), "who": ["pyiceberg"]}))
    assert rows(spark.sql("SELECT id, who FROM lake.suite.shared ORDER BY id")) == [(1, "spark"), (2, "pyiceberg")]


def test_jvm_never_receives_the_user_token(lake, spark) -> None:  # type: ignore[no-untyped-def]
    token = lake.identity.token()
    conf = dict(spark.sparkContext.getConf().getAll())
    conf.update({k: v for k, v in spark.conf.getAll.items()} if hasattr(spark.conf, "getAll") else {})
    # the catalog is registered as runtime SQL conf once the gateway is up: every SQL conf set, and the two keys
    conf.update({r[0]: r[1] for r in spark.sql("SET").collect()})
    conf.update({k: spark.conf.get(k) for k in ("spark.sql.catalog.lake.uri", "spark.sql.catalog.lake.token")})
    assert not [k for k, v in conf.items() if token in str(v)]
    jvm = spark.sparkContext._jvm
    props = jvm.java.lang.System.getProperties().toString()
    env = jvm.java.lang.System.getenv().toString()
    assert token not in props and token not in env
    assert conf["spark.sql.catalog.lake.uri"] == lake.gateway.uri
    assert conf["spark.sql.catalog.lake.token"] == lake.gateway.secret != token
    # no response the gateway handed the JVM carried the token
    responses = lake.gateway_recorder.responses
    assert len(responses) > 10 and any(b"metadata-location" in body for _, _, _, body in responses)
    assert lake.gateway_recorder.containing(token) == []


def test_access_log_records_loads_and_commits(lake, spark) -> None:  # type: ignore[no-untyped-def]
    spark.sql("CREATE TABLE lake.suite.logged (x INT) USING iceberg")
    spark.sql("INSERT INTO lake.suite.logged VALUES (1)")
    spark.sql("SELECT * FROM lake.suite.logged").collect()
    acts = {(r.action, r.object) for r in lake.access_log.records()}
    assert ("create_table", "table suite.logged") in acts
    assert ("commit_table", "table suite.logged") in acts
    assert ("load_table", "table suite.logged") in acts
    df = lake.accesses()
    assert {"time", "action", "object", "status"} <= set(df.columns)


def test_revoked_grant_is_a_clean_spark_error(catalog, lake, spark) -> None:  # type: ignore[no-untyped-def]
    """alice reads through her own catalog in the same SparkSession; after revocation: one clean line."""
    import time

    import lakesession
    from lakesession._spark.errors import CatalogAccessError
    from tests.conftest import SECRETS, SPARK_TEST_CONF, rest_catalog

    etl = rest_catalog(catalog, "etl")
    if ("vault",) not in etl.list_namespaces():
        etl.create_namespace("vault")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    t = etl.create_table(("vault", "secrets"), Schema(NestedField(1, "x", LongType(), required=False)))
    t.append(pa.table({"x": pa.array([42], pa.int64())}))
    catalog.admin.create_role("vault_readers", ["alice"])
    catalog.admin.grant("vault_readers", "TABLE_READ_DATA", "table vault.secrets")
    alice = lakesession.connect(
        uri=catalog.uri,
        credential=f"alice:{SECRETS['alice']}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
        catalog_name="lake_alice",
        spark_conf=SPARK_TEST_CONF,
    )
    try:
        s = alice.spark()
        assert s is not spark and s.sparkContext is spark.sparkContext  # her own SparkSession on the shared JVM
        assert rows(s.sql("SELECT x FROM lake_alice.vault.secrets")) == [(42,)]
        catalog.admin.revoke("vault_readers", "TABLE_READ_DATA", "table vault.secrets")
        started = time.monotonic()
        with pytest.raises(CatalogAccessError) as err:
            s.sql("SELECT x FROM lake_alice.vault.secrets").collect()
        assert time.monotonic() - started < 30
        message = str(err.value)
        assert "not authorized" in message and "table vault.secrets" in message
        assert "\tat " not in message and "JVM stacktrace" not in message and len(message.splitlines()) == 1
        assert err.value.kind == "forbidden"
        denied = catalog.admin.audit(principal="alice", securable="table vault.secrets", action="load_table")
        assert denied[-1].decision == "deny"
    finally:
        alice.close()  # stops alice's gateway; the shared SparkSession was not hers to stop
    assert spark.sql("SELECT 1").collect()[0][0] == 1


@pytest.mark.soak
def test_read_loop_outlives_three_ttls_with_coalesced_refreshes(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """TTL 8 s: Iceberg's S3FileIO asks the gateway for credentials on nearly every request; the
    gateway answers from its cache and goes upstream about once per TTL."""
    import time

    import lakesession
    from tests.conftest import SPARK_TEST_CONF

    ttl = 8
    s = lakesession.connect(data_dir=tmp_path, credential_ttl=ttl, catalog_name="lake_ttl", spark_conf=SPARK_TEST_CONF)
    try:
        sp = s.spark()
        assert sp is not spark and sp.sparkContext is spark.sparkContext  # its own SparkSession, shared JVM
        sp.sql("CREATE NAMESPACE IF NOT EXISTS lake_ttl.loop")
        sp.sql("CREATE TABLE lake_ttl.loop.events (id BIGINT, kind STRING) USING iceberg")
        sp.sql("INSERT INTO lake_ttl.loop.events SELECT id, CAST(id % 7 AS STRING) FROM range(0, 5000)")
        started = time.time()
        runs = 0
        while time.time() - started < 3 * ttl + 2:
            assert sp.sql("SELECT count(*), count(DISTINCT kind) FROM lake_ttl.loop.events").collect()[0][0] == 5000
            runs += 1
        elapsed = time.time() - started
        refreshes = [r for r in s.access_log.records(since=started) if r.action == "refresh_credentials"]
        upstream = [r for r in refreshes if r.via == "upstream"]
        print(
            f"\n{runs} queries in {elapsed:.0f}s: {len(refreshes)} credential refreshes asked, {len(upstream)} went upstream"
        )
        assert runs >= 3 and refreshes, "the JVM refreshed through the gateway"
        assert all(r.status == 200 for r in refreshes)
        assert len(upstream) <= (elapsed / ttl) * 1.5 + 2, (len(upstream), len(refreshes), elapsed)
        issued = s.embedded.handle.admin.audit(
            action="refresh_credentials", securable="table loop.events", since=started
        )
        assert len(issued) == len(upstream)  # the catalog saw exactly the gateway's upstream calls
        location = s.table("loop.events").location()
        assert location.startswith("s3://")
        creds = s.credentials()
        spark_row = creds[(creds["engine"] == "spark") & (creds["table"] == "loop.events")].iloc[0]
        assert spark_row["state"] in ("valid", "expired") and spark_row["refreshes"] >= len(refreshes)
        python_row = creds[(creds["engine"] == "python") & (creds["table"] == "loop.events")].iloc[0]
        assert python_row["state"] == "valid" and python_row["prefix"].startswith("s3://")
    finally:
        s.close()


@pytest.mark.soak
def test_ten_second_tokens_refresh_ahead_while_spark_runs_for_three_of_them(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No 401 ever reaches Spark: the identity layer renews the 10 s token ahead of expiry (35 s: three and a
    half lifetimes, each crossed mid-loop; it ran a minute until the CI budget asked for the time back)."""
    import time

    import lakesession
    from tests.conftest import SPARK_TEST_CONF

    s = lakesession.connect(
        data_dir=tmp_path, access_token_ttl=10, catalog_name="lake_short", spark_conf=SPARK_TEST_CONF
    )
    try:
        sp = s.spark()
        sp.sql("CREATE NAMESPACE IF NOT EXISTS lake_short.t")
        sp.sql("CREATE TABLE lake_short.t.ticks (n BIGINT) USING iceberg")
        tokens, started, n = set(), time.time(), 0
        while time.time() - started < 35:
            n += 1
            sp.sql(f"INSERT INTO lake_short.t.ticks VALUES ({n})")
            assert sp.sql("SELECT count(*) FROM lake_short.t.ticks").collect()[0][0] == n
            tokens.add(s.identity.token())
        records = s.access_log.records(since=started)
        assert records and all(r.status != 401 for r in records)
        assert len(tokens) >= 3, f"only {len(tokens)} distinct tokens in 35 s of 10 s tokens"
    finally:
        s.close()


def test_metadata_tables_and_nested_namespaces_through_the_gateway(lake, spark) -> None:  # type: ignore[no-untyped-def]
    """Iceberg probes namespace ``ns%1Ft`` before a metadata table and joins nested namespaces with
    ``%1F``: the gateway forwards the raw path (it answered 500, and Spark failed after ~30 s of retries)."""
    import time

    started = time.monotonic()
    spark.sql("CREATE TABLE lake.suite.gwmeta (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.suite.gwmeta VALUES (1), (2)")
    spark.sql("INSERT INTO lake.suite.gwmeta VALUES (3)")
    snaps = spark.sql("SELECT snapshot_id, operation FROM lake.suite.gwmeta.snapshots").collect()
    assert len(snaps) == 2 and {r.operation for r in snaps} == {"append"}
    history = spark.sql("SELECT snapshot_id, is_current_ancestor FROM lake.suite.gwmeta.history").collect()
    assert {r.snapshot_id for r in history} == {r.snapshot_id for r in snaps}
    assert all(r.is_current_ancestor for r in history)
    files = spark.sql("SELECT file_path, record_count FROM lake.suite.gwmeta.files").collect()
    assert len(files) >= 2 and sum(r.record_count for r in files) == 3
    # a two-level namespace: lake.gwnest.inner.t
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.gwnest")
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.gwnest.inner")
    spark.sql("CREATE TABLE lake.gwnest.inner.t (id BIGINT, s STRING) USING iceberg")
    spark.sql("INSERT INTO lake.gwnest.inner.t VALUES (1, 'a'), (2, 'b')")
    assert rows(spark.sql("SELECT id, s FROM lake.gwnest.inner.t ORDER BY id")) == [(1, "a"), (2, "b")]
    assert len(spark.sql("SELECT * FROM lake.gwnest.inner.t.snapshots").collect()) == 1
    assert [r.tableName for r in spark.sql("SHOW TABLES IN lake.gwnest.inner").collect()] == ["t"]
    assert ["inner" in r[0] for r in spark.sql("SHOW NAMESPACES IN lake.gwnest").collect()] == [True]
    assert time.monotonic() - started < 60, "no retry loops on 5xx"
    records = lake.access_log.records()
    assert ("load_table", "table gwnest.inner.t", 200) in {(r.action, r.object, r.status) for r in records}
    assert ("commit_table", "table gwnest.inner.t", 200) in {(r.action, r.object, r.status) for r in records}
    assert not [r for r in records if r.status >= 500]


def test_first_query_loads_the_default_catalog_as_lakesession_assumes(spark) -> None:  # type: ignore[no-untyped-def]
    """``lakesession.spark()`` starts an embedded catalog alongside the JVM only where Spark's first
    query (``SELECT 1``) already loads the default catalog (``_sparkbind.first_query_loads_catalog``):
    checked here on the running Spark, against a catalog on loopback that records what it is asked."""
    import json
    import threading

    import pyspark

    from lakesession._sparkbind import first_query_loads_catalog
    from lakesession._wire.sockets import bind
    from lakesession.reference.serving import BackgroundServer

    asked: list[str] = []
    lock = threading.Lock()

    async def catalog(scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        if scope["type"] != "http":
            return
        with lock:
            asked.append(scope["path"])
        status, body = (200, {"defaults": {}, "overrides": {}}) if scope["path"] == "/v1/config" else (404, {})
        payload = json.dumps(body).encode()
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": payload})

    sock = bind("127.0.0.1", 0)
    server = BackgroundServer(catalog, sock, "probe-catalog")
    server.start()
    try:
        probe = spark.newSession()
        prefix = "spark.sql.catalog.probe"
        for key, value in {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "rest",
            f"{prefix}.uri": f"http://127.0.0.1:{server.port}",
            "spark.sql.defaultCatalog": "probe",
        }.items():
            probe.conf.set(key, value)
        assert probe.sql("SELECT 1").collect()[0][0] == 1
        with lock:
            loaded = "/v1/config" in asked
        assert loaded == first_query_loads_catalog(pyspark.__version__), (pyspark.__version__, asked)
    finally:
        server.stop()


def test_the_catalog_warm_up_parses_a_table_metadata_this_iceberg_accepts(spark) -> None:  # type: ignore[no-untyped-def]
    """The ``catalog`` warm-up's table-metadata parse (``_sparkbind.warm_table_classes``) logs its failures only at
    DEBUG: an Iceberg that stopped accepting its document would silently warm nothing. Checked on the running JVM."""
    from lakesession._sparkbind import warm_table_classes

    assert warm_table_classes(spark._jvm) == "s3://lakesession-warm-up/t"
