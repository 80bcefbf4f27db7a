"""A refusal by the catalog reaches ``session.table()`` as the one ``CatalogAccessError`` line Spark gives.

Before: after a grant was revoked, ``session.table()`` let pyiceberg's ``ForbiddenError: ForbiddenException:
…`` through (a class nobody imported, no fix); ``except LakesessionError`` missed it.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

import pytest

from lakesession.errors import CatalogAccessError, LakesessionError
from lakesession.reference import ReferenceCatalog
from tests.client.test_store_denials import connect
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(shop_policy("rf"), bucket="refusals", data_dir=tmp_path_factory.mktemp("refusals")) as handle:
        with connect(handle, "etl", "etl-secret-rf") as etl:
            etl.catalog.create_namespace("shop")
            etl.catalog.create_table(("shop", "orders"), SCHEMA)
            etl.table("shop.orders").append(ROWS)
        yield handle


def test_a_revoked_grant_is_one_catalog_access_error(cat: ReferenceCatalog) -> None:
    from pyiceberg.exceptions import ForbiddenError

    with connect(cat, "reader", "reader-secret-rf") as reader:
        assert reader.table("shop.orders").scan().to_arrow().num_rows == 2
        cat.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
        try:
            with pytest.raises(CatalogAccessError) as caught:
                reader.table("shop.orders")
        finally:
            cat.admin.grant("readers", "TABLE_READ_DATA", "table shop.orders")
        token = reader.identity.token()
    err = caught.value
    message = str(err)
    assert isinstance(err, LakesessionError) and err.kind == "forbidden" and err.status == 403
    assert message.startswith("The catalog refused to load table shop.orders as reader (HTTP 403): ")
    assert "ForbiddenException" not in message and "session.grants()" in message
    assert len(message.splitlines()) == 1 and token not in message
    assert isinstance(err.__cause__, ForbiddenError)  # pyiceberg's own, kept
    assert len("".join(traceback.format_exception(err)).splitlines()) <= 30


def test_a_missing_table_is_still_no_such_table(cat: ReferenceCatalog) -> None:
    from pyiceberg.exceptions import NoSuchTableError

    with connect(cat, "etl", "etl-secret-rf") as etl:
        with pytest.raises(NoSuchTableError):
            etl.table("shop.nothing_here")
