"""Namespace levels containing '.' (the spec allows any level; ``["a.b"]`` is not ``["a", "b"]``).

Over HTTP (``%1F`` between levels in paths, ``parent=`` listing and paging), with pyiceberg's own
REST client, and attacked: a table in ``["a.b"]`` and one in ``["a", "b"]`` never share storage
(default locations differ; claiming the other's is refused; vended credentials of one are denied
on the other's S3 keys by the emulator), and a grant on ``a`` does not reach ``a.b``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.types import LongType, NestedField, StringType

from lakesession.reference import ReferenceCatalog, nskeys
from lakesession.reference.authz import Securable
from lakesession.reference.errors import BadRequest
from lakesession.reference.viewsecurity import parse_referenced_by
from tests.conftest import bearer, rest_catalog
from tests.factories import Policy, make_catalog, vended_catalog, vended_s3_client

P = "/v1/lakesession"
SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "s", StringType(), required=False))
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "s": ["x", "y", "z"]})


def path(*levels: str) -> str:
    """A namespace in a URL path: each level percent-encoded, joined with %1F."""
    return "%1F".join(quote(level, safe="") for level in levels)


# ---------------------------------------------------------------- unit: keys, paths, securables
def test_keys_and_paths_are_unambiguous() -> None:
    assert nskeys.key(("a.b",)) != nskeys.key(("a", "b"))
    assert nskeys.from_key(nskeys.key(("a.b", "c"))) == ("a.b", "c")
    assert nskeys.from_key("") == ()
    segs = {nskeys.path_segment(ns) for ns in [("a.b",), ("a", "b"), ("a%2Eb",), ("a", "b", "c"), ("a.b.c",)]}
    assert len(segs) == 5
    assert nskeys.path_segment(("sales", "eu")) == "sales.eu"  # unchanged for dot-free levels
    assert nskeys.path_segment(("a.b",)) == "a%2Eb"


@pytest.mark.parametrize("level", ["", " ", ".", "..", "a/b", "a\x1fb", "a\x01", " a", "a ", "x" * 256])
def test_bad_levels_are_refused(level: str) -> None:
    with pytest.raises(BadRequest):
        nskeys.check_level(level)


@pytest.mark.parametrize("level", ["a.b", ".hidden", "v1.2.3", "a..b", "[x", "é.t"])
def test_dotted_levels_are_fine(level: str) -> None:
    assert nskeys.check_level(level) == level


@pytest.mark.parametrize(
    "sec",
    [
        Securable.namespace(("a.b",)),
        Securable.namespace(("a", "b")),
        Securable.table(("a.b", "c"), "t"),
        Securable.table(("sales",), "my.table"),
        Securable.view(("[x",), "v"),
        Securable.table(("sales",), "orders"),
    ],
)
def test_securable_text_round_trips(sec: Securable) -> None:
    assert Securable.parse(str(sec)) == sec


def test_securable_text_keeps_the_dotted_form_for_dot_free_names() -> None:
    assert str(Securable.table(("sales", "eu"), "orders")) == "table sales.eu.orders"
    assert Securable.parse('namespace ["a.b"]') == Securable.namespace(("a.b",))
    assert not Securable.namespace(("a",)).covers(Securable.table(("a.b",), "t"))
    assert Securable.namespace(("a",)).covers(Securable.table(("a", "b"), "t"))
    with pytest.raises(BadRequest):
        Securable.parse('table ["a.b"')


def test_messages_never_show_a_stored_key() -> None:
    from lakesession.reference.errors import CommitFailed

    # pyiceberg words its conflicts with the namespace as stored ("a\x1fb"): shown as "a.b"
    e = CommitFailed("Table has been updated by another process: " + nskeys.key(("a", "b")) + ".t")
    assert e.message.endswith("process: a.b.t") and "\x1f" not in str(e)


def test_referenced_by_accepts_dotted_levels() -> None:
    assert parse_referenced_by("a.b%1Fv,x%1Fy.z%1Fw") == [(("a.b",), "v"), (("x", "y.z"), "w")]
    with pytest.raises(BadRequest):
        parse_referenced_by("..%1Fv")


def test_children_of_a_namespace_are_an_index_range(tmp_path: Path) -> None:
    """``parent=`` listing and the emptiness check scan the primary key's range, not the table."""
    from pyiceberg.catalog.sql import IcebergNamespaceProperties as NsProps
    from sqlalchemy import select, text
    from sqlalchemy.dialects import postgresql

    from lakesession.reference import store

    t = NsProps.__table__
    engine = store.make_engine(store.sqlite_url(tmp_path / "c.db"))
    try:
        q = select(t.c.namespace).where(
            t.c.catalog_name == "lakesession", nskeys.children_range(t.c.namespace, ("a.b",), "sqlite")
        )
        sql = str(q.compile(engine, compile_kwargs={"literal_binds": True}))
        with engine.connect() as conn:
            plan = " ".join(str(r[-1]) for r in conn.execute(text("EXPLAIN QUERY PLAN " + sql)))
        assert plan.startswith("SEARCH") and "INDEX" in plan and "namespace>" in plan, plan
    finally:
        engine.dispose()
    pg = select(t.c.namespace).where(nskeys.children_range(t.c.namespace, ("a",), "postgresql"))
    assert 'COLLATE "C"' in str(pg.compile(dialect=postgresql.dialect()))  # byte order whatever the database's


