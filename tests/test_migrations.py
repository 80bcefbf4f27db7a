"""Versioned schema (Alembic): from an empty database, from a database made by ``create_all`` before
migrations existed (adopted with its data), models and migrations never drift — on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest
from pyiceberg.catalog.sql import SqlCatalogBaseTable
from sqlalchemy import MetaData, create_engine, inspect, text

from lakesession.reference import migrations, start, store
from lakesession.reference.idp import _authcode as idp_authcode
from lakesession.reference.idp import _state as idp_state

from ._pg import new_database

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
        conn.execute(
            text("INSERT INTO ls_principals (name, type, created_at) VALUES ('alice', 'user', :t)"), {"t": now}
        )
        conn.execute(text("INSERT INTO ls_roles (name, created_at) VALUES ('readers', :t)"), {"t": now})
        conn.execute(text("INSERT INTO ls_role_members (role, principal) VALUES ('readers', 'alice')"))
        conn.execute(
            text(
                "INSERT INTO ls_grants (role, privilege, securable, created_at) "
                "VALUES ('readers', 'NAMESPACE_READ_PROPERTIES', 'namespace legacy', :t)"
            ),
            {"t": now},
        )
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
