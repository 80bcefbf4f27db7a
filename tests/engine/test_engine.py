"""Seed 003 end to end on a multi-user catalog: DEFINER views through the trusted engine.

One reference catalog (S3 emulator, trusted_engines = the ``engine`` principal) and one real
``lakesession engine`` process (its own JVM, Spark Connect behind the gRPC front door) serve the whole
module. etl owns ``sales.orders`` (EU, US, APAC rows); bob, who reads the table, creates the DEFINER view
``sales.v_eu`` through the engine; alice holds only VIEW_READ on the view. Users connect with real
client-credentials logins at the catalog's issuer and ``lakesession.connect(..., engine=…)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from lakesession._spark import jars as J
from lakesession.errors import CatalogAccessError, EngineRefusedError
from tests._engine import ROWS, SECRETS, VIEW_SQL, RunningEngine, login, seed_policy, start_engine
from tests.factories import make_catalog, vended_catalog

SPARK = J.detect_spark()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(int(SPARK.version.split(".")[0]) < 4, reason="the engine is Spark Connect: pyspark 4"),
]
EU = [(1, 10.0), (3, 30.0), (5, 50.0)]


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


def test_untrusted_engine_is_refused_with_the_reason(tmp_path: Path, view: str, engine: RunningEngine) -> None:
    """The same engine against a catalog that does not declare it trusted: the catalog says why it refused."""
    with make_catalog(seed_policy(), bucket="lake2", data_dir=tmp_path / "cat") as other:
        etl = vended_catalog(other, "etl", f"etl:{SECRETS['etl']}")
        etl.create_namespace("sales")
        etl.create_table("sales.orders", schema=ROWS.schema).append(ROWS)
        token = other.admin.token_for("bob")
        body = {
            "name": "v_eu",
            "schema": {
                "type": "struct",
                "schema-id": 0,
                "fields": [
                    {"id": 1, "name": "id", "type": "long", "required": False},
                    {"id": 2, "name": "amount", "type": "double", "required": False},
                ],
            },
            "view-version": {
                "version-id": 1,
                "timestamp-ms": 1700000000000,
                "schema-id": 0,
                "summary": {},
                "default-namespace": ["sales"],
                "default-catalog": "lake",
                "representations": [{"type": "sql", "sql": VIEW_SQL, "dialect": "spark"}],
            },
            "properties": {"trino.run-as-owner": "bob"},
        }
        r = httpx.post(
            f"{other.uri}/v1/lakesession/namespaces/sales/views",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
        )
        assert r.status_code == 200, r.text
        with start_engine(other, tmp_path) as untrusted:
            alice = login(other, "alice", untrusted)
            try:
                with pytest.raises(CatalogAccessError, match="trusted engine"):
                    alice.sql("SELECT * FROM lake.sales.v_eu").collect()
            finally:
                alice.close()


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
