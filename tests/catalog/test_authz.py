"""RBAC semantics: implications and downward inheritance."""

from __future__ import annotations

import pytest

from lakesession.reference.authz import IMPLIES, Grant, allowed
from lakesession.reference.authz import Privilege as P
from lakesession.reference.authz import Securable as S
from lakesession.reference.errors import BadRequest


def test_implications_follow_polaris() -> None:
    assert P.TABLE_READ_DATA in IMPLIES[P.TABLE_WRITE_DATA]
    assert P.TABLE_READ_PROPERTIES in IMPLIES[P.TABLE_WRITE_DATA]
    assert P.TABLE_WRITE_DATA not in IMPLIES[P.TABLE_READ_DATA]
    assert P.CATALOG_MANAGE_ACCESS not in IMPLIES[P.CATALOG_MANAGE_CONTENT]
    assert all(P.TOKEN_EXCHANGE not in IMPLIES[p] for p in P if p is not P.TOKEN_EXCHANGE)  # acting as others
    content = set(P) - {P.CATALOG_MANAGE_ACCESS, P.TOKEN_EXCHANGE, P.LOCATION_READ, P.LOCATION_WRITE}
    assert content <= IMPLIES[P.CATALOG_MANAGE_CONTENT]
    # raw storage is granted explicitly: managing content does not reach registered locations
    assert not {P.LOCATION_READ, P.LOCATION_WRITE} & IMPLIES[P.CATALOG_MANAGE_CONTENT]
    assert P.LOCATION_READ in IMPLIES[P.LOCATION_WRITE] and P.LOCATION_WRITE not in IMPLIES[P.LOCATION_READ]


def test_inheritance_is_downward_only() -> None:
    g = [Grant("r", P.TABLE_READ_DATA, S.parse("namespace sales"))]
    assert allowed(g, P.TABLE_READ_DATA, S.table(("sales",), "orders"))
    assert allowed(g, P.TABLE_READ_DATA, S.table(("sales", "eu"), "orders"))
    assert not allowed(g, P.TABLE_READ_DATA, S.table(("salesforce",), "orders"))
    assert not allowed(g, P.TABLE_READ_DATA, S.table(("hr",), "pay"))
    assert not allowed(g, P.TABLE_WRITE_DATA, S.table(("sales",), "orders"))
    t = [Grant("r", P.TABLE_READ_DATA, S.parse("table sales.orders"))]
    assert not allowed(t, P.TABLE_READ_DATA, S.table(("sales",), "orders_archive"))
    assert not allowed(t, P.TABLE_LIST, S.namespace(("sales",)))


@pytest.mark.parametrize("text", ["catalog x", "table orders", "namespace ", "shelf a", "view a..b"])
def test_bad_securables(text: str) -> None:
    with pytest.raises(BadRequest):
        S.parse(text)


def test_securable_roundtrip() -> None:
    for text in ["catalog", "namespace a.b", "table a.b.t", "view a.v"]:
        assert str(S.parse(text)) == text
