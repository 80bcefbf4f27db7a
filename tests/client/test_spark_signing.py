"""Spark in remote-signing mode (issue 15, item 5): no storage credentials in the JVM, every S3 request
signed by the catalog as the session's user, through the gateway.

A second Session on the suite's embedded catalog (S3 emulator, which verifies SigV4) with
``access="remote-signing"``: its own SparkSession on the shared JVM, its own gateway.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

import lakesession
from lakesession.gateway._signer import is_credential_key
from tests.conftest import SPARK_TEST_CONF

pytestmark = [pytest.mark.slow, pytest.mark.spark]


@pytest.fixture(scope="module")
def signed(lake: Any) -> Iterator[Any]:
    emb = lake.embedded
    session = lakesession.connect(
        uri=emb.uri,
        credential=f"demo:{emb.demo_secret}",
        token_url=emb.token_endpoint,
        warehouse=lake.warehouse,
        access="remote-signing",
        catalog_name="lake",
        spark_conf=SPARK_TEST_CONF,
    )
    yield session
    session.close()


def io_properties(spark: Any, namespace: str, name: str) -> dict[str, str]:
    """The FileIO properties of the table as the JVM's Spark catalog loaded it (through py4j)."""
    jvm = spark._jvm
    levels = spark.sparkContext._gateway.new_array(jvm.java.lang.String, 1)
    levels[0] = namespace
    ident = jvm.org.apache.spark.sql.connector.catalog.Identifier.of(levels, name)
    catalog = spark._jsparkSession.sessionState().catalogManager().catalog("lake")
    io = catalog.loadTable(ident).table().io()
    return {str(k): str(v) for k, v in dict(io.properties()).items()}


def credential_entries(pairs: dict[str, str], secrets: list[str]) -> list[str]:
    """Keys that carry a storage credential, or whose value is one of ``secrets``."""
    return [k for k, v in pairs.items() if is_credential_key(k) or any(s and s in v for s in secrets)]


def test_spark_creates_writes_and_reads_with_remote_signing_and_no_storage_credentials(lake: Any, signed: Any) -> None:
    emb = lake.embedded
    since = time.time()
    spark = signed.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.signing")
    spark.sql("CREATE TABLE lake.signing.t (id BIGINT, name STRING) USING iceberg")
    spark.sql("INSERT INTO lake.signing.t VALUES (1, 'a'), (2, 'b'), (3, 'c')")
    spark.sql("DELETE FROM lake.signing.t WHERE id = 2")
    rows = [tuple(r) for r in spark.sql("SELECT id, name FROM lake.signing.t ORDER BY id").collect()]
    assert rows == [(1, "a"), (3, "c")]
    assert spark.sql("SELECT count(*) FROM lake.signing.t.snapshots").collect()[0][0] == 2
    spark.sql("CREATE TABLE lake.signing.ctas USING iceberg AS SELECT id * 10 AS id FROM lake.signing.t")  # staged
    assert sorted(r[0] for r in spark.sql("SELECT id FROM lake.signing.ctas").collect()) == [10, 30]

    # nothing in the JVM could reach storage by itself: not in its conf, not in the table's IO
    admin = lake.embedded.handle.s3_emulator.admin_credentials
    standing = [admin.access_key_id, admin.secret_access_key]
    context_conf = dict(spark.sparkContext.getConf().getAll())
    sql_conf = {r[0]: r[1] for r in spark.sql("SET").collect()}
    assert sql_conf["spark.sql.catalog.lake.header.X-Iceberg-Access-Delegation"] == "remote-signing"
    assert credential_entries(context_conf, standing) == []
    assert credential_entries(sql_conf, standing) == []
    props = io_properties(spark, "signing", "t")
    gw = signed.gateway
    assert props["s3.remote-signing-enabled"] == "true"
    assert props["s3.signer.endpoint"].startswith(f"{gw.uri}/sign/")
    assert props["signer.endpoint"] == props["s3.signer.endpoint"]  # the key Iceberg 1.12 reads
    assert credential_entries(props, standing) == [], props
    assert emb.uri not in " ".join(props.values())  # the JVM talks to the gateway only

    # the catalog signed as the session's user, and vended nothing for the table
    audit = lake.embedded.handle.admin.audit(since=since, securable="table signing.t")
    signs = [a for a in audit if a.action == "sign_request" and a.detail and "operation" in a.detail]
    assert signs and {a.principal for a in signs} == {"demo"} and {a.decision for a in signs} == {"allow"}
    assert {"PutObject", "GetObject"} <= {a.detail["operation"] for a in signs}
    assert [a for a in audit if a.detail and "expires_at" in a.detail] == []  # no credential was issued
    # every signing call went through this session's /sign/{id} route (Iceberg 1.10/1.11 read s3.signer.endpoint,
    # 1.12 signer.endpoint: the gateway sets both; its catalog routes refuse signer paths)
    logged = [r for r in signed.access_log.records(since) if r.action == "sign_request"]
    assert sum(r.count for r in logged) >= len(signs) > 0

    # pyiceberg on the same session signs too (the session's access is its default)
    assert signed.table("signing.t").scan().to_arrow().num_rows == 2


def test_the_sessions_signer_route_refuses_other_objects_and_strangers(lake: Any, signed: Any) -> None:
    """Any local process holding the gateway's secret (the JVM, or code beside it) asks the signer
    route for another table's object and a bucket policy; a stranger without the secret asks too."""
    spark = signed.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.signing")
    spark.sql("CREATE TABLE IF NOT EXISTS lake.signing.mine (id BIGINT) USING iceberg")
    spark.sql("CREATE TABLE IF NOT EXISTS lake.signing.other (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.signing.other VALUES (42)")
    endpoint = io_properties(spark, "signing", "mine")["s3.signer.endpoint"]
    other = signed.table("signing.other")
    data_file = next(iter(other.inspect.files().column("file_path").to_pylist()))
    emu = lake.embedded.handle.s3_emulator
    bucket, key = data_file.removeprefix("s3://").split("/", 1)
    gw = signed.gateway
    h = {"Authorization": f"Bearer {gw.secret}"}

    def ask(method: str, uri: str, headers: dict[str, str]) -> httpx.Response:
        body = {"region": emu.region, "uri": uri, "method": method, "headers": {}}
        return httpx.post(endpoint, json=body, headers=headers, timeout=30)

    stolen = ask("GET", f"{emu.endpoint}/{bucket}/{key}", h)
    policy = ask("PUT", f"{emu.endpoint}/{bucket}?policy", h)
    stranger = ask("GET", f"{emu.endpoint}/{bucket}/{key}", {})
    assert stolen.status_code == 403 and stolen.json()["error"]["type"] == "ForbiddenException", stolen.text
    assert policy.status_code == 403, policy.text
    assert stranger.status_code == 401, stranger.text
