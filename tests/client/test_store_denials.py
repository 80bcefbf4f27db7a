"""A read-only principal's writes, refused by the store, reach the user as one ``StorageAccessError``.

The reference catalog vends read-only credentials for a TABLE_READ_DATA grant; its S3 emulator (moto,
with session policies enforced) refuses the write. Before: pyiceberg's ``append`` raised pyarrow's bare
``OSError: When initiating multiple part upload …`` and Spark's ``INSERT`` a ``Py4JJavaError`` of
hundreds of lines. Now both raise ``StorageAccessError`` naming the table, the operation, the principal
and the likely cause, with the original as ``__cause__``, shown by IPython as one line.

Spark runs on the suite's shared JVM (the ``lake`` fixture): the reader's Session gets its own
SparkSession on it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

import lakesession
from lakesession.errors import LakesessionError, StorageAccessError
from lakesession.reference import ReferenceCatalog
from tests.conftest import SPARK_TEST_CONF
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy, without_storage_access

pytestmark = pytest.mark.slow

POLICY = shop_policy("dn")


def connect(handle: ReferenceCatalog, who: str, secret: str, **kw: Any) -> lakesession.Session:
    return lakesession.connect(
        uri=handle.uri,
        credential=f"{who}:{secret}",
        token_url=f"{handle.issuer_uri}/token",
        warehouse="lakesession",
        **kw,
    )


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, bucket="denials-bucket", data_dir=tmp_path_factory.mktemp("denials")) as handle:
        with connect(handle, "etl", "etl-secret-dn") as etl:
            etl.catalog.create_namespace("shop")
            etl.catalog.create_table(("shop", "orders"), SCHEMA)
            etl.table("shop.orders").append(ROWS)
        yield handle


@pytest.fixture(scope="module")
def reader(cat: ReferenceCatalog) -> Iterator[lakesession.Session]:
    s = connect(cat, "reader", "reader-secret-dn", catalog_name="lake_reader", spark_conf=SPARK_TEST_CONF)
    yield s
    s.close()


def one_line_in_ipython(code: str, namespace: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> str:
    """What a notebook shows for ``code``: a real IPython shell runs it; its whole display, stripped."""
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.user_ns.update(namespace)
    capsys.readouterr()
    result = shell.run_cell(code)
    shown = capsys.readouterr()
    assert result.error_in_exec is not None, "the cell should have failed"
    return (shown.out + shown.err).strip()


def assert_readable(err: StorageAccessError, *, table: str, principal: str) -> None:
    message = str(err)
    assert isinstance(err, LakesessionError)
    assert err.table == table and err.operation == "write" and err.principal == principal
    assert err.reason == "read-only grant"
    assert f"table {table}" in message and f"as {principal}" in message and "refused to write" in message
    assert "read-only" in message and "TABLE_WRITE_DATA" in message  # the likely cause and its fix
    assert len(message.splitlines()) == 1 and "\tat " not in message


def test_pyiceberg_append_by_a_reader_is_refused_before_the_store(
    cat: ReferenceCatalog, reader: lakesession.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    """The catalog vended read-only credentials and said so (``lakesession.storage-access``): no request is sent."""
    table = reader.table("shop.orders")
    assert table.scan().to_arrow().num_rows == 2  # the grant reads
    since = time.time()
    with pytest.raises(StorageAccessError) as caught:
        table.append(ROWS)
    err = caught.value
    assert_readable(err, table="shop.orders", principal="reader")
    assert err.code == "ReadOnlyCredentials" and "before it reached the store" in str(err)
    assert err.path and err.path.startswith("s3://denials-bucket/wh/shop/orders/data/")
    assert "session.table('shop.orders')" in str(err)  # a new grant needs a reload for new credentials
    sent = [r for r in cat.s3_emulator.requests if r.time >= since and r.method in ("PUT", "POST")]
    assert not sent, sent  # not one write request reached the store
    assert reader.table("shop.orders").scan().to_arrow().num_rows == 2  # nothing was committed
    shown = one_line_in_ipython("t.append(rows)", {"t": table, "rows": ROWS}, capsys)
    assert len(shown.splitlines()) == 1, shown
    assert "refused to write table shop.orders as reader" in shown and "Traceback" not in shown


def test_pyiceberg_append_by_a_reader_is_refused_by_the_store_when_the_catalog_does_not_say(
    reader: lakesession.Session,
) -> None:
    """A catalog that does not tell the access level (SeaweedFS, Polaris): the store refuses, the same one line."""
    table = reader.table("shop.orders")
    without_storage_access(reader.credential_store, "shop.orders")
    with pytest.raises(StorageAccessError) as caught:
        table.append(ROWS)
    err = caught.value
    assert_readable(err, table="shop.orders", principal="reader")
    assert isinstance(err.__cause__, OSError)  # pyarrow's own error, kept
    assert err.code == "AccessDenied" and err.path and err.path.startswith("s3://denials-bucket/wh/")
    vended = [v for c in reader.credential_store.entry("shop.orders").credentials for v in c.config.values()]
    assert not [v for v in vended if len(v) > 12 and v in str(err)]  # no key, secret or session token


def test_spark_insert_by_a_reader_is_one_storage_access_error(
    lake: lakesession.Session, reader: lakesession.Session, capsys: pytest.CaptureFixture[str]
) -> None:
    from py4j.protocol import Py4JJavaError

    spark = reader.spark()
    assert spark.sql("SELECT count(*) FROM lake_reader.shop.orders").collect()[0][0] >= 2
    with pytest.raises(StorageAccessError) as caught:
        spark.sql("INSERT INTO lake_reader.shop.orders VALUES (3, 'fig')")
    err = caught.value
    assert_readable(err, table="shop.orders", principal="reader")
    assert err.code == "AccessDenied"
    assert isinstance(err.java_error, Py4JJavaError) and err.__cause__ is None  # the Java trace, not chained
    # the same through a DataFrame write the user calls directly
    with pytest.raises(StorageAccessError):
        spark.createDataFrame([(4, "kiwi")], "id BIGINT, item STRING").writeTo("lake_reader.shop.orders").append()
    # and on the driver: a whole-table DELETE is metadata-only (the driver writes the manifests, no job runs)
    with pytest.raises(StorageAccessError) as on_driver:
        spark.sql("DELETE FROM lake_reader.shop.orders")
    assert on_driver.value.table == "shop.orders" and on_driver.value.operation == "write"
    shown = one_line_in_ipython(
        "spark.sql(\"INSERT INTO lake_reader.shop.orders VALUES (5, 'plum')\")", {"spark": spark}, capsys
    )
    assert len(shown.splitlines()) == 1, shown[:3000]
    assert "refused to write table shop.orders as reader" in shown and "Py4JJavaError" not in shown
    assert spark.sql("SELECT count(*) FROM lake_reader.shop.orders").collect()[0][0] == 2  # nothing was written
