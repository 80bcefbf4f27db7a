"""Acceptance of the reference catalog through real clients on loopback (pyiceberg, httpx)."""

from __future__ import annotations

import json
import time
import uuid

import httpx
import pyarrow as pa
import pytest
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from lakesession.reference import ReferenceCatalog
from tests.conftest import BACKENDS, bearer, catalog_on, rest_catalog

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "customer", StringType(), required=False),
)
ROWS = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "customer": ["ann", "ben", None]})
P = "/v1/lakesession"


def uniq(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module", params=BACKENDS)
def catalog(request: pytest.FixtureRequest, catalog: ReferenceCatalog, tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """Every test here runs on the shared SQLite catalog and on one backed by a real PostgreSQL server."""
    yield from catalog_on(request.param, catalog, tmp_path_factory, "catalog")


@pytest.fixture(scope="module")
def http(catalog: ReferenceCatalog):  # type: ignore[no-untyped-def]
    with httpx.Client(base_url=catalog.uri, timeout=30) as client:
        yield client


@pytest.fixture(scope="module")
def orders(catalog):  # type: ignore[no-untyped-def]
    etl = rest_catalog(catalog, "etl")
    if ("sales",) not in etl.list_namespaces():
        etl.create_namespace("sales", {"owner": "etl"})
    table = etl.create_table(("sales", uniq("orders")), SCHEMA)
    table.append(ROWS)
    return table


def test_service_principal_creates_appends_and_reads_back(catalog, orders) -> None:  # type: ignore[no-untyped-def]
    etl = rest_catalog(catalog, "etl")
    got = etl.load_table(orders.name()).scan().to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == [1, 2, 3]
    assert got.column("customer").to_pylist() == ["ann", "ben", None]


def test_reader_reads_but_cannot_append(catalog, orders) -> None:  # type: ignore[no-untyped-def]
    alice = rest_catalog(catalog, "alice")
    t = alice.load_table(orders.name())
    assert t.scan().to_arrow().num_rows >= 3
    with pytest.raises(ForbiddenError, match="TABLE_WRITE_DATA"):
        t.append(ROWS)
    # nothing was lost or added by the refused write
    assert (
        rest_catalog(catalog, "etl").load_table(orders.name()).scan().to_arrow().num_rows
        == t.scan().to_arrow().num_rows
    )


def test_principal_without_grants_is_refused_and_audited(catalog, orders) -> None:  # type: ignore[no-untyped-def]
    bob = rest_catalog(catalog, "bob")
    since = time.time() - 1
    with pytest.raises(ForbiddenError):
        bob.load_table(orders.name())
    records = catalog.admin.audit(principal="bob", since=since, action="load_table")
    assert records, "the denied load must be in the audit log"
    assert records[-1].decision == "deny"
    assert records[-1].securable == f"table {'.'.join(orders.name())}"
    assert records[-1].request_id


def test_denied_load_reveals_nothing(catalog, orders, http) -> None:  # type: ignore[no-untyped-def]
    ns, name = orders.name()
    for target in (name, "no_such_table"):
        r = http.get(f"{P}/namespaces/{ns}/tables/{target}", headers=bearer(catalog, "bob"))
        assert r.status_code == 403
        body = r.json()
        assert body["error"]["type"] == "ForbiddenException" and body["error"]["code"] == 403
        assert "location" not in r.text and "metadata" not in r.text and "file:" not in r.text


def test_missing_or_bad_token_is_401(catalog, http) -> None:  # type: ignore[no-untyped-def]
    assert http.get(f"{P}/namespaces").status_code == 401
    r = http.get(f"{P}/namespaces", headers={"Authorization": "Bearer not-a-jwt"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "NotAuthorizedException"


def test_config_lists_every_implemented_endpoint(catalog, http) -> None:  # type: ignore[no-untyped-def]
    cfg = http.get("/v1/config", params={"warehouse": "lakesession"}, headers=bearer(catalog, "alice")).json()
    assert cfg["overrides"]["prefix"] == "lakesession"
    endpoints = set(cfg["endpoints"])
    for e in [
        "GET /v1/{prefix}/namespaces",
        "POST /v1/{prefix}/namespaces",
        "GET /v1/{prefix}/namespaces/{namespace}",
        "HEAD /v1/{prefix}/namespaces/{namespace}",
        "DELETE /v1/{prefix}/namespaces/{namespace}",
        "POST /v1/{prefix}/namespaces/{namespace}/properties",
        "GET /v1/{prefix}/namespaces/{namespace}/tables",
        "POST /v1/{prefix}/namespaces/{namespace}/tables",
        "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/tables/{table}",
        "POST /v1/{prefix}/tables/rename",
        "POST /v1/{prefix}/namespaces/{namespace}/register",
        "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
        "GET /v1/{prefix}/namespaces/{namespace}/views",
        "POST /v1/{prefix}/namespaces/{namespace}/views",
        "GET /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "DELETE /v1/{prefix}/namespaces/{namespace}/views/{view}",
        "POST /v1/{prefix}/views/rename",
    ]:
        assert e in endpoints, e
    r = http.get("/v1/config", params={"warehouse": "other"}, headers=bearer(catalog, "alice"))
    assert r.status_code == 404


def test_namespaces_nested_pagination_properties_and_drop(catalog, http) -> None:  # type: ignore[no-untyped-def]
    h = bearer(catalog, "etl")
    root = uniq("ns")
    assert (
        http.post(f"{P}/namespaces", json={"namespace": [root], "properties": {"a": "1"}}, headers=h).status_code == 200
    )
    assert (
        http.post(f"{P}/namespaces", json={"namespace": [root]}, headers=h).json()["error"]["type"]
        == "AlreadyExistsException"
    )
    assert http.post(f"{P}/namespaces", json={"namespace": ["missing_parent", "x"]}, headers=h).status_code == 400
    for i in range(5):
        assert http.post(f"{P}/namespaces", json={"namespace": [root, f"c{i}"]}, headers=h).status_code == 200
    seen, token = [], None
    while True:
        params = {"parent": root, "pageSize": 2, **({"pageToken": token} if token else {})}
        page = http.get(f"{P}/namespaces", params=params, headers=h).json()
        seen += [tuple(n) for n in page["namespaces"]]
        token = page.get("next-page-token")
        if not token:
            break
    assert seen == [(root, f"c{i}") for i in range(5)]
    assert http.head(f"{P}/namespaces/{root}%1Fc1", headers=h).status_code == 204
    upd = http.post(
        f"{P}/namespaces/{root}/properties", json={"removals": ["a", "zz"], "updates": {"b": "2"}}, headers=h
    ).json()
    assert upd == {"updated": ["b"], "removed": ["a"], "missing": ["zz"]}
    assert http.get(f"{P}/namespaces/{root}", headers=h).json()["properties"] == {"b": "2"}
    assert (
        http.post(
            f"{P}/namespaces/{root}/properties", json={"removals": ["b"], "updates": {"b": "3"}}, headers=h
        ).status_code
        == 422
    )
    r = http.delete(f"{P}/namespaces/{root}", headers=h)
    assert r.status_code == 409 and r.json()["error"]["type"] == "NamespaceNotEmptyException"
    for i in range(5):
        assert http.delete(f"{P}/namespaces/{root}%1Fc{i}", headers=h).status_code == 204
    assert http.delete(f"{P}/namespaces/{root}", headers=h).status_code == 204
    assert http.head(f"{P}/namespaces/{root}", headers=h).status_code == 404


@pytest.mark.parametrize(
    "method,path,body",
    [
        ("POST", "/namespaces", b"{not json"),
        ("POST", "/namespaces", b"[]"),
        ("POST", "/namespaces", b'{"namespace": "flat"}'),
        ("POST", "/namespaces", b'{"namespace": ["a/b"]}'),
        ("POST", "/namespaces/sales/tables", b'{"name": "t"}'),
        ("POST", "/namespaces/sales/tables", b'{"name": "t", "schema": {"type": "struct", "fields": [{"id": 1}]}}'),
        ("POST", "/namespaces/sales/tables/x", b'{"updates": [{"action": "no-such-update"}]}'),
        ("POST", "/tables/rename", b'{"source": {"namespace": [], "name": "a"}}'),
        ("GET", "/namespaces?pageSize=0", b""),
        ("GET", "/namespaces?pageToken=%%%", b""),
        ("GET", "/namespaces/sales/tables/x?snapshots=some", b""),
    ],
)
def test_client_mistakes_are_400_never_500(catalog, http, method, path, body) -> None:  # type: ignore[no-untyped-def]
    r = http.request(
        method, f"{P}{path}", content=body, headers={**bearer(catalog, "etl"), "Content-Type": "application/json"}
    )
    assert 400 <= r.status_code < 500, r.text
    err = r.json()["error"]
    assert err["code"] == r.status_code and err["type"].endswith("Exception") and err["message"]


def test_unknown_prefix_and_route(catalog, http) -> None:  # type: ignore[no-untyped-def]
    h = bearer(catalog, "etl")
    assert http.get("/v1/nope/namespaces", headers=h).json()["error"]["code"] == 404
    assert http.get("/v1/lakesession/nothing-here", headers=h).json()["error"]["code"] == 404


def test_commit_with_failed_requirement_is_409(catalog, orders, http, caplog) -> None:  # type: ignore[no-untyped-def]
    ns, name = orders.name()
    body = {
        "requirements": [{"type": "assert-table-uuid", "uuid": str(uuid.uuid4())}],
        "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
    }
    r = http.post(f"{P}/namespaces/{ns}/tables/{name}", json=body, headers=bearer(catalog, "etl"))
    assert r.status_code == 409 and r.json()["error"]["type"] == "CommitFailedException"
    # a stale writer gets 409 (pyiceberg then refreshes and retries); no append is lost
    etl = rest_catalog(catalog, "etl")
    t1, t2 = etl.load_table(orders.name()), etl.load_table(orders.name())
    before = t1.scan().to_arrow().num_rows
    t1.append(ROWS)
    t2.append(ROWS)  # stale: asserts the old main snapshot
    assert "Commit failed due to a concurrent update" in caplog.text
    assert etl.load_table(orders.name()).scan().to_arrow().num_rows == before + 6


def test_snapshots_refs_filters_history(catalog, http) -> None:  # type: ignore[no-untyped-def]
    etl = rest_catalog(catalog, "etl")
    t = etl.create_table(("sales", uniq("hist")), SCHEMA)
    for _ in range(3):
        t.append(ROWS)
    ns, name = t.name()
    h = bearer(catalog, "etl")
    full = http.get(f"{P}/namespaces/{ns}/tables/{name}", headers=h).json()["metadata"]
    refs = http.get(f"{P}/namespaces/{ns}/tables/{name}", params={"snapshots": "refs"}, headers=h).json()["metadata"]
    assert len(full["snapshots"]) == 3
    assert [s["snapshot-id"] for s in refs["snapshots"]] == [full["current-snapshot-id"]]


def test_stage_create_then_commit(catalog, http) -> None:  # type: ignore[no-untyped-def]
    etl = rest_catalog(catalog, "etl")
    ident = ("sales", uniq("staged"))
    with etl.create_table_transaction(ident, SCHEMA) as tx:
        tx.set_properties(stage="yes")
    t = etl.load_table(ident)
    assert t.properties["stage"] == "yes"
    staged = http.post(
        f"{P}/namespaces/sales/tables",
        json={"name": uniq("s"), "schema": json.loads(SCHEMA.model_dump_json()), "stage-create": True},
        headers=bearer(catalog, "etl"),
    ).json()
    assert "metadata-location" not in staged and staged["metadata"]["format-version"] == 2


def test_rename_register_metrics_and_purge(catalog, http, tmp_path) -> None:  # type: ignore[no-untyped-def]
    etl = rest_catalog(catalog, "etl")
    src = ("sales", uniq("src"))
    t = etl.create_table(src, SCHEMA)
    t.append(ROWS)
    dst = ("sales", uniq("dst"))
    etl.rename_table(src, dst)
    with pytest.raises(NoSuchTableError):
        etl.load_table(src)
    moved = etl.load_table(dst)
    assert moved.scan().to_arrow().num_rows == 3
    h = bearer(catalog, "etl")
    r = http.post(
        f"{P}/namespaces/sales/tables/{dst[1]}/metrics",
        json={"report-type": "scan-report", "table-name": dst[1]},
        headers=h,
    )
    assert r.status_code == 204
    # drop the original without purge, then register its metadata under a new name (a restore;
    # while the original exists its storage is its own and cannot be adopted)
    reg = ("sales", uniq("reg"))
    etl.drop_table(dst)
    registered = etl.register_table(reg, moved.metadata_location)
    assert registered.scan().to_arrow().num_rows == 3
    assert etl.load_table(reg).scan().to_arrow().num_rows == 3
    # purge deletes the files: the registered copy then points at nothing readable
    data_files = [task.file.file_path for task in registered.scan().plan_files()]
    r = http.delete(f"{P}/namespaces/sales/tables/{reg[1]}", params={"purgeRequested": "true"}, headers=h)
    assert r.status_code == 204
    from pathlib import Path
    from urllib.parse import urlparse

    assert data_files and not any(Path(urlparse(f).path).exists() for f in data_files)


def test_management_grants_revoke_and_me(catalog, orders, http) -> None:  # type: ignore[no-untyped-def]
    ns, name = orders.name()
    bob, admin = bearer(catalog, "bob"), bearer(catalog, "admin")
    grant = {"role": "bobs", "privilege": "TABLE_READ_DATA", "on": f"table {ns}.{name}"}
    # bob cannot grant himself anything
    assert http.post("/management/v1/grants", json=grant, headers=bob).status_code == 403
    assert (
        http.post("/management/v1/roles", json={"name": "bobs", "members": ["bob"]}, headers=admin).status_code == 201
    )
    assert http.post("/management/v1/grants", json=grant, headers=admin).status_code == 201
    me = http.get("/management/v1/me/grants", headers=bob).json()
    assert me["principal"] == "bob" and me["roles"] == ["bobs"]
    [entry] = me["grants"]
    assert entry["securable"] == f"table {ns}.{name}" and "TABLE_READ_PROPERTIES" in entry["privileges"]
    assert http.get(f"{P}/namespaces/{ns}/tables/{name}", headers=bob).status_code == 200
    assert http.request("DELETE", "/management/v1/grants", json=grant, headers=admin).status_code == 204
    assert http.get(f"{P}/namespaces/{ns}/tables/{name}", headers=bob).status_code == 403
    bad = http.post("/management/v1/grants", json={**grant, "privilege": "TABLE_EAT"}, headers=admin)
    assert bad.status_code == 400 and "Unknown privilege" in bad.json()["error"]["message"]


def test_audit_endpoint_filters_and_access(catalog, http) -> None:  # type: ignore[no-untyped-def]
    since = time.time() - 0.5
    http.get(f"{P}/namespaces/sales/tables/anything", headers=bearer(catalog, "bob"))
    mine = http.get("/management/v1/audit", params={"principal": "bob", "since": since}, headers=bearer(catalog, "bob"))
    assert mine.status_code == 200 and mine.json() and all(r["principal"] == "bob" for r in mine.json())
    assert (
        http.get("/management/v1/audit", params={"principal": "alice"}, headers=bearer(catalog, "bob")).status_code
        == 403
    )
    everything = http.get(
        "/management/v1/audit", params={"securable": "table sales.anything"}, headers=bearer(catalog, "admin")
    )
    assert everything.status_code == 200 and {r["decision"] for r in everything.json()} == {"deny"}
    iso = http.get("/management/v1/audit", params={"since": "2999-01-01T00:00:00Z"}, headers=bearer(catalog, "admin"))
    assert iso.json() == []
    assert (
        http.get("/management/v1/audit", params={"since": "yesterday"}, headers=bearer(catalog, "admin")).status_code
        == 400
    )


def test_table_files_stay_inside_the_warehouse(catalog, http, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """No location (create, commit, path properties, register) may point outside the warehouse."""
    etl = bearer(catalog, "etl")
    http.post(f"{P}/namespaces", json={"namespace": ["fenced"]}, headers=etl)
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    wh = catalog.services.settings.warehouse.rstrip("/")
    bad = [tmp_path.as_uri(), f"{wh}/../escape", f"{wh}x/t", "relative/dir", "s3://other-bucket/t", f"{wh}/./t"]
    for i, location in enumerate(bad):
        r = http.post(
            f"{P}/namespaces/fenced/tables", headers=etl, json={"name": f"t{i}", "schema": schema, "location": location}
        )
        assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException", (location, r.text)
    r = http.post(
        f"{P}/namespaces/fenced/tables",
        headers=etl,
        json={"name": "p", "schema": schema, "properties": {"write.data.path": tmp_path.as_uri()}},
    )
    assert r.status_code == 400, r.text
    r = http.post(
        f"{P}/namespaces/fenced/tables",
        headers=etl,
        json={"name": "ok", "schema": schema, "location": f"{wh}/fenced/custom_ok"},
    )
    assert r.status_code == 200, r.text
    for update in (
        {"action": "set-location", "location": tmp_path.as_uri()},
        {"action": "set-properties", "updates": {"write.metadata.path": f"{wh}/../x"}},
    ):
        r = http.post(f"{P}/namespaces/fenced/tables/ok", headers=etl, json={"requirements": [], "updates": [update]})
        assert r.status_code == 400, (update, r.text)
    outside = tmp_path / "m.metadata.json"
    outside.write_text("{}")
    r = http.post(
        f"{P}/namespaces/fenced/register", headers=etl, json={"name": "r", "metadata-location": outside.as_uri()}
    )
    assert r.status_code == 400 and "inside the warehouse" in r.json()["error"]["message"], r.text
    assert list(tmp_path.iterdir()) == [outside]  # nothing was written outside
    assert (
        http.get(f"{P}/namespaces/fenced/tables/ok", headers=etl).json()["metadata"]["location"]
        == f"{wh}/fenced/custom_ok"
    )