# ---------------------------------------------------------------- HTTP (shared catalog)
def test_dotted_levels_over_http(catalog: ReferenceCatalog, http: httpx.Client) -> None:
    h = bearer(catalog, "etl")
    for ns in (["dl.x"], ["dl.x", "c.d"], ["dl"], ["dl", "x"], ["dl.x", "e"]):
        r = http.post(f"{P}/namespaces", json={"namespace": ns, "properties": {"k": ".".join(ns)}}, headers=h)
        assert r.status_code == 200, r.text
        assert r.json()["namespace"] == ns
    assert http.post(f"{P}/namespaces", json={"namespace": ["dl.x"]}, headers=h).status_code == 409
    top = http.get(f"{P}/namespaces", headers=h).json()["namespaces"]
    assert ["dl.x"] in top and ["dl"] in top and ["dl", "x"] not in top
    assert http.get(f"{P}/namespaces", params={"parent": "dl.x"}, headers=h).json()["namespaces"] == [
        ["dl.x", "c.d"],
        ["dl.x", "e"],
    ]
    assert http.get(f"{P}/namespaces", params={"parent": "dl"}, headers=h).json()["namespaces"] == [["dl", "x"]]
    assert http.get(f"{P}/namespaces", params={"parent": "dl\x1fx"}, headers=h).json()["namespaces"] == []
    # paging through the children of a dotted parent
    first = http.get(f"{P}/namespaces", params={"parent": "dl.x", "pageSize": 1}, headers=h).json()
    assert first["namespaces"] == [["dl.x", "c.d"]]
    rest = http.get(
        f"{P}/namespaces", params={"parent": "dl.x", "pageSize": 1, "pageToken": first["next-page-token"]}, headers=h
    ).json()
    assert rest["namespaces"] == [["dl.x", "e"]]
    r = http.get(f"{P}/namespaces/{path('dl.x', 'c.d')}", headers=h)
    assert r.status_code == 200 and r.json() == {"namespace": ["dl.x", "c.d"], "properties": {"k": "dl.x.c.d"}}
    assert http.get(f"{P}/namespaces/{path('dl', 'x', 'c.d')}", headers=h).status_code == 404
    assert http.head(f"{P}/namespaces/{path('dl.x')}", headers=h).status_code == 204

    # tables: ["dl.x", "c.d"] and ["dl", "x"] each get their own
    tables = f"{P}/namespaces/{path('dl.x', 'c.d')}/tables"
    r = http.post(tables, json={"name": "t", "schema": SCHEMA_JSON}, headers=h)
    assert r.status_code == 200, r.text
    r2 = http.post(f"{P}/namespaces/{path('dl', 'x')}/tables", json={"name": "t", "schema": SCHEMA_JSON}, headers=h)
    assert r2.status_code == 200, r2.text
    assert r.json()["metadata"]["location"] != r2.json()["metadata"]["location"]
    assert http.get(tables, headers=h).json()["identifiers"] == [{"namespace": ["dl.x", "c.d"], "name": "t"}]
    assert http.get(f"{tables}/t", headers=h).status_code == 200
    assert http.get(f"{P}/namespaces/{path('dl.x')}/tables/t", headers=h).status_code == 404
    # a commit, then a rename across the dotted boundary
    up = {"action": "set-properties", "updates": {"owner": "dots"}}
    r = http.post(f"{tables}/t", json={"requirements": [], "updates": [up]}, headers=h)
    assert r.status_code == 200 and r.json()["metadata"]["properties"]["owner"] == "dots", r.text
    ren = {"source": {"namespace": ["dl.x", "c.d"], "name": "t"}, "destination": {"namespace": ["dl.x"], "name": "t"}}
    assert http.post(f"{P}/tables/rename", json=ren, headers=h).status_code == 204
    assert http.get(f"{P}/namespaces/{path('dl.x')}/tables/t", headers=h).json()["metadata"]["properties"] == {
        "owner": "dots"
    }
    # drop: "dl.x" is not empty (a table and child namespaces), "dl" is not empty ("dl","x" and its table)
    assert http.delete(f"{P}/namespaces/{path('dl.x')}", headers=h).status_code == 409
    assert http.delete(f"{P}/namespaces/{path('dl.x')}/tables/t", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{path('dl.x')}", headers=h).status_code == 409  # children left
    for child in (("dl.x", "c.d"), ("dl.x", "e")):
        assert http.delete(f"{P}/namespaces/{path(*child)}", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{path('dl.x')}", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{path('dl')}", headers=h).status_code == 409  # "dl.x" never counted
    assert http.delete(f"{P}/namespaces/{path('dl', 'x')}/tables/t", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{path('dl', 'x')}", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{path('dl')}", headers=h).status_code == 204


def test_a_dotted_namespace_is_not_a_parent(catalog: ReferenceCatalog, http: httpx.Client) -> None:
    h = bearer(catalog, "etl")
    assert http.post(f"{P}/namespaces", json={"namespace": ["np.q"]}, headers=h).status_code == 200
    # ["np", "q"] needs ["np"], which "np.q" is not
    r = http.post(f"{P}/namespaces", json={"namespace": ["np", "q"]}, headers=h)
    assert r.status_code == 400 and "Parent namespace does not exist" in r.text
    assert http.get(f"{P}/namespaces", params={"parent": "np"}, headers=h).status_code == 404
    assert http.get(f"{P}/namespaces/np/tables", headers=h).status_code == 404
    reg = {"name": "r", "metadata-location": "file:///nowhere/x.metadata.json"}
    assert http.post(f"{P}/namespaces/np/register", json=reg, headers=h).status_code == 404
    assert http.delete(f"{P}/namespaces/{path('np.q')}", headers=h).status_code == 204


def test_pyiceberg_with_a_dotted_namespace_tuple(catalog: ReferenceCatalog) -> None:
    cat = rest_catalog(catalog, "etl", "dotted-pyiceberg")
    cat.create_namespace(("py.a",))
    cat.create_namespace(("py.a", "c"), {"owner": "py"})
    assert ("py.a",) in cat.list_namespaces()
    assert cat.list_namespaces(("py.a",)) == [("py.a", "c")]
    assert cat.load_namespace_properties(("py.a", "c"))["owner"] == "py"
    assert cat.namespace_exists(("py.a", "c")) and not cat.namespace_exists(("py", "a", "c"))
    t = cat.create_table(("py.a", "c", "t"), SCHEMA)
    t.append(ROWS)
    t.append(ROWS)
    assert cat.list_tables(("py.a", "c")) == [("py.a", "c", "t")]
    again = cat.load_table(("py.a", "c", "t"))
    assert again.scan().to_arrow().num_rows == 6
    assert len(again.metadata.snapshots) == 2
    assert cat.table_exists(("py.a", "c", "t")) and not cat.table_exists(("py", "a", "c", "t"))
    cat.update_namespace_properties(("py.a", "c"), removals={"owner"}, updates={"k": "v"})
    assert cat.load_namespace_properties(("py.a", "c")) == {"k": "v"}
    cat.drop_table(("py.a", "c", "t"))
    cat.drop_namespace(("py.a", "c"))
    cat.drop_namespace(("py.a",))
    assert ("py.a",) not in cat.list_namespaces()


# ---------------------------------------------------------------- attacked: storage and grants (S3 emulator)
POLICY = (
    Policy()
    .service("etl", "etl-secret-xyz", role="eng")
    .user("mallory", "mallory-secret-xyz", role="dotters")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all("dotters", ["TABLE_WRITE_DATA", "TABLE_CREATE", "TABLE_LIST"], 'namespace ["a.b"]')
    .grant("dotters", "NAMESPACE_LIST", "catalog")
)
BUCKET = "dots-bucket"
WH = f"s3://{BUCKET}/wh"


@pytest.fixture(scope="module")
def s3cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY, warehouse=WH, s3_emulator=True, credential_ttl=900, data_dir=tmp_path_factory.mktemp("dots")
    ) as handle:
        etl = vended_catalog(handle, "dots-etl", "etl:etl-secret-xyz")
        for ns in (("a",), ("a", "b"), ("a.b",)):
            etl.create_namespace(ns)
        etl.create_table(("a", "b", "t"), SCHEMA).append(ROWS)  # the victim: ["a", "b"].t
        yield handle


