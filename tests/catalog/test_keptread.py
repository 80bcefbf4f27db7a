"""The catalog's hot reads: a kept connection per statement (``keptread``), the plain loadTable route, uvloop.

What could go wrong with each speed-up and is checked here: a kept connection reading a stale snapshot (it
must see another connection's commit at once), a dead kept connection (the read is retried on a new one),
values spliced into SQL (they must stay bound parameters), the plain loadTable route swallowing HEAD
(tableExists) or dropping its FastAPI twin from the documented endpoints, and the server's loop.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

import httpx
import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, create_engine, insert, select

from lakesession.reference.app import implemented_endpoints
from lakesession.reference.keptread import KeptRead
from lakesession.reference.serving import new_event_loop
from tests.factories import make_catalog

meta = MetaData()
items = Table("items", meta, Column("id", Integer, primary_key=True), Column("ns", String), Column("name", String))
BY_NS = select(items.c.name).where(items.c.ns == bindparam("ns", type_=String), items.c.id > 0).order_by(items.c.id)


def test_a_kept_read_sees_another_connections_commit_at_once(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    meta.create_all(engine)
    read = KeptRead(engine, BY_NS)
    assert read.rows(ns="a") == [] and read.first(ns="a") is None
    with engine.begin() as conn:
        conn.execute(insert(items), [{"id": 1, "ns": "a", "name": "x"}, {"id": 2, "ns": "b", "name": "y"}])
    assert read.rows(ns="a") == [("x",)]  # committed elsewhere: seen by the very next read
    with engine.begin() as conn:
        conn.execute(insert(items).values(id=3, ns="a", name="z"))
    assert read.rows(ns="a") == [("x",), ("z",)]
    engine.dispose()


def test_values_stay_bound_parameters(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    meta.create_all(engine)
    read = KeptRead(engine, BY_NS)
    assert "?" in read.sql and "'" not in read.sql, read.sql  # the literal 0 is bound too
    with engine.begin() as conn:
        conn.execute(insert(items).values(id=1, ns="a", name="x"))
    assert read.rows(ns="a' OR '1'='1") == []  # a quote is data, never SQL
    engine.dispose()


def test_a_dead_kept_connection_is_replaced_and_the_read_answers(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}")
    meta.create_all(engine)
    read = KeptRead(engine, BY_NS)
    with engine.begin() as conn:
        conn.execute(insert(items).values(id=1, ns="a", name="x"))
    assert read.rows(ns="a") == [("x",)]
    dead = read._conn
    dead.driver_connection.close()  # the database closed it under us (a restart, an outage)
    with pytest.raises(sqlite3.ProgrammingError):
        dead.driver_connection.execute("SELECT 1")
    assert read.rows(ns="a") == [("x",)]
    assert read._conn is not dead
    engine.dispose()
    assert read._conn is None  # disposing the engine closes the kept connection with the pool's


def test_an_in_memory_database_is_read_through_the_engine() -> None:
    from sqlalchemy.pool import StaticPool

    engine = create_engine("sqlite://", poolclass=StaticPool, connect_args={"check_same_thread": False})
    meta.create_all(engine)
    read = KeptRead(engine, BY_NS)
    with engine.begin() as conn:
        conn.execute(insert(items).values(id=1, ns="a", name="x"))
    assert read.rows(ns="a") == [("x",)] and read._conn is None


def test_load_table_is_served_by_the_plain_route_and_head_still_asks_table_exists() -> None:
    with make_catalog() as catalog:
        token = catalog.admin.token_for("admin", ttl=600)
        base = f"{catalog.uri}/v1/{catalog.settings.catalog_name}"
        with httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
            assert http.post(f"{base}/namespaces", json={"namespace": ["hot"]}).status_code == 200
            schema = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
            assert http.post(f"{base}/namespaces/hot/tables", json={"name": "t", "schema": schema}).status_code == 200
            first = catalog.app.router.routes[0]
            assert getattr(first, "path", "").endswith("/tables/{table}") and first.methods == {"GET"}
            loaded = http.get(f"{base}/namespaces/hot/tables/t")
            assert loaded.status_code == 200 and loaded.json()["metadata"]["location"]
            refs = http.get(f"{base}/namespaces/hot/tables/t", params={"snapshots": "refs"})
            assert refs.status_code == 200
            bad = http.get(f"{base}/namespaces/hot/tables/t", params={"snapshots": "some"})
            assert bad.status_code == 400 and bad.json()["error"]["type"] == "BadRequestException"
            missing = http.get(f"{base}/namespaces/hot/tables/nope")
            assert missing.status_code == 404 and missing.json()["error"]["type"] == "NoSuchTableException"
            assert http.head(f"{base}/namespaces/hot/tables/t").status_code == 204  # tableExists, not loadTable
            assert http.head(f"{base}/namespaces/hot/tables/nope").status_code == 404
        unauthenticated = httpx.get(f"{base}/namespaces/hot/tables/t", timeout=30)
        assert unauthenticated.status_code == 401
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in implemented_endpoints()


@pytest.mark.skipif(sys.platform == "win32", reason="uvloop is a dependency everywhere but Windows")
def test_the_server_runs_on_uvloop() -> None:
    import uvloop

    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
