"""The front door's memory of a session, without a JVM: which statements move its current namespace
(``changes_where``), what it remembers of where a session is (``Whereabouts``), and its expansions
(``ExpansionCache``: per session and text, bounded, expiring, never another gateway's or another place's)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("pyspark.sql.connect.proto")

from pyspark.sql.connect.proto import base_pb2

from lakesession.engine._rewrite import Expanded, ExpansionCache
from lakesession.engine._where import Whereabouts, changes_where, list_tables_here


def sql_plan(text: str) -> Any:
    req = base_pb2.ExecutePlanRequest(session_id="s")
    req.plan.command.sql_command.input.sql.query = text
    return req.plan


def test_only_reads_keep_the_current_namespace() -> None:
    for text in (
        "SELECT 1",
        " with x as (select 1) select * from x",
        "-- hi\nSELECT 1",
        "(SELECT 1)",
        "EXPLAIN SELECT 1",
    ):
        assert not changes_where(sql_plan(text)), text
    for text in ("USE lake.sales", "SET CATALOG lake", "use sales", "CREATE VIEW v AS SELECT 1", "SET x=1"):
        assert changes_where(sql_plan(text)), text
    req = base_pb2.ExecutePlanRequest(session_id="s")
    req.plan.root.catalog.set_current_database.db_name = "sales"
    assert changes_where(req.plan)
    listing = base_pb2.ExecutePlanRequest(session_id="s")
    listing.plan.root.catalog.list_tables.SetInParent()
    assert not changes_where(listing.plan) and len(list_tables_here(listing.plan)) == 1
    listing.plan.root.catalog.list_tables.db_name = "sales"
    assert list_tables_here(listing.plan) == []


def test_whereabouts_asks_once_until_forgotten_and_per_principal() -> None:
    asked: list[str] = []

    def ask(session_id: str, user: Any) -> list[tuple[Any, ...]]:
        asked.append(session_id)
        return [("lake", "sales")] if len(asked) == 1 else [("lake", "`a.b`.c")]

    where = Whereabouts(ask)
    alice, bob = SimpleNamespace(principal="alice"), SimpleNamespace(principal="bob")
    assert where.get("s1", alice) == where.get("s1", alice) == ("lake", ("sales",))
    assert asked == ["s1"]
    where.forget("s1")
    assert where.get("s1", alice) == ("lake", ("a.b", "c"))
    where.get("s1", bob)  # an id claimed by someone else: asked again
    assert asked == ["s1", "s1", "s1"]


def test_expansions_are_kept_per_session_bounded_and_briefly() -> None:
    gateway = object()
    user = SimpleNamespace(gateway=gateway)
    cache = ExpansionCache(size=2, ttl=0.3)
    out = Expanded("q", "signed", {"lake__chain_1": "http://gw/chain/1"})
    cache.put("s1", "q", user, out, None)
    assert cache.get("s1", "q", user, None) is out
    assert cache.get("s2", "q", user, None) is None  # another session
    assert cache.get("s1", "q", SimpleNamespace(gateway=object()), None) is None  # a new gateway: routes gone
    placed = Expanded("v", "signed v")
    cache.put("s1", "v", user, placed, ("lake", ("sales",)))
    assert cache.get("s1", "v", user, lambda: ("lake", ("sales",))) is placed
    assert cache.get("s1", "v", user, lambda: ("lake", ("hr",))) is None  # resolved elsewhere now
    cache.put("s1", "w", user, out, None)  # a third entry: the oldest goes
    assert cache.get("s1", "q", user, None) is None
    time.sleep(0.35)
    assert cache.get("s1", "w", user, None) is None  # expired