def _headers(handle: ReferenceCatalog, who: str) -> dict[str, str]:
    return {**bearer(handle, who), "X-Iceberg-Access-Delegation": "vended-credentials"}


def _s3(handle: ReferenceCatalog, cfg: dict[str, str]) -> Any:
    return vended_s3_client(
        cfg.get("s3.endpoint", handle.s3_emulator.endpoint), cfg, cfg.get("client.region", "us-east-1")
    )


def _victim(handle: ReferenceCatalog) -> str:
    r = httpx.get(f"{handle.uri}{P}/namespaces/{path('a', 'b')}/tables/t", headers=bearer(handle, "etl"))
    return r.json()["metadata"]["location"]


def test_dotted_namespace_never_gets_the_storage_of_its_dot_split_twin(s3cat: ReferenceCatalog) -> None:
    victim = _victim(s3cat)
    assert victim == f"{WH}/a.b/t"  # pyiceberg's layout for ["a", "b"], as before
    tables = f"{s3cat.uri}{P}/namespaces/{path('a.b')}/tables"
    # the attack: a table "t" in ["a.b"] — by default, then by naming the victim's location outright
    own = httpx.post(tables, json={"name": "t", "schema": SCHEMA_JSON}, headers=_headers(s3cat, "mallory"))
    assert own.status_code == 200, own.text
    mine = own.json()["metadata"]["location"]
    assert mine == f"{WH}/a%2Eb/t" and not (mine + "/").startswith(victim + "/")
    for location in (victim, victim + "/data", f"{WH}/a.b"):
        r = httpx.post(
            tables,
            json={"name": "grab", "schema": SCHEMA_JSON, "location": location},
            headers=_headers(s3cat, "mallory"),
        )
        message = r.json()["error"]["message"]  # outside its namespace's home, and owned by another table
        assert r.status_code == 400 and ("owned by another" in message or "its namespace's location" in message), (
            location,
            r.text,
        )
    # the S3 calls mallory's vended credentials would enable on the victim's keys: all denied
    admin = s3cat.s3_emulator.client("s3")
    victim_key = victim.split(f"s3://{BUCKET}/", 1)[1] + "/data/canary.txt"
    admin.put_object(Bucket=BUCKET, Key=victim_key, Body=b"victim data")
    creds = [c["config"] for c in own.json()["storage-credentials"]]
    assert creds
    for cfg in creds:
        s3 = _s3(s3cat, cfg)
        s3.put_object(Bucket=BUCKET, Key=mine.split(f"s3://{BUCKET}/", 1)[1] + "/data/mine.txt", Body=b"ok")
        for call in (
            lambda s3=s3: s3.get_object(Bucket=BUCKET, Key=victim_key),
            lambda s3=s3: s3.list_objects_v2(Bucket=BUCKET, Prefix=victim.split(f"s3://{BUCKET}/", 1)[1] + "/"),
            lambda s3=s3: s3.delete_object(Bucket=BUCKET, Key=victim_key),
        ):
            with pytest.raises(ClientError) as e:
                call()
            assert e.value.response["Error"]["Code"] in ("AccessDenied", "403")
    assert admin.get_object(Bucket=BUCKET, Key=victim_key)["Body"].read() == b"victim data"


