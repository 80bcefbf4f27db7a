"""The rough edges a user of the engine meets (issue #39, part 6), on the package's shared engine.

alice reads only bob's DEFINER view ``sales.v_eu``; each test names the edge it holds. Grants a test adds
to the shared catalog are taken back when it ends.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lakesession.errors import CatalogAccessError
from tests._engine import ENGINE_TESTS, EU, RunningEngine, login
from tests.support import granted

pytestmark = ENGINE_TESTS


def rows(df: Any) -> list[tuple[int, float]]:
    return sorted((r["id"], r["amount"]) for r in df.collect())


def engine_loads(catalog: Any, principal: str, action: str, securable: str) -> list[dict[str, Any]]:
    """The catalog's audit records of ``action`` on ``securable`` made by the engine for ``principal``."""
    return [
        r
        for r in (rec.as_dict() for rec in catalog.admin.audit(principal=principal))
        if r["action"] == action
        and r["securable"] == securable
        and r["decision"] == "allow"  # the authorization (a load also writes an "issued" record)
        and (r.get("detail") or {}).get("actor") == "engine"
        and "chain" not in (r.get("detail") or {})  # a step of a chain the catalog checked, not a load
    ]


def test_explain_of_a_definer_query_shows_its_plan(catalog: Any, engine: RunningEngine, view: str) -> None:
    """EXPLAIN is expanded like the query it explains: the plan reads the view's table through its chain."""
    alice = login(catalog, "alice", engine)
    try:
        spark = alice.engine()
        for explain in ("EXPLAIN", "EXPLAIN EXTENDED"):
            plan = "\n".join(r["plan"] for r in spark.sql(f"{explain} SELECT * FROM lake.sales.v_eu").collect())
            assert "Forbidden" not in plan and "Error occurred" not in plan, plan
            assert "sales.orders" in plan and "EU" in plan, plan
            assert "lakesession-engine-signature" not in plan
        assert rows(spark.sql("SELECT * FROM lake.sales.v_eu")) == EU  # and the query still runs
    finally:
        alice.close()


def test_unqualified_and_differently_cased_view_names_resolve_as_in_spark(
    catalog: Any, engine: RunningEngine, view: str
) -> None:
    """``SALES.V_EU`` in the current catalog, ``v_eu`` in the current namespace after ``USE lake.sales`` (which
    needs the namespace's NAMESPACE_READ_PROPERTIES: refused with the catalog's own message, then granted
    here), ``spark.table``: each is the view."""
    alice = login(catalog, "alice", engine)
    try:
        spark = alice.engine()
        assert rows(spark.sql("SELECT * FROM SALES.V_EU")) == EU
        assert rows(spark.sql("SELECT * FROM lake.Sales.V_eu")) == EU
        with pytest.raises(CatalogAccessError) as err:  # not "Forbidden: Forbidden" (a refused HEAD has no body)
            spark.sql("USE lake.sales").collect()
        assert "namespace sales" in str(err.value) and "NAMESPACE_READ_PROPERTIES" in str(err.value), str(err.value)
        with granted(catalog, "eu-readers", "NAMESPACE_READ_PROPERTIES", "namespace sales"):
            spark.sql("USE lake.sales")
            assert rows(spark.sql("SELECT * FROM v_eu")) == EU
            assert rows(spark.sql("SELECT * FROM V_EU WHERE amount > 0")) == EU
            assert rows(spark.table("v_eu")) == EU
        fresh = login(catalog, "alice", engine)  # a new session starts at the catalog's root: v_eu is nowhere
        try:
            other = fresh.engine()
            with pytest.raises(Exception, match="v_eu"):
                other.sql("SELECT * FROM v_eu").collect()
            with granted(catalog, "eu-readers", "NAMESPACE_READ_PROPERTIES", "namespace sales"):
                other.catalog.setCurrentDatabase("sales")
            assert rows(other.sql("SELECT * FROM v_eu")) == EU
        finally:
            fresh.close()
    finally:
        alice.close()


