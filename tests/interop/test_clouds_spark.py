"""Spark on ADLS (Azurite) and GCS (fake-gcs-server) warehouses, through the gateway, across credential
lifetimes: Iceberg Java's ``ADLSFileIO`` and ``GCSFileIO`` refresh their SAS / OAuth token through the
gateway (``adls.refresh-credentials-endpoint``, ``gcs.oauth2.refresh-credentials-endpoint``), which
re-authorizes upstream, caches per table, and never hands out a nearly expired credential.

One SparkContext for both clouds (and the suite's): each catalog is a ``newSession()`` of it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import lakesession
from lakesession.reference.cloudvending import AdlsSettings
from lakesession.reference.gcsvending import GcsSettings, LocalTokenSource
from tests._azurite import azurite
from tests._fakegcs import fake_gcs
from tests.conftest import SPARK_TEST_CONF
from tests.factories import make_catalog, shop_policy

# own_jvm: the suite's shared JVM may have started without the cloud bundles (they load only when asked
# for): this module's one JVM starts with both
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.soak, pytest.mark.own_jvm]


TTL = 25  # SAS / token lifetime: each test runs Spark queries across more than two of them
POLICY = shop_policy("xyz", reads="namespace sp")


def _session(handle: Any, who: str, name: str) -> lakesession.Session:
    return lakesession.connect(
        uri=handle.uri,
        credential=f"{who}:{who}-secret-xyz",
        token_url=f"{handle.issuer_uri}/token",
        scope="catalog",
        catalog_name=name,
        spark_conf=SPARK_TEST_CONF,
        clouds="all",  # the warehouse is set on the server (unknown before Spark starts); one JVM serves both clouds
    )


@pytest.fixture(scope="module")
def adls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    with azurite(tmp_path_factory.mktemp("azurite")) as az:
        az.create_container("lake")
        with make_catalog(
            POLICY,
            warehouse=f"abfss://lake@{az.host}/wh",
            adls=AdlsSettings(
                az.account, az.account_key, endpoint=az.endpoint, sas_scope="container", credential_ttl=TTL
            ),
            data_dir=tmp_path_factory.mktemp("adls-spark"),
        ) as handle:
            yield handle, az


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, LocalTokenSource]]:
    with fake_gcs(tmp_path_factory.mktemp("fakegcs")) as fg:
        fg.create_bucket("lake")
        source = LocalTokenSource()
        with make_catalog(
            POLICY,
            warehouse="gs://lake/wh",
            gcs=GcsSettings(project_id="test", endpoint=fg.url, token_source=source, credential_ttl=TTL),
            data_dir=tmp_path_factory.mktemp("gcs-spark"),
        ) as handle:
            yield handle, fg, source


def _crud_across_lifetimes(session: lakesession.Session, handle: Any, cat: str) -> dict[str, Any]:
    """CREATE / INSERT / DELETE / SELECT / a metadata table, then reads and writes for 2+ lifetimes."""
    spark = session.spark()
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {cat}.sp")
    spark.sql(f"CREATE TABLE {cat}.sp.orders (id BIGINT, item STRING) USING iceberg")
    spark.sql(f"INSERT INTO {cat}.sp.orders VALUES (1, 'apple'), (2, 'pear'), (3, 'fig')")
    spark.sql(f"DELETE FROM {cat}.sp.orders WHERE id = 2")
    rows = [tuple(r) for r in spark.sql(f"SELECT id, item FROM {cat}.sp.orders ORDER BY id").collect()]
    assert rows == [(1, "apple"), (3, "fig")]
    ops = [
        r.operation
        for r in spark.sql(f"SELECT operation FROM {cat}.sp.orders.snapshots ORDER BY committed_at").collect()
    ]
    assert ops == ["append", "overwrite"]
    vendor = handle.services.vendor
    issued_before, started, n = vendor.issued, time.time(), 3
    while time.time() - started < 2.3 * TTL:  # the JVM keeps its FileIO: it must refresh to go on
        n += 1
        spark.sql(f"INSERT INTO {cat}.sp.orders VALUES ({n}, 'more')")
        assert spark.sql(f"SELECT count(*) AS c FROM {cat}.sp.orders").collect()[0].c == n - 1
        time.sleep(2)
    asked = [r for r in session.gateway.access_log.records(since=started) if r.action == "refresh_credentials"]
    assert all(r.status == 200 for r in asked), asked
    assert all(r.credentials_expire_at and r.credentials_expire_at > r.time for r in asked)  # never an expired one
    expiries = {round(r.credentials_expire_at or 0) for r in asked}
    # the JVM's FileIO asked the gateway again and again, and got new credentials across the lifetimes
    # (the gateway answered from its per-table cache, fed by the queries' table loads, or upstream when due)
    return {
        "jvm_refreshes": sum(r.count for r in asked),
        "distinct": len(expiries),
        "minted": vendor.issued - issued_before,
        "rows": n - 1,
    }


def test_spark_crud_metadata_and_pyiceberg_on_adls_across_sas_lifetimes(adls: tuple[Any, Any]) -> None:
    handle, az = adls
    session = _session(handle, "etl", "adls")
    try:
        out = _crud_across_lifetimes(session, handle, "adls")
        assert out["jvm_refreshes"] >= 2 and out["distinct"] >= 2 and out["minted"] >= 2, out
        files = session.spark().sql("SELECT file_path FROM adls.sp.orders.files").collect()
        assert files and all(r.file_path.startswith(f"abfss://lake@{az.host}/wh/sp/orders/") for r in files)
        assert any(b.startswith("wh/sp/orders/data/") for b in az.blobs("lake", "wh/sp/orders/"))
        # the same table from pyiceberg (session.table), as the same identity, and a write from it
        table = session.table("sp.orders")
        assert table.scan().to_arrow().num_rows == out["rows"]
        table.append(pa.table({"id": pa.array([100], pa.int64()), "item": ["py"]}))
        spark = session.spark()
        assert spark.sql("SELECT count(*) AS c FROM adls.sp.orders").collect()[0].c == out["rows"] + 1
        creds = session.credentials()
        assert set(creds[creds["table"] == "sp.orders"]["state"]) == {"valid"}
    finally:
        session.close()


def test_spark_crud_metadata_and_pyiceberg_on_gcs_across_token_lifetimes(
    gcs: tuple[Any, Any, LocalTokenSource],
) -> None:
    handle, fg, source = gcs
    session = _session(handle, "etl", "gcs")
    try:
        minted_before = len(source.minted)
        out = _crud_across_lifetimes(session, handle, "gcs")
        assert out["jvm_refreshes"] >= 2 and out["distinct"] >= 2 and out["minted"] >= 2, out
        files = session.spark().sql("SELECT file_path FROM gcs.sp.orders.files").collect()
        assert files and all(r.file_path.startswith("gs://lake/wh/sp/orders/") for r in files)
        assert any(o.startswith("wh/sp/orders/data/") for o in fg.objects("lake", "wh/sp/orders/"))
        # fake-gcs-server checks no token: what the JVM got through the gateway were tokens the catalog
        # minted, more than one of them (refreshed across lifetimes)
        assert len(source.minted) - minted_before >= 3
        table = session.table("sp.orders")
        assert table.scan().to_arrow().num_rows == out["rows"]
        table.append(pa.table({"id": pa.array([100], pa.int64()), "item": ["py"]}))
        assert session.spark().sql("SELECT count(*) AS c FROM gcs.sp.orders").collect()[0].c == out["rows"] + 1
    finally:
        session.close()