def test_a_grant_on_the_dotted_namespace_does_not_reach_its_dot_split_twin(s3cat: ReferenceCatalog) -> None:
    h = _headers(s3cat, "mallory")
    twin = f"{s3cat.uri}{P}/namespaces/{path('a', 'b')}/tables"
    assert httpx.get(f"{twin}/t", headers=h).status_code == 403
    assert httpx.get(twin, headers=h).status_code == 403
    assert httpx.post(twin, json={"name": "m", "schema": SCHEMA_JSON}, headers=h).status_code == 403
    assert httpx.get(f"{s3cat.uri}{P}/namespaces/{path('a.b')}/tables", headers=h).status_code == 200
    # and a grant on ["a"] does not reach ["a.b"]
    s3cat.admin.create_role("a_readers", ["mallory"])
    s3cat.admin.grant("a_readers", "TABLE_READ_DATA", "namespace a")
    try:
        assert httpx.get(f"{twin}/t", headers=h).status_code == 200
        httpx.post(
            f"{s3cat.uri}{P}/namespaces/{path('a.b')}/tables", json={"name": "only", "schema": SCHEMA_JSON}, headers=h
        )
        etl_h = _headers(s3cat, "etl")
        assert httpx.get(f"{s3cat.uri}{P}/namespaces/{path('a.b')}/tables/only", headers=etl_h).status_code == 200
        s3cat.admin.revoke("dotters", "TABLE_WRITE_DATA", 'namespace ["a.b"]')
        r = httpx.get(f"{s3cat.uri}{P}/namespaces/{path('a.b')}/tables/only", headers=h)
        assert r.status_code == 403, r.text  # "namespace a" never covered ["a.b"]
    finally:
        s3cat.admin.grant("dotters", "TABLE_WRITE_DATA", 'namespace ["a.b"]')
        s3cat.admin.revoke("a_readers", "TABLE_READ_DATA", "namespace a")
    grants = {g.as_dict()["on"] for g in s3cat.admin.grants("dotters")}
    assert 'namespace ["a.b"]' in grants