def test_list_tables_without_a_namespace_lists_the_current_one(catalog: Any, engine: RunningEngine, view: str) -> None:
    """At the catalog's root (a new session) nothing lives: an empty list, not a ParseException; in a namespace,
    what Spark lists there."""
    alice = login(catalog, "alice", engine)
    bob = login(catalog, "bob", engine)
    try:
        assert alice.engine().catalog.listTables() == []
        spark = bob.engine()
        assert spark.catalog.listTables() == []
        with granted(catalog, "analysts", "NAMESPACE_READ_PROPERTIES", "namespace sales"):
            spark.sql("USE lake.sales")
            assert "orders" in [t.name for t in spark.catalog.listTables()]
    finally:
        alice.close()
        bob.close()


def test_a_statement_is_expanded_once_and_grants_still_hold_on_every_run(
    catalog: Any, engine: RunningEngine, view: str
) -> None:
    """``sql()`` then ``collect()`` (and a schema) send one text: the engine loads the view once for it. Run again
    after alice lost VIEW_READ, the same text is refused: the catalog checks the chain on every table load."""
    alice = login(catalog, "alice", engine)
    try:
        spark = alice.engine()
        statement = f"SELECT id, amount FROM lake.sales.v_eu WHERE '{uuid.uuid4().hex}' <> ''"
        before = len(engine_loads(catalog, "alice", "load_view", "view sales.v_eu"))
        df = spark.sql(statement)
        assert [f.name for f in df.schema.fields] == ["id", "amount"]
        assert rows(df) == EU
        assert len(engine_loads(catalog, "alice", "load_view", "view sales.v_eu")) == before + 1
        catalog.admin.revoke("eu-readers", "VIEW_READ", "view sales.v_eu")
        try:
            with pytest.raises(CatalogAccessError, match="VIEW_READ"):
                spark.sql(statement).collect()
        finally:
            catalog.admin.grant("eu-readers", "VIEW_READ", "view sales.v_eu")
        assert rows(spark.sql(statement)) == EU
    finally:
        alice.close()


def test_chain_knows_the_sessions_engine(catalog: Any, engine: RunningEngine, view: str) -> None:
    """alice's own client is no trusted engine, but her session has one: the chain says to use it, not to get one."""
    alice = login(catalog, "alice", engine)
    try:
        (orders,) = alice.chain("sales.v_eu").children
    finally:
        alice.close()
    note = orders.note or ""
    assert orders.decision == "deny" and "not a trusted engine" in note, note
    assert engine.address in note and "session.sql" in note, note
    assert "lakesession.connect(" not in note, note


def test_scan_reports_never_reach_the_catalog_refused(catalog: Any, engine: RunningEngine, view: str) -> None:
    """Iceberg files a scan report after each scan; through a view chain the engine's gateway answers it itself
    (catalogs refuse a POST carrying referenced-by): no refused report_metrics, no wasted round trip."""
    alice = login(catalog, "alice", engine)
    try:
        assert rows(alice.sql("SELECT * FROM lake.sales.v_eu")) == EU
    finally:
        alice.close()
    reports = [r for r in (rec.as_dict() for rec in catalog.admin.audit()) if r["action"] == "report_metrics"]
    assert [r for r in reports if r["decision"] != "allow"] == []
    assert [r for r in reports if r["securable"] == "table sales.orders"] == []


def test_a_view_you_may_not_read_is_named_with_its_privilege(catalog: Any, engine: RunningEngine, view: str) -> None:
    """carol may create views in ``sales`` but read nothing: her own view's refusal names the view and VIEW_READ
    (Spark asks for a table first, and the catalog refuses that as a table lacking TABLE_READ_PROPERTIES)."""
    catalog.admin.create_role("view-makers", ["carol"])
    catalog.admin.grant("view-makers", "VIEW_CREATE", "namespace sales")
    carol = login(catalog, "carol", engine)
    try:
        spark = carol.engine()
        spark.sql("CREATE VIEW lake.sales.v_carol AS SELECT 1 AS one").collect()
        with pytest.raises(CatalogAccessError) as err:
            spark.sql("SELECT * FROM lake.sales.v_carol").collect()
    finally:
        carol.close()
    message = str(err.value)
    assert "view sales.v_carol" in message and "VIEW_READ" in message, message
    assert "\n" not in message
    bob = login(catalog, "bob", engine)  # reads the table, created sales.v_eu, lacks VIEW_READ on it
    try:
        with pytest.raises(CatalogAccessError, match=r"view sales\.v_eu \(VIEW_READ required\)"):
            bob.engine().sql("SELECT * FROM lake.sales.v_eu").collect()  # (bob.sql() would start his own Spark)
    finally:
        bob.close()
