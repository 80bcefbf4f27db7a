"""Versioned schema (Alembic): from an empty database, from a database made by ``create_all`` before
migrations existed (adopted with its data), models and migrations never drift — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalogBaseTable
from sqlalchemy import MetaData, create_engine, inspect, text

from lakesession.reference import migrations, start, store
from lakesession.reference.idp import _authcode as idp_authcode
from lakesession.reference.idp import _state as idp_state
from tests._pg import new_database

MODELS = [store.metadata, SqlCatalogBaseTable.metadata, idp_state.metadata, idp_authcode.metadata]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return store.sqlite_url(tmp_path / "catalog.db")
    return new_database("mig")


def all_models() -> MetaData:
    merged = MetaData()
    for md in MODELS:
        for t in md.tables.values():
            t.to_metadata(merged)
    return merged


def grant_alice(conn: Any, now: float, privilege: str, securable: str) -> None:
    """alice in role ``readers`` holding ``privilege`` on ``securable``, written as raw rows of a legacy schema."""
    conn.execute(text("INSERT INTO ls_principals (name, type, created_at) VALUES ('alice', 'user', :t)"), {"t": now})
    conn.execute(text("INSERT INTO ls_roles (name, created_at) VALUES ('readers', :t)"), {"t": now})
    conn.execute(text("INSERT INTO ls_role_members (role, principal) VALUES ('readers', 'alice')"))
    conn.execute(
        text(
            "INSERT INTO ls_grants (role, privilege, securable, created_at) "
            "VALUES ('readers', :privilege, :securable, :t)"
        ),
        {"privilege": privilege, "securable": securable, "t": now},
    )


def test_empty_database_reaches_head_and_matches_the_models(db_url: str) -> None:
    engine = store.make_engine(db_url)
    try:
        assert migrations.current(engine) == migrations.head()
        tables = set(inspect(engine).get_table_names())
        assert set(all_models().tables) <= tables and migrations.VERSION_TABLE in tables
        from alembic.autogenerate import compare_metadata
        from alembic.runtime.migration import MigrationContext

        with engine.connect() as conn:
            ctx = MigrationContext.configure(conn, opts={"version_table": migrations.VERSION_TABLE})
            diff = compare_metadata(ctx, all_models())
        assert diff == [], (
            "table definitions and migrations differ: add a revision in lakesession/reference/migrations/versions/ "
            f"for {diff}"
        )
        store.make_engine(db_url).dispose()  # a second start changes nothing
        assert migrations.current(engine) == migrations.head()
    finally:
        engine.dispose()


def test_database_from_before_migrations_is_adopted_without_data_loss(db_url: str, tmp_path: Path) -> None:
    # today's schema exactly as create_all made it: the baseline, without any version table
    legacy = create_engine(db_url)
    migrations.upgrade(legacy, "0001")
    now = time.time()
    with legacy.begin() as conn:
        conn.execute(text(f"DROP TABLE {migrations.VERSION_TABLE}"))
        grant_alice(conn, now, "NAMESPACE_READ_PROPERTIES", "namespace legacy")
        conn.execute(
            text(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) "
                "VALUES ('lakesession', 'legacy', 'owner', 'from-before')"
            )
        )
        conn.execute(
            text(
                "INSERT INTO ls_audit (ts, request_id, principal, action, securable, decision, detail) "
                "VALUES (:t, 'r-1', 'alice', 'load_table', 'table legacy.t', 'allow', :d)"
            ),
            {"t": now - 100, "d": json.dumps({"old": True})},
        )
    assert migrations.current(legacy) is None
    with start(data_dir=tmp_path / "d", db=db_url) as cat:
        assert migrations.current(cat.services.catalog.engine) == migrations.head()
        assert [g.as_dict() for g in cat.admin.grants("readers")] == [
            {"role": "readers", "privilege": "NAMESPACE_READ_PROPERTIES", "on": "namespace legacy"}
        ]
        r = httpx.get(
            f"{cat.uri}/v1/lakesession/namespaces/legacy",
            headers={"Authorization": f"Bearer {cat.admin.token_for('alice')}"},
        )
        assert r.status_code == 200, r.text
        assert r.json()["properties"] == {"owner": "from-before"}
        old = cat.admin.audit(principal="alice", since=now - 200, action="load_table")
        assert [(a.request_id, a.securable) for a in old] == [("r-1", "table legacy.t")]
    legacy.dispose()


@pytest.mark.slow
def test_concurrent_first_starts_on_one_postgresql_database() -> None:
    """Two replicas starting at once against an empty database: one migrates, the other waits, neither fails."""
    url = new_database("race")
    errors: list[BaseException] = []
    barrier = threading.Barrier(3)

    def boot() -> None:
        engine = create_engine(url)
        try:
            barrier.wait()
            migrations.upgrade(engine)
        except BaseException as e:  # collected and asserted below
            errors.append(e)
        finally:
            engine.dispose()

    threads = [threading.Thread(target=boot) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    engine = create_engine(url)
    try:
        assert migrations.current(engine) == migrations.head()
    finally:
        engine.dispose()


def test_a_database_from_a_newer_version_is_refused_clearly(tmp_path: Path) -> None:
    url = store.sqlite_url(tmp_path / "c.db")
    store.make_engine(url).dispose()
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text(f"UPDATE {migrations.VERSION_TABLE} SET version_num = '9999'"))
    with pytest.raises(migrations.MigrationError, match="newer lakesession"):
        migrations.upgrade(engine)
    engine.dispose()


def test_revision_0004_turns_dot_joined_namespaces_into_levels(db_url: str, tmp_path: Path) -> None:
    """A database at 0003 written the old way (pyiceberg's SqlCatalog joins levels with '.') keeps
    its namespaces, tables, storage owners and grants after 0004; a dotted level then fits beside them."""
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    wh = f"file://{tmp_path / 'wh'}"
    old = create_engine(db_url)
    migrations.upgrade(old, "0003")
    sql = SqlCatalog("lakesession", uri=db_url, warehouse=wh)
    sql.create_namespace(("legacy",))
    sql.create_namespace(("legacy", "sub"), {"owner": "from-0003"})
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    t = sql.create_table(("legacy", "sub", "t"), schema)
    sql.engine.dispose()
    now = time.time()
    with old.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO ls_locations (catalog_name, prefix, owner_kind, owner_namespace, owner_name) VALUES "
                "('lakesession', :p, 'table', 'legacy.sub', 't'), ('lakesession', :h, 'namespace', 'legacy.sub', '')"
            ),
            {"p": t.metadata.location + "/", "h": f"{wh}/legacy.sub/"},
        )
        conn.execute(
            text(
                "INSERT INTO ls_views (catalog_name, namespace, name, metadata_location, metadata_json) "
                "VALUES ('lakesession', 'legacy.sub', 'v', 'file:///x/v.metadata.json', '{}')"
            )
        )
        grant_alice(conn, now, "TABLE_READ_DATA", "namespace legacy.sub")
    with start(wh, data_dir=tmp_path / "d", db=db_url) as cat:
        assert migrations.current(cat.services.catalog.engine) == migrations.head()
        with old.connect() as conn:
            for table, column in (
                ("iceberg_tables", "table_namespace"),
                ("iceberg_namespace_properties", "namespace"),
                ("ls_views", "namespace"),
                ("ls_locations", "owner_namespace"),
            ):
                values = set(conn.execute(text(f"SELECT {column} FROM {table}")).scalars())
                assert "legacy\x1fsub" in values and not any("." in v for v in values), (table, values)
        admin = {"Authorization": f"Bearer {cat.admin.token_for('admin')}"}
        alice = {"Authorization": f"Bearer {cat.admin.token_for('alice')}"}
        base = f"{cat.uri}/v1/lakesession/namespaces"
        assert httpx.get(base, params={"parent": "legacy"}, headers=admin).json()["namespaces"] == [["legacy", "sub"]]
        r = httpx.get(f"{base}/legacy%1Fsub", headers=admin)
        assert r.json() == {"namespace": ["legacy", "sub"], "properties": {"owner": "from-0003"}}, r.text
        r = httpx.get(f"{base}/legacy%1Fsub/tables/t", headers=alice)  # the old grant still applies
        assert r.status_code == 200 and r.json()["metadata"]["location"] == t.metadata.location, r.text
        assert httpx.get(f"{base}/legacy%1Fsub/views", headers=admin).json()["identifiers"] == [
            {"namespace": ["legacy", "sub"], "name": "v"}
        ]
        # the storage index still knows who owns what: t's prefix is t's, and is freed when t is dropped
        body = {"name": "t2", "schema": {"type": "struct", "fields": []}, "location": t.metadata.location}
        r = httpx.post(f"{base}/legacy%1Fsub/tables", json=body, headers=admin)
        assert r.status_code == 400 and "owned by another table" in r.text, r.text
        assert httpx.delete(f"{base}/legacy%1Fsub/tables/t", headers=admin).status_code == 204
        assert httpx.post(f"{base}/legacy%1Fsub/tables", json=body, headers=admin).status_code == 200
        # and a level containing '.' now fits beside the old ones
        r = httpx.post(base, json={"namespace": ["legacy.sub"]}, headers=admin)
        assert r.status_code == 200, r.text
        assert httpx.get(base, params={"parent": "legacy"}, headers=admin).json()["namespaces"] == [["legacy", "sub"]]
    old.dispose()


def test_revision_0004_downgrade_refuses_to_lose_a_dotted_level(tmp_path: Path) -> None:
    from alembic import command

    url = store.sqlite_url(tmp_path / "c.db")
    engine = store.make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) "
                "VALUES ('lakesession', :ns, 'exists', 'true')"
            ),
            {"ns": "a\x1fb"},
        )
    with engine.begin() as conn:
        command.downgrade(migrations.config(conn), "0003")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT namespace FROM iceberg_namespace_properties")).scalar_one() == "a.b"
    migrations.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO iceberg_namespace_properties (catalog_name, namespace, property_key, property_value) "
                "VALUES ('lakesession', 'v1.2', 'exists', 'true')"
            )
        )
    with pytest.raises(RuntimeError, match="cannot downgrade below 0004"), engine.begin() as conn:
        command.downgrade(migrations.config(conn), "0003")
    assert migrations.current(engine) == migrations.head()
    engine.dispose()
