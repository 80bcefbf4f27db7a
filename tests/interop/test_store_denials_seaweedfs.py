"""The same readable errors with a store and a catalog nobody here wrote: SeaweedFS.

One ``weed mini`` serves both: its S3 + STS is the reference catalog's store (SeaweedFS enforces the
read-only session policy itself), and its own Iceberg REST catalog is a catalog without remote
signing. A reader's pyiceberg append and Spark INSERT raise ``StorageAccessError``; asking SeaweedFS's
catalog for remote signing raises ``CapabilityError`` naming its ``/v1/config`` answer.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

import lakesession
from lakesession.errors import CapabilityError, StorageAccessError
from lakesession.reference import ReferenceCatalog
from tests._seaweedfs import SeaweedFS, create_table_bucket, key_settings, seaweedfs
from tests.client.test_store_denials import POLICY, ROWS, SCHEMA, assert_readable, connect, one_line_in_ipython
from tests.conftest import SPARK_TEST_CONF
from tests.factories import make_catalog, without_storage_access

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    with seaweedfs(tmp_path_factory.mktemp("sw-denials")) as sw:
        yield sw


@pytest.fixture(scope="module")
def cat(store: SeaweedFS, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    settings = key_settings(store)
    with make_catalog(
        POLICY, warehouse=f"s3://{store.bucket}/wh", s3=settings, data_dir=tmp_path_factory.mktemp("sw-denials-cat")
    ) as handle:
        with connect(handle, "etl", "etl-secret-dn") as etl:
            etl.catalog.create_namespace("shop")
            etl.catalog.create_table(("shop", "orders"), SCHEMA)
            etl.table("shop.orders").append(ROWS)
        yield handle


@pytest.fixture(scope="module")
def reader(cat: ReferenceCatalog) -> Iterator[lakesession.Session]:
    s = connect(cat, "reader", "reader-secret-dn", catalog_name="sw_reader", spark_conf=SPARK_TEST_CONF)
    yield s
    s.close()


def test_pyiceberg_append_refused_by_seaweedfs(reader: lakesession.Session, capsys: pytest.CaptureFixture[str]) -> None:
    table = reader.table("shop.orders")
    assert table.scan().to_arrow().num_rows == 2
    # the reference catalog says the credentials are read-only, so the client would refuse first: without that
    # word (as from a catalog that does not say) the write reaches SeaweedFS, which refuses it itself
    without_storage_access(reader.credential_store, "shop.orders")
    with pytest.raises(StorageAccessError) as caught:
        table.append(ROWS)
    assert_readable(caught.value, table="shop.orders", principal="reader")
    assert isinstance(caught.value.__cause__, OSError)
    shown = one_line_in_ipython("t.append(rows)", {"t": table, "rows": ROWS}, capsys)
    assert len(shown.splitlines()) == 1 and "refused to write table shop.orders as reader" in shown, shown


@pytest.mark.spark
def test_spark_insert_refused_by_seaweedfs(
    lake: lakesession.Session, reader: lakesession.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    spark = reader.spark()
    assert spark.sql("SELECT count(*) FROM sw_reader.shop.orders").collect()[0][0] == 2
    with pytest.raises(StorageAccessError) as caught:
        spark.sql("INSERT INTO sw_reader.shop.orders VALUES (3, 'fig')")
    assert_readable(caught.value, table="shop.orders", principal="reader")
    shown = one_line_in_ipython(
        "spark.sql(\"INSERT INTO sw_reader.shop.orders VALUES (4, 'kiwi')\")", {"spark": spark}, capsys
    )
    assert len(shown.splitlines()) == 1 and "refused to write table shop.orders as reader" in shown, shown[:3000]


def test_remote_signing_from_seaweedfs_catalog_is_a_capability_error(
    store: SeaweedFS, capsys: pytest.CaptureFixture[str]
) -> None:
    """SeaweedFS's own catalog offers no remote signing: asking for it is one ``CapabilityError``."""
    warehouse = create_table_bucket(store, "capability")
    with lakesession.connect(
        uri=store.iceberg_uri,
        warehouse=warehouse,
        credential=f"{store.access_key}:{store.secret_key}",
        token_url=f"{store.iceberg_uri}/v1/oauth/tokens",
        catalog_name="seaweed",
    ) as session:
        session.catalog.create_namespace("cap")
        session.catalog.create_table(("cap", "t"), schema=pa.schema([("id", pa.int64())]))
        assert session.table("cap.t").scan().to_arrow().num_rows == 0  # vended credentials work
        with pytest.raises(CapabilityError) as caught:
            session.table("cap.t", access="remote-signing")
        err = caught.value
        message = str(err)
        assert err.capability == "remote signing" and isinstance(err.config.get("endpoints"), list)
        assert f"The catalog at {store.iceberg_uri} does not offer remote signing" in message
        assert "its /v1/config lists" in message and "no …/credentials" in message  # SeaweedFS lists none
        assert "access='vended-credentials'" in message and len(message.splitlines()) == 1
        shown = one_line_in_ipython("s.table('cap.t', access='remote-signing')", {"s": session}, capsys)
        assert len(shown.splitlines()) == 1 and "does not offer remote signing" in shown, shown
        with pytest.raises(CapabilityError) as no_grants:
            session.grants(strict=True)
        assert no_grants.value.capability == "grants" and "offers no grants endpoint" in str(no_grants.value)


@pytest.mark.spark
def test_spark_remote_signing_from_seaweedfs_catalog_is_a_capability_error(
    lake: lakesession.Session, store: SeaweedFS, capsys: pytest.CaptureFixture[str]
) -> None:
    """A remote-signing session's Spark query: SeaweedFS answers the load without signing settings (and,
    asked for signing, without credentials); the gateway refuses it with a 400 naming what the catalog
    offers, and Spark raises that as one ``CapabilityError`` (before: an empty table read "fine", a
    non-empty one failed in the AWS SDK's credential chain)."""
    with lakesession.connect(
        uri=store.iceberg_uri,
        warehouse=create_table_bucket(store, "capspark"),
        credential=f"{store.access_key}:{store.secret_key}",
        token_url=f"{store.iceberg_uri}/v1/oauth/tokens",
        catalog_name="seaweed_rs",
        access="remote-signing",
        spark_conf=SPARK_TEST_CONF,
    ) as session:
        session.catalog.create_namespace("rs")
        session.catalog.create_table(("rs", "t"), schema=pa.schema([("id", pa.int64())]))
        spark = session.spark()
        with pytest.raises(CapabilityError) as caught:
            spark.sql("SELECT * FROM seaweed_rs.rs.t").collect()
        message = str(caught.value)
        assert caught.value.capability == "remote signing" and len(message.splitlines()) == 1
        assert f"The catalog at {store.iceberg_uri} does not offer remote signing" in message
        assert "remote-signing load of table rs.t without signing settings" in message  # SeaweedFS vends nothing
        assert "its /v1/config lists no endpoints" in message and "access='vended-credentials'" in message
        shown = one_line_in_ipython("spark.sql('SELECT * FROM seaweed_rs.rs.t').collect()", {"spark": spark}, capsys)
        assert len(shown.splitlines()) == 1 and "does not offer remote signing" in shown, shown[:3000]
