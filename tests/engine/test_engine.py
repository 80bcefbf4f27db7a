"""Seed 003 end to end on a multi-user catalog: DEFINER views through the trusted engine.

One reference catalog (S3 emulator, trusted_engines = the ``engine`` principal) and one real
``lakesession engine`` process (its own JVM, Spark Connect behind the gRPC front door) serve the whole
module. etl owns ``sales.orders`` (EU, US, APAC rows); bob, who reads the table, creates the DEFINER view
``sales.v_eu`` through the engine; alice holds only VIEW_READ on the view. Users connect with real
client-credentials logins at the catalog's issuer and ``lakesession.connect(..., engine=…)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from lakesession.errors import CatalogAccessError, EngineRefusedError
from tests._engine import ENGINE_TESTS, EU, RunningEngine, login

pytestmark = ENGINE_TESTS


def audit(catalog: Any, **params: Any) -> list[dict[str, Any]]:
    return [r.as_dict() for r in catalog.admin.audit(**params)]


def test_alice_reads_exactly_the_eu_rows_through_the_engine(catalog: Any, engine: RunningEngine, view: str) -> None:
    alice = login(catalog, "alice", engine)
    try:
        rows = sorted((r["id"], r["amount"]) for r in alice.sql("SELECT * FROM lake.sales.v_eu").collect())
        assert rows == EU
        direct = sorted((r["id"], r["amount"]) for r in alice.engine().sql("SELECT * FROM lake.sales.v_eu").collect())
        assert direct == EU
        table = sorted((r["id"], r["amount"]) for r in alice.engine().table("lake.sales.v_eu").collect())
        assert table == EU
        ran = alice.accesses()
        assert (ran["via"] == "engine").any() and (ran["action"] == "engine_query").any()
        shown = alice.audit()
        assert list(shown[shown["action"] == "engine_query"]["ran_on"].unique()) == ["engine"]
    finally:
        alice.close()


def test_the_table_itself_is_refused_on_the_engine(catalog: Any, engine: RunningEngine, view: str) -> None:
    alice = login(catalog, "alice", engine)
    try:
        with pytest.raises(CatalogAccessError, match="alice"):
            alice.engine().sql("SELECT * FROM lake.sales.orders").collect()
    finally:
        alice.close()


def test_audit_names_alice_the_engine_and_the_chain(catalog: Any, engine: RunningEngine, view: str) -> None:
    alice = login(catalog, "alice", engine)
    try:
        alice.sql("SELECT count(*) FROM lake.sales.v_eu").collect()
    finally:
        alice.close()
    records = [r for r in audit(catalog) if r.get("principal") == "alice" and "sales.orders" in r.get("securable", "")]
    allowed = [r for r in records if r["decision"] == "allow"]
    assert allowed, records[-5:]
    detail = allowed[-1]["detail"]
    assert detail["actor"] == "engine"
    assert detail["user_in_effect"] == "bob" and detail["delegated"] is True
    assert detail["chain"] == ["sales.v_eu"]


def test_refusals_name_their_rule(catalog: Any, engine: RunningEngine, view: str) -> None:
    alice = login(catalog, "alice", engine)
    try:
        spark = alice.engine()
        with pytest.raises(EngineRefusedError) as err:
            spark.sql("SELECT reflect('java.lang.System', 'getenv', 'HOME')").collect()
        assert err.value.rule == "reflection"
        assert "\n" not in str(err.value)
    finally:
        alice.close()


def test_an_engine_the_catalog_does_not_trust_is_refused_with_the_reason(
    catalog: Any, engine: RunningEngine, view: str
) -> None:
    """The same engine once the catalog no longer declares it trusted (its operator's choice, read per request):
    the chain is ignored, alice alone is checked on sales.orders, and the error says why and who must act."""
    trusted = list(catalog.settings.trusted_engines)
    alice = login(catalog, "alice", engine)
    catalog.settings.trusted_engines.clear()
    try:
        with pytest.raises(CatalogAccessError, match="not a trusted engine") as err:
            alice.sql("SELECT * FROM lake.sales.v_eu").collect()
    finally:
        catalog.settings.trusted_engines.extend(trusted)
        alice.close()
    message = str(err.value)
    assert "'engine' (acting for 'alice')" in message and "trusted_engines" in message, message
    assert "\n" not in message


def test_the_chain_says_why_it_was_refused_and_what_to_do(catalog: Any, engine: RunningEngine, view: str) -> None:
    """alice's own client (not a trusted engine): the catalog checks alice on sales.orders, and the chain says so."""
    alice = login(catalog, "alice")
    try:
        tree = alice.chain("sales.v_eu")
    finally:
        alice.close()
    assert tree.security == "DEFINER" and tree.owner == "bob" and tree.decision == "allow"
    (orders,) = tree.children
    assert orders.decision == "deny" and orders.user_in_effect == "bob"
    assert "not a trusted engine" in (orders.note or "") and "engine=" in (orders.note or ""), orders.note


def test_a_session_outlives_its_tokens(catalog: Any, engine: RunningEngine, view: str) -> None:
    """Access tokens live TOKEN_TTL s here: the client sends a fresh one with each call, and the engine exchanges
    the fresh one again for its gateway once its exchanged token is due (both refreshes seen in the audit)."""
    import time

    from tests.engine.conftest import TOKEN_TTL

    alice = login(catalog, "alice", engine)
    try:
        first = alice.identity.token()
        assert sorted((r["id"], r["amount"]) for r in alice.sql("SELECT * FROM lake.sales.v_eu").collect()) == EU
        started = time.time()
        time.sleep(TOKEN_TTL + 2)
        assert sorted((r["id"], r["amount"]) for r in alice.sql("SELECT * FROM lake.sales.v_eu").collect()) == EU
        assert alice.identity.token() != first
    finally:
        alice.close()
    # every token of the first query had expired by then: the engine acted for alice with a new exchanged one
    later = [r for r in audit(catalog, principal="alice", since=started + TOKEN_TTL) if r["decision"] == "allow"]
    assert any((r["detail"] or {}).get("actor") == "engine" for r in later), later[-3:]


def test_current_user_is_the_authenticated_user_also_inside_definer_views(
    catalog: Any, engine: RunningEngine, view: str
) -> None:
    """``current_user()``/``session_user()`` answer the token's principal, in alice's own SQL and in the body of
    bob's DEFINER view the engine expanded into it (#39). Before: ``'root'``, the engine's OS account."""
    bob = login(catalog, "bob", engine)
    try:
        bob.engine().sql(
            "CREATE VIEW lake.sales.v_who TBLPROPERTIES ('trino.run-as-owner' = 'bob') AS "
            "SELECT id, current_user() AS who, session_user() AS s FROM sales.orders WHERE region = 'EU'"
        ).collect()
        assert [tuple(r) for r in bob.engine().sql("SELECT current_user()").collect()] == [("bob",)]
    finally:
        bob.close()
    catalog.admin.grant("eu-readers", "VIEW_READ", "view sales.v_who")
    alice = login(catalog, "alice", engine)
    try:
        spark = alice.engine()
        assert [tuple(r) for r in spark.sql("SELECT current_user(), session_user(), user()").collect()] == [
            ("alice", "alice", "alice")
        ]
        assert [tuple(r) for r in spark.sql("SELECT DISTINCT who, s FROM lake.sales.v_who").collect()] == [
            ("alice", "alice")
        ]
        assert [tuple(r) for r in spark.sql("SELECT current_user(), count(*) FROM lake.sales.v_eu").collect()] == [
            ("alice", 3)
        ]
        assert {r["who"] for r in spark.table("lake.sales.v_who").collect()} == {"alice"}
    finally:
        alice.close()
