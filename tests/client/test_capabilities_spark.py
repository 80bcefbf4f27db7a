"""Spark raises what Python raises for the same cause, against a double replaying Polaris's recorded answers.

Before: remote signing asked of Polaris raised pyspark's bare ``IllegalArgumentException`` (Polaris answers
type ``IllegalArgumentException``, which Iceberg Java maps to the JDK's exception; the old double said
``BadRequestException``, so the old test passed), and Polaris's refusal of the default scope raised
``CatalogAccessError: Not authorized: Not authorized: lakesession has no usable login…``, which
``except ScopeError`` missed. Now: ``CapabilityError`` and ``ScopeError``, one line each, short tracebacks.

Spark runs on the suite's shared JVM (the ``lake`` fixture); each Session adds its own catalog to it.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import pytest

import lakesession
from lakesession.errors import CapabilityError, CatalogAccessError, LakesessionError, ScopeError
from tests.client.test_capabilities import POLARIS_SCOPE, SECRET, _serve, polaris_like
from tests.conftest import SPARK_TEST_CONF

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def polaris() -> Iterator[str]:
    yield from _serve(polaris_like)


def short(err: BaseException) -> None:
    """One line of message, and a traceback a script or ``logging.exception`` shows in a few lines."""
    assert len(str(err).splitlines()) == 1, str(err)
    lines = "".join(traceback.format_exception(err)).splitlines()
    assert len(lines) <= 30, "\n".join(lines)
    assert "Py4JJavaError" not in "\n".join(lines) and "\tat " not in "\n".join(lines)


def test_remote_signing_through_spark_is_a_capability_error(lake: lakesession.Session, polaris: str) -> None:
    with lakesession.connect(
        uri=f"{polaris}/api/catalog",
        token="polaris-token",
        warehouse="cat",
        catalog_name="polaris_rs",
        access="remote-signing",
        spark_conf=SPARK_TEST_CONF,
    ) as session:
        spark = session.spark()
        with pytest.raises(CapabilityError) as caught:
            spark.sql("SELECT * FROM polaris_rs.sales.orders").collect()
    err = caught.value
    message = str(err)
    assert isinstance(err, LakesessionError) and isinstance(err, CatalogAccessError)
    assert err.capability == "remote signing"
    assert (
        "does not offer remote signing" in message and "Unsupported access delegation mode: remote-signing" in message
    )
    assert "access='vended-credentials'" in message
    short(err)


def test_polaris_default_scope_through_spark_is_the_scope_error_python_raises(
    lake: lakesession.Session, polaris: str
) -> None:
    with lakesession.connect(
        uri=f"{polaris}/api/catalog",
        credential=f"root:{SECRET}",
        warehouse="cat",
        catalog_name="polaris_sc",
        spark_conf=SPARK_TEST_CONF,
    ) as session:
        with pytest.raises(ScopeError) as in_python:
            session.table("sales.orders")
        with pytest.raises(ScopeError) as in_spark:  # binding the catalog to Spark already asks it
            session.spark().sql("SHOW NAMESPACES IN polaris_sc").collect()
    err = in_spark.value
    message = str(err)
    assert isinstance(err, LakesessionError)
    assert err.expected == in_python.value.expected == [POLARIS_SCOPE] and err.sent == in_python.value.sent
    assert message == str(in_python.value), (message, str(in_python.value))  # the same words
    assert "Not authorized" not in message and f"scope={POLARIS_SCOPE!r}" in message
    assert SECRET not in message
    short(err)


def test_an_unknown_warehouse_through_spark_is_the_config_error_python_raises(lake: lakesession.Session) -> None:
    """Lakekeeper's recorded ``NoSuchWarehouseException``: Iceberg Java raises it at the first query (a raw
    ``Py4JJavaError`` before); Python raises ``ConfigError`` for it (``test_lakekeeper_answers.py``)."""
    from lakesession.errors import ConfigError
    from tests.client.test_lakekeeper_answers import lakekeeper_like

    for base in _serve(lakekeeper_like):
        with lakesession.connect(
            uri=f"{base}/catalog",
            token="lk-token",
            warehouse="nosuchwh",
            catalog_name="lk_nowh",
            spark_conf=SPARK_TEST_CONF,
        ) as session:
            with pytest.raises(ConfigError) as caught:
                session.spark().sql("SHOW NAMESPACES IN lk_nowh").collect()
            with pytest.raises(ConfigError) as in_python:
                session.table("sales.orders")
    err = caught.value
    assert "A warehouse 'nosuchwh' does not exist" in str(err) and "Fix: check warehouse=" in str(err)
    assert "A warehouse 'nosuchwh' does not exist" in str(in_python.value)
    short(err)