def test_vended_credentials_work_in_a_dotted_namespace(s3cat: ReferenceCatalog) -> None:
    cat = vended_catalog(s3cat, "dots-mallory", "mallory:mallory-secret-xyz")
    t = cat.create_table(("a.b", "written"), SCHEMA)
    t.append(ROWS)
    assert cat.load_table(("a.b", "written")).scan().to_arrow().num_rows == 3
    assert t.metadata.location == f"{WH}/a%2Eb/written"


# ---------------------------------------------------------------- the client: a tuple is the way in
@pytest.mark.parametrize(
    "text,parts",
    [
        ("a", ("a",)),
        ("a.b", ("a", "b")),
        ("`a.b`", ("a.b",)),
        ("x.`a.b`.c", ("x", "a.b", "c")),
        ("`w``x.y`", ("w`x.y",)),
    ],
)
def test_spark_names_unquote(text: str, parts: tuple[str, ...]) -> None:
    from lakesession.catalog._expand import quoted, unquoted

    assert unquoted(text) == parts
    assert unquoted(quoted(parts)) == parts


def test_session_table_takes_a_tuple_for_dotted_levels(catalog: ReferenceCatalog) -> None:
    import lakesession
    from lakesession.catalog._tables import table_name
    from tests.conftest import SECRETS

    etl = rest_catalog(catalog, "etl", "dotted-client-setup")
    for ns in (("cl.a",), ("cl",), ("cl", "a")):
        etl.create_namespace(ns)
    etl.create_table(("cl.a", "t"), SCHEMA).append(ROWS)  # 3 rows
    etl.create_table(("cl", "a", "t"), SCHEMA).append(ROWS.slice(0, 1))  # 1 row: its dot-split twin
    s = lakesession.connect(
        uri=catalog.uri,
        credential=f"etl:{SECRETS['etl']}",
        token_url=f"{catalog.issuer_uri}/token",
        warehouse="lakesession",
    )
    try:
        since = time.time() - 1
        dotted, as_list, as_text = s.table(("cl.a", "t")), s.table(["cl.a", "t"]), s.table("cl.a.t")
        assert isinstance(dotted, Table) and isinstance(as_list, Table) and isinstance(as_text, Table)
        assert dotted.scan().to_arrow().num_rows == 3
        assert as_list.scan().to_arrow().num_rows == 3
        assert as_text.scan().to_arrow().num_rows == 1  # the string form splits on every dot, as before
        assert dotted.refresh().scan().to_arrow().num_rows == 3  # reloads the same (tuple) identifier
        audited = catalog.admin.audit(principal="etl", since=since, action="load_table")
        assert {a.securable for a in audited} >= {'table ["cl.a", "t"]', "table cl.a.t"}
    finally:
        s.close()
    assert table_name(("cl.a", "t")) != table_name(("cl", "a", "t"))
    assert table_name(("sales", "orders")) == "sales.orders"


