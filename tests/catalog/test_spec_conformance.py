"""Every response of a broad, realistic workload conforms to the official Iceberg REST spec.

A catalog of its own (module-scoped) is served through ``SpecRecorder``; pyiceberg's
RestCatalog and raw httpx drive namespaces, tables (create, stage-create, append,
overwrite, schema evolution, properties, rename, register, drop), views and the error
paths (400, 401, 403, 404, 409). Then each recorded ``/v1`` response is validated with
openapi-core against the spec shipped in the package.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import (
    ForbiddenError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NoSuchNamespaceError,
    NoSuchTableError,
    NoSuchViewError,
    RESTError,
    TableAlreadyExistsError,
)
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform, TruncateTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog
from tests.spec_validation import SpecRecorder, validate_exchange

# one worker runs the whole module under pytest-xdist: its last tests validate what the earlier ones recorded
pytestmark = pytest.mark.xdist_group("spec_conformance")

os.environ.setdefault("PYICEBERG_DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE", "true")

P = "/v1/lakesession"
SEP = "%1F"

POLICY = (
    Policy()
    .user("nogrants", "nogrants-secret-1")
    .user("reader", "reader-secret-1", role="readers")
    .grant_all("readers", ["TABLE_READ_DATA", "TABLE_LIST"], "namespace conf")
)

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "customer", StringType(), required=False),
    NestedField(3, "amount", DoubleType(), required=False),
    identifier_field_ids=[1],
)
ROWS = pa.table(
    {
        "id": pa.array([1, 2, 3], pa.int64()),
        "customer": ["ann", "ben", None],
        "amount": [1.5, 2.5, None],
    },
    schema=pa.schema([("id", pa.int64(), False), ("customer", pa.string()), ("amount", pa.float64())]),
)


@pytest.fixture(scope="module")
def recorder() -> SpecRecorder:
    return SpecRecorder()


@pytest.fixture(scope="module")
def handle(recorder: SpecRecorder, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(POLICY, data_dir=tmp_path_factory.mktemp("conformance"), wrap_app=recorder.wrap) as h:
        yield h


def _catalog(h: ReferenceCatalog, client_id: str, secret: str) -> RestCatalog:
    return RestCatalog(
        f"conf-{client_id}",
        uri=h.uri,
        warehouse="lakesession",
        credential=f"{client_id}:{secret}",
        **{"oauth2-server-uri": f"{h.issuer_uri}/token"},
    )


@pytest.fixture(scope="module")
def admin(handle: ReferenceCatalog) -> RestCatalog:
    c = handle.admin_credentials
    return _catalog(handle, c.client_id, c.client_secret)


@pytest.fixture(scope="module")
def http(handle: ReferenceCatalog) -> Iterator[httpx.Client]:
    token = handle.admin.token_for("admin")
    with httpx.Client(base_url=handle.uri, headers={"Authorization": f"Bearer {token}"}, timeout=30) as client:
        yield client


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:6]}"


# ------------------------------------------------------------------------------- the workload


def test_config(http: httpx.Client) -> None:
    r = http.get("/v1/config", params={"warehouse": "lakesession"})
    assert r.status_code == 200
    cfg = r.json()
    assert cfg["overrides"]["prefix"] == "lakesession"
    assert "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}" in cfg["endpoints"]
    assert http.get("/v1/config").status_code == 200
    assert http.get("/v1/config", params={"warehouse": "nope"}).status_code in (400, 404)
    assert http.get("/v1/config", headers={"Authorization": ""}).status_code == 401


def test_oauth_tokens_endpoint(handle: ReferenceCatalog) -> None:
    c = handle.admin_credentials
    url = f"{handle.uri}/v1/oauth/tokens"
    ok = httpx.post(
        url,
        data={
            "grant_type": "client_credentials",
            "client_id": c.client_id,
            "client_secret": c.client_secret,
            "scope": "catalog",
        },
    )
    assert ok.status_code == 200 and ok.json()["token_type"].lower() == "bearer"
    bad = httpx.post(
        url,
        data={
            "grant_type": "client_credentials",
            "client_id": c.client_id,
            "client_secret": "wrong",
            "scope": "catalog",
        },
    )
    assert bad.status_code in (400, 401) and "error" in bad.json()
    missing = httpx.post(url, data={"client_id": c.client_id})
    assert missing.status_code == 400


def test_namespaces(admin: RestCatalog, http: httpx.Client) -> None:
    admin.create_namespace("conf", {"owner": "data-eng", "comment": "conformance"})
    admin.create_namespace(("conf", "sub"))
    admin.create_namespace(("conf", "sub", "deep"), {"k": "v"})
    admin.create_namespace("other")
    assert ("conf",) in admin.list_namespaces()
    assert admin.list_namespaces("conf") == [("conf", "sub")]
    assert admin.list_namespaces(("conf", "sub")) == [("conf", "sub", "deep")]
    assert admin.load_namespace_properties("conf")["owner"] == "data-eng"
    assert admin.load_namespace_properties(("conf", "sub", "deep")) == {"k": "v"}
    assert admin.namespace_exists(("conf", "sub"))
    assert not admin.namespace_exists("absent")
    summary = admin.update_namespace_properties("conf", removals={"comment", "never-set"}, updates={"tier": "gold"})
    assert summary.updated == ["tier"] and summary.removed == ["comment"] and summary.missing == ["never-set"]

    with pytest.raises(NamespaceAlreadyExistsError):
        admin.create_namespace("conf")
    with pytest.raises(NoSuchNamespaceError):
        admin.load_namespace_properties("absent")
    with pytest.raises(NoSuchNamespaceError):
        admin.list_namespaces("absent")
    with pytest.raises(NoSuchNamespaceError):
        admin.drop_namespace("absent")
    with pytest.raises((RESTError, NoSuchNamespaceError)) as missing_parent:
        admin.create_namespace(("absent", "child"))  # the spec documents 400 (not 404) for createNamespace
    assert "absent" in str(missing_parent.value)
    with pytest.raises(NamespaceNotEmptyError):
        admin.drop_namespace(("conf", "sub"))

    # pagination, raw
    for i in range(3):
        admin.create_namespace(("other", f"p{i}"))
    page = http.get(f"{P}/namespaces", params={"parent": "other", "pageSize": 2}).json()
    assert len(page["namespaces"]) == 2 and page["next-page-token"]
    rest = http.get(f"{P}/namespaces", params={"parent": "other", "pageSize": 2, "pageToken": page["next-page-token"]})
    assert rest.json()["namespaces"] == [["other", "p2"]] and "next-page-token" not in rest.json()
    assert http.get(f"{P}/namespaces", params={"pageToken": ""}).status_code == 200

    # drop a namespace (leaf), check HEAD on it
    admin.create_namespace(("other", "gone"))
    admin.drop_namespace(("other", "gone"))
    assert http.head(f"{P}/namespaces/other{SEP}gone").status_code == 404
    assert http.head(f"{P}/namespaces/other").status_code == 204


def test_tables_lifecycle(admin: RestCatalog, http: httpx.Client) -> None:
    order = SortOrder(SortField(source_id=1))
    ident = ("conf", "sub", "orders")
    # unpartitioned: pyiceberg 0.12 needs the optional pyiceberg-core for partitioned writes
    t = admin.create_table(ident, SCHEMA, sort_order=order, properties={"owner": "etl"})
    t.append(ROWS)
    t.append(ROWS)
    t.overwrite(ROWS)
    assert admin.load_table(ident).scan().to_arrow().num_rows == 3

    # schema evolution
    with t.update_schema() as upd:
        upd.add_column("note", StringType())
        upd.rename_column("amount", "total")
    t = admin.load_table(ident)
    assert [f.name for f in t.schema().fields] == ["id", "customer", "total", "note"]
    with t.transaction() as tx:
        tx.set_properties(colour="blue")
        tx.remove_properties("owner")
    t = admin.load_table(ident)
    assert t.properties["colour"] == "blue" and "owner" not in t.properties
    evolved = pa.table(
        {"id": pa.array([4], pa.int64()), "customer": ["dan"], "total": [9.0], "note": ["hi"]},
        schema=pa.schema(
            [("id", pa.int64(), False), ("customer", pa.string()), ("total", pa.float64()), ("note", pa.string())]
        ),
    )
    t.append(evolved)
    with t.manage_snapshots() as ms:
        ms.create_tag(t.metadata.current_snapshot_id, "v1")
        ms.create_branch(t.metadata.current_snapshot_id, "audit")

    # partitioned table (no writes), partition evolution
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="customer"))
    parted = admin.create_table(("conf", "parted"), SCHEMA, partition_spec=spec)
    with parted.update_spec() as us:
        us.add_field("id", TruncateTransform(10), "id_trunc")
    assert len(admin.load_table(("conf", "parted")).spec().fields) == 2

    assert admin.table_exists(ident)
    assert not admin.table_exists(("conf", "sub", "absent"))
    assert ident in admin.list_tables(("conf", "sub"))

    path = f"{P}/namespaces/conf{SEP}sub/tables/orders"
    assert http.get(path, params={"snapshots": "refs"}).status_code == 200
    assert http.get(path, params={"snapshots": "all"}).status_code == 200
    assert http.get(path, params={"snapshots": "bogus"}).status_code == 400

    # metrics report (what Iceberg Java posts after a scan)
    report = {
        "report-type": "scan-report",
        "table-name": "conf.sub.orders",
        "snapshot-id": t.metadata.current_snapshot_id,
        "filter": True,
        "schema-id": t.schema().schema_id,
        "projected-field-ids": [1, 2],
        "projected-field-names": ["id", "customer"],
        "metrics": {"total-planning-duration": {"count": 1, "time-unit": "nanoseconds", "total-duration": 2644235116}},
    }
    assert http.post(f"{path}/metrics", json=report).status_code == 204
    assert http.post(f"{P}/namespaces/conf/tables/absent/metrics", json=report).status_code == 404

    # conflicts and missing tables
    with pytest.raises(TableAlreadyExistsError):
        admin.create_table(ident, SCHEMA)
    with pytest.raises(NoSuchTableError):
        admin.load_table(("conf", "absent"))
    with pytest.raises(NoSuchTableError):
        admin.drop_table(("conf", "absent"))
    with pytest.raises(NoSuchNamespaceError):
        admin.create_table(("absent", "t"), SCHEMA)
    with pytest.raises(NoSuchNamespaceError):
        admin.list_tables("absent")

    # a stale writer loses the optimistic race (pyiceberg retries it: 409, then success)
    a = admin.load_table(ident)
    b = admin.load_table(ident)
    a.append(evolved)
    b.append(evolved)
    stale = http.post(
        path,
        json={
            "identifier": {"namespace": ["conf", "sub"], "name": "orders"},
            "requirements": [
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": a.metadata.current_snapshot_id}
            ],
            "updates": [{"action": "set-properties", "updates": {"late": "yes"}}],
        },
    )
    assert stale.status_code == 409 and stale.json()["error"]["type"] == "CommitFailedException", stale.text


def test_stage_create(admin: RestCatalog) -> None:
    ident = ("conf", "staged")
    with admin.create_table_transaction(ident, SCHEMA, properties={"stage": "yes"}) as tx:
        tx.append(ROWS) if hasattr(tx, "append") else None
        tx.set_properties(extra="1")
    t = admin.load_table(ident)
    assert t.properties["extra"] == "1"
    assert t.scan().to_arrow().num_rows in (0, 3)


def test_rename_register_drop(admin: RestCatalog, http: httpx.Client) -> None:
    src = ("conf", uniq("src"))
    t = admin.create_table(src, SCHEMA)
    t.append(ROWS)
    dst = ("other", uniq("dst"))
    admin.rename_table(src, dst)
    assert admin.table_exists(dst) and not admin.table_exists(src)
    with pytest.raises(NoSuchTableError):
        admin.rename_table(src, ("other", "whatever"))
    other = admin.create_table(("other", uniq("occupied")), SCHEMA)
    with pytest.raises(TableAlreadyExistsError):
        admin.rename_table(dst, other.name())

    loc = admin.load_table(dst).metadata_location
    admin.drop_table(dst)  # keep the files
    registered = admin.register_table(("conf", uniq("again")), loc)
    assert registered.scan().to_arrow().num_rows == 3
    with pytest.raises(TableAlreadyExistsError):
        admin.register_table(registered.name(), loc)
    bad = http.post(
        f"{P}/namespaces/conf/register",
        json={"name": uniq("bad"), "metadata-location": "file:///nonexistent/v1.metadata.json"},
    )
    assert bad.status_code == 400
    admin.purge_table(registered.name())
    assert not admin.table_exists(registered.name())


def test_views(admin: RestCatalog, http: httpx.Client) -> None:
    from pyiceberg.view.metadata import SQLViewRepresentation, ViewRepresentation, ViewVersion

    version = ViewVersion(
        version_id=1,
        schema_id=0,
        timestamp_ms=int(time.time() * 1000),
        summary={"engine-name": "pyiceberg"},
        default_namespace=("conf",),
        representations=[ViewRepresentation(SQLViewRepresentation(type="sql", sql="SELECT 1 AS id", dialect="spark"))],
    )
    view_schema = Schema(NestedField(1, "id", LongType(), required=False))
    ident = ("conf", "recent")
    admin.create_view(ident, view_schema, version, properties={"comment": "a view"})
    assert admin.view_exists(ident)
    assert not admin.view_exists(("conf", "absent"))
    assert ident in admin.list_views("conf")
    loaded = http.get(f"{P}/namespaces/conf/views/recent")
    assert loaded.status_code == 200
    body = loaded.json()

    # replace: a new version (raw, pyiceberg 0.12 has no view commits)
    new_version = {
        **body["metadata"]["versions"][0],
        "version-id": 2,
        "timestamp-ms": int(time.time() * 1000),
        "representations": [{"type": "sql", "sql": "SELECT 2 AS id", "dialect": "spark"}],
    }
    replaced = http.post(
        f"{P}/namespaces/conf/views/recent",
        json={
            "requirements": [{"type": "assert-view-uuid", "uuid": body["metadata"]["view-uuid"]}],
            "updates": [
                {"action": "add-view-version", "view-version": new_version},
                {"action": "set-current-view-version", "view-version-id": -1},
                {"action": "set-properties", "updates": {"owner": "bi"}},
            ],
        },
    )
    assert replaced.status_code == 200, replaced.text
    stale = http.post(
        f"{P}/namespaces/conf/views/recent",
        json={"requirements": [{"type": "assert-view-uuid", "uuid": str(uuid.uuid4())}], "updates": []},
    )
    assert stale.status_code == 409

    renamed = http.post(
        f"{P}/views/rename",
        json={
            "source": {"namespace": ["conf"], "name": "recent"},
            "destination": {"namespace": ["other"], "name": "recent2"},
        },
    )
    assert renamed.status_code == 204
    assert http.get(f"{P}/namespaces/conf/views/recent").status_code == 404
    with pytest.raises(NoSuchViewError):
        admin.load_view(("conf", "recent"))
    with pytest.raises(NoSuchViewError):
        admin.drop_view(("conf", "recent"))
    # a view and a table cannot share a name
    with pytest.raises(Exception):
        admin.create_table(("other", "recent2"), SCHEMA)
    admin.drop_view(("other", "recent2"))
    assert http.head(f"{P}/namespaces/other/views/recent2").status_code == 404


def test_forbidden_and_unauthenticated(handle: ReferenceCatalog, admin: RestCatalog) -> None:
    nogrants = _catalog(handle, "nogrants", "nogrants-secret-1")
    with pytest.raises(ForbiddenError):
        nogrants.list_namespaces()
    with pytest.raises(ForbiddenError):
        nogrants.create_namespace("not_mine")
    with pytest.raises(ForbiddenError):
        nogrants.load_table(("conf", "sub", "orders"))
    with pytest.raises(ForbiddenError):
        nogrants.list_tables("conf")
    with pytest.raises(ForbiddenError):
        nogrants.drop_table(("conf", "sub", "orders"))

    shared = admin.create_table(("conf", uniq("shared")), SCHEMA)
    shared.append(ROWS)
    reader = _catalog(handle, "reader", "reader-secret-1")
    t = reader.load_table(shared.name())
    assert t.scan().to_arrow().num_rows == 3
    with pytest.raises(ForbiddenError):
        t.append(ROWS)
    with pytest.raises(ForbiddenError):
        reader.drop_table(shared.name())
    with pytest.raises(ForbiddenError):
        reader.update_namespace_properties("conf", updates={"x": "y"})

    token = handle.admin.token_for("nogrants")
    with httpx.Client(base_url=handle.uri, headers={"Authorization": f"Bearer {token}"}) as c:
        assert c.head(f"{P}/namespaces/conf").status_code == 403
        assert c.head(f"{P}/namespaces/conf{SEP}sub/tables/orders").status_code == 403
        assert c.get(f"{P}/namespaces/conf/views").status_code == 403
        assert (
            c.post(
                f"{P}/tables/rename",
                json={
                    "source": {"namespace": ["conf"], "name": "a"},
                    "destination": {"namespace": ["conf"], "name": "b"},
                },
            ).status_code
            == 403
        )
    for headers in ({}, {"Authorization": "Bearer not-a-jwt"}, {"Authorization": "Basic abc"}):
        r = httpx.get(f"{handle.uri}{P}/namespaces", headers=headers)
        assert r.status_code == 401, r.text
    expired = handle.admin.token_for("admin", ttl=-120)
    assert httpx.get(f"{handle.uri}{P}/namespaces", headers={"Authorization": f"Bearer {expired}"}).status_code == 401


MALFORMED: list[tuple[str, str, Any]] = [
    ("POST", f"{P}/namespaces", b"{"),
    ("POST", f"{P}/namespaces", b"[]"),
    ("POST", f"{P}/namespaces", {"namespace": "not-a-list"}),
    ("POST", f"{P}/namespaces", {"namespace": []}),
    ("POST", f"{P}/namespaces", {"namespace": ["a/b"]}),
    ("POST", f"{P}/namespaces", {"namespace": ["ok"], "properties": {"k": 1}}),
    ("POST", f"{P}/namespaces", b""),
    ("POST", f"{P}/namespaces/conf/properties", {"updates": {"a": "1"}, "removals": ["a"]}),
    ("POST", f"{P}/namespaces/conf/properties", {"updates": ["not", "a", "map"]}),
    ("POST", f"{P}/namespaces/conf/tables", {"name": "t"}),
    ("POST", f"{P}/namespaces/conf/tables", {"name": "t", "schema": {"type": "struct", "fields": "x"}}),
    ("POST", f"{P}/namespaces/conf/tables", b"not json"),
    ("POST", f"{P}/namespaces/conf{SEP}sub/tables/orders", {"updates": [{"action": "no-such-action"}]}),
    ("POST", f"{P}/namespaces/conf{SEP}sub/tables/orders", {"requirements": "x"}),
    ("POST", f"{P}/namespaces/conf/register", {"name": "x"}),
    ("POST", f"{P}/tables/rename", {"source": {"namespace": ["conf"]}}),
    ("POST", f"{P}/views/rename", {"source": "x", "destination": "y"}),
    ("POST", f"{P}/namespaces/conf/views", {"name": "v"}),
    ("POST", f"{P}/namespaces/conf/tables/x/metrics", {"no": "report-type"}),
    ("GET", f"{P}/namespaces?pageSize=0", None),
    ("GET", f"{P}/namespaces?pageSize=abc", None),
    ("GET", f"{P}/namespaces?pageToken=%%%", None),
    ("GET", f"{P}/namespaces/conf/tables?pageSize=-1", None),
    ("GET", f"{P}/namespaces/%2E%2E", None),
    ("GET", f"{P}/namespaces/conf{SEP}{SEP}x/tables", None),
]


@pytest.mark.parametrize(("method", "path", "body"), MALFORMED, ids=lambda v: v if isinstance(v, str) else None)
def test_malformed_requests_are_400(http: httpx.Client, method: str, path: str, body: Any) -> None:
    content = body if isinstance(body, bytes) else (json.dumps(body).encode() if body is not None else None)
    r = http.request(method, path, content=content, headers={"Content-Type": "application/json"})
    assert r.status_code in (400, 422), (r.status_code, r.text)
    err = r.json()["error"]
    assert err["code"] == r.status_code and err["type"] and err["message"]


def test_unknown_prefix_and_routes(http: httpx.Client) -> None:
    assert http.get("/v1/elsewhere/namespaces").status_code == 404
    assert http.get(f"{P}/namespaces/conf/tables/absent").status_code == 404
    assert http.head(f"{P}/namespaces/conf/tables/absent").status_code == 404
    assert http.get(f"{P}/namespaces/conf/views/absent").status_code == 404


def test_drop_everything(admin: RestCatalog) -> None:
    """Empty the catalog bottom-up: drops and their 409s on non-empty namespaces."""
    with pytest.raises(NamespaceNotEmptyError):
        admin.drop_namespace("conf")
    for ns in sorted({("conf",), ("other",)}):
        stack = [ns]
        order: list[tuple[str, ...]] = []
        while stack:
            cur = stack.pop()
            order.append(cur)
            stack.extend(admin.list_namespaces(cur))
        for n in reversed(order):
            for tbl in admin.list_tables(n):
                admin.drop_table(tbl)
            for view in admin.list_views(n):
                admin.drop_view(view)
            admin.drop_namespace(n)
    assert admin.list_namespaces() == []


# ------------------------------------------------------------------------------- the verdict


def test_every_response_conforms_to_the_spec(recorder: SpecRecorder) -> None:
    errors = recorder.validate_all()
    assert errors == [], f"{len(errors)} of {recorder.recorded} responses violate the spec:\n" + "\n".join(errors)
    statuses = {ex.status for ex in recorder.exchanges}
    assert recorder.recorded > 150, recorder.recorded
    assert {200, 204, 400, 401, 403, 404, 409} <= statuses, statuses


def test_the_validator_catches_violations(recorder: SpecRecorder) -> None:
    """A doctored copy of a good response must fail: the verdict above is not vacuous."""
    from dataclasses import replace

    load = next(ex for ex in recorder.exchanges if ex.method == "GET" and "/tables/" in ex.path and ex.status == 200)
    body = json.loads(load.body)
    del body["metadata"]["format-version"]
    errors = validate_exchange(replace(load, body=json.dumps(body).encode()))
    assert errors and "format-version" in errors[0] and load.path in errors[0]
    wrong_error = replace(load, status=404, body=b'{"error": {"message": "x"}}')
    assert validate_exchange(wrong_error)
    undocumented = replace(load, status=418, body=b'{"error": {"message": "x", "type": "T", "code": 418}}')
    assert validate_exchange(undocumented)


def test_recorder_is_transparent_and_streaming_safe() -> None:
    """Chunked bodies are recorded whole, messages pass through unchanged, other paths are ignored."""
    import asyncio

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        for part in (b'{"namespaces": [', b'["a"], ["b"]', b"]}"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    rec = SpecRecorder(catalog_prefix="lakesession")
    wrapped = rec.wrap(app)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    for path in ("/v1/lakesession/namespaces", "/healthz"):
        scope = {
            "type": "http",
            "method": "GET",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": [(b"authorization", b"Bearer x")],
        }
        asyncio.run(wrapped(scope, receive, send))
    assert len(sent) == 10 and sent[1]["body"] == b'{"namespaces": ['
    assert rec.recorded == 1
    (ex,) = rec.exchanges
    assert ex.body == b'{"namespaces": [["a"], ["b"]]}' and ex.complete
    assert rec.validate_all() == []