def test_views_in_a_dotted_namespace(catalog: ReferenceCatalog, http: httpx.Client) -> None:
    from pyiceberg.view.metadata import ViewMetadata, ViewVersion

    from lakesession.reference.viewsql import reads

    cat = rest_catalog(catalog, "etl", "dotted-views")
    cat.create_namespace(("vw.a",))
    cat.create_namespace(("vw",))
    cat.create_namespace(("vw", "a"))
    cat.create_table(("vw.a", "t"), SCHEMA)
    sql = "SELECT * FROM t JOIN `vw.a`.t AS u USING (id)"
    version = ViewVersion.model_validate(
        {
            "version-id": 1,
            "schema-id": 0,
            "timestamp-ms": int(time.time() * 1000),
            "summary": {},
            "default-namespace": ["vw.a"],
            "representations": [{"type": "sql", "sql": sql, "dialect": "spark"}],
        }
    )
    for ns in (("vw.a",), ("vw", "a")):
        cat.create_view((*ns, "v"), SCHEMA, version)
    h = bearer(catalog, "etl")
    dotted = http.get(f"{P}/namespaces/{path('vw.a')}/views/v", headers=h).json()
    twin = http.get(f"{P}/namespaces/{path('vw', 'a')}/views/v", headers=h).json()
    assert dotted["metadata"]["location"] != twin["metadata"]["location"]
    assert dotted["metadata"]["location"].endswith("/vw%2Ea/v") and twin["metadata"]["location"].endswith("/vw.a/v")
    assert http.get(f"{P}/namespaces/{path('vw.a')}/views", headers=h).json()["identifiers"] == [
        {"namespace": ["vw.a"], "name": "v"}
    ]
    # what the view reads, as view security resolves it: both names are the dotted namespace's table
    assert reads(ViewMetadata.model_validate(dotted["metadata"]), "lakesession") == {(("vw.a",), "t")}
    assert cat.list_views(("vw.a",)) == [("vw.a", "v")]
    for ns in (("vw.a",), ("vw", "a")):
        cat.drop_view((*ns, "v"))
    cat.drop_table(("vw.a", "t"))
    for ns in (("vw.a",), ("vw", "a"), ("vw",)):
        cat.drop_namespace(ns)


# ---------------------------------------------------------------- Spark through the gateway (the shared JVM)
@pytest.mark.slow
def test_spark_sql_with_a_dotted_namespace(lake: Any) -> None:
    """Iceberg Java sends the level ``sp.a`` as is (levels joined with %1F); the gateway forwards it raw."""
    spark = lake.spark()
    for ns in ("`sp.a`", "sp", "sp.a"):
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS lake.{ns}")
    spark.sql("CREATE TABLE lake.`sp.a`.t (id BIGINT) USING iceberg")
    spark.sql("CREATE TABLE lake.sp.a.t (id BIGINT) USING iceberg")
    spark.sql("INSERT INTO lake.`sp.a`.t VALUES (1), (2)")
    spark.sql("INSERT INTO lake.sp.a.t VALUES (9)")
    assert [r.id for r in spark.sql("SELECT id FROM lake.`sp.a`.t ORDER BY id").collect()] == [1, 2]
    assert [r.id for r in spark.sql("SELECT id FROM lake.sp.a.t").collect()] == [9]
    assert len(spark.sql("SELECT * FROM lake.`sp.a`.t.snapshots").collect()) == 1
    assert [r.tableName for r in spark.sql("SHOW TABLES IN lake.`sp.a`").collect()] == ["t"]
    table = lake.table(("sp.a", "t"))
    assert isinstance(table, Table) and table.scan().to_arrow().num_rows == 2
    table.append(pa.table({"id": pa.array([3], pa.int64())}))
    assert [r.id for r in spark.sql("SELECT id FROM lake.`sp.a`.t ORDER BY id").collect()] == [1, 2, 3]
    # Spark prints the current namespace backquoted; session.sql() resolves one-part names in it
    from lakesession.catalog._expand import unquoted

    before = (spark.catalog.currentCatalog(), spark.catalog.currentDatabase())
    spark.sql("USE lake.`sp.a`")
    try:
        assert unquoted(spark.catalog.currentDatabase()) == ("sp.a",)
        assert [r.id for r in lake.sql("SELECT id FROM t ORDER BY id").collect()] == [1, 2, 3]
    finally:
        spark.catalog.setCurrentCatalog(before[0])
        if before[1]:  # the Iceberg REST catalog starts in no namespace at all
            spark.catalog.setCurrentDatabase(before[1])
