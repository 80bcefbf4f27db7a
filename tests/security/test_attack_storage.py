"""Storage ownership, attacked: a principal who may only create and write tables in ``scratch``
tries to point a table (or a namespace) at storage another table owns, then uses whatever
credentials the catalog hands out against the victim's S3 keys.

Each attack is a real HTTP request against a real catalog on loopback (S3 emulator with
session-policy enforcement), followed by the boto3 calls it would enable (list, read,
delete the victim's objects), which must all be denied.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

from lakesession.reference import ReferenceCatalog, start
from tests import support
from tests.conftest import bearer
from tests.factories import ROWS, SCHEMA, Policy, make_catalog, vended_catalog, vended_s3_client

POLICY = (
    Policy()
    .service("etl", "etl-secret-xyz", role="eng")
    .user("mallory", "mallory-secret-xyz", role="scratchers")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all(
        "scratchers",
        [
            "TABLE_CREATE",
            "TABLE_WRITE_DATA",
            "TABLE_DROP",
            "TABLE_LIST",
            "NAMESPACE_CREATE",
            "NAMESPACE_WRITE_PROPERTIES",
            "NAMESPACE_LIST",
            "VIEW_CREATE",
        ],
        "namespace scratch",
    )
)
BUCKET = "attack-bucket"
WH = f"s3://{BUCKET}/wh"
P = "/v1/lakesession"
SCHEMA_JSON = support.SCHEMA
VICTIM = "wh/shop/orders/"  # the victim table's key prefix
CANARY = VICTIM + "data/canary.txt"


@pytest.fixture(scope="module")
def s3cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    from tests.spec_validation import SpecRecorder

    recorder = SpecRecorder()
    with make_catalog(
        POLICY,
        warehouse=WH,
        s3_emulator=True,
        credential_ttl=900,
        data_dir=tmp_path_factory.mktemp("attack"),
        wrap_app=recorder.wrap,
    ) as handle:
        etl = vended_catalog(handle, "attack-etl", "etl:etl-secret-xyz")
        etl.create_namespace("shop")
        etl.create_namespace("scratch")
        for name in ("orders", "orders_archive"):
            etl.create_table(("shop", name), SCHEMA).append(ROWS)
        yield handle
    errors = recorder.validate_all()
    assert not errors, "responses violating the Iceberg REST spec:\n" + "\n".join(errors[:20])


def mallory(handle: ReferenceCatalog) -> dict[str, str]:
    return {**bearer(handle, "mallory"), "X-Iceberg-Access-Delegation": "vended-credentials"}


def create(
    handle: ReferenceCatalog,
    name: str,
    ns: str = "scratch",
    who: str = "mallory",
    location: str | None = None,
    properties: dict[str, str] | None = None,
    stage: bool = False,
) -> httpx.Response:
    headers = mallory(handle) if who == "mallory" else {**bearer(handle, who)}
    body: dict[str, Any] = {"name": name, "schema": SCHEMA_JSON, "stage-create": stage}
    if location is not None:
        body["location"] = location
    if properties is not None:
        body["properties"] = properties
    return httpx.post(f"{handle.uri}{P}/namespaces/{ns}/tables", headers=headers, json=body)


def commit(handle: ReferenceCatalog, table: str, *updates: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{handle.uri}{P}/namespaces/scratch/tables/{table}",
        headers=mallory(handle),
        json={"requirements": [], "updates": list(updates)},
    )


def s3_for(handle: ReferenceCatalog, cfg: dict[str, str]) -> Any:
    return vended_s3_client(
        cfg.get("s3.endpoint", handle.s3_emulator.endpoint), cfg, cfg.get("client.region", "us-east-1")
    )


def creds_in(response: httpx.Response) -> list[dict[str, str]]:
    if response.status_code != 200:
        return []
    body = response.json()
    return [c["config"] for c in body.get("storage-credentials") or []]


def attacker_credentials(handle: ReferenceCatalog, *responses: httpx.Response) -> list[dict[str, str]]:
    """Every credential the attacker holds: those in the attack's answers, and a fresh load of
    every table they can see in ``scratch``."""
    creds = [c for r in responses for c in creds_in(r)]
    listed = httpx.get(f"{handle.uri}{P}/namespaces/scratch/tables", headers=mallory(handle))
    for ident in listed.json().get("identifiers", []):
        r = httpx.get(f"{handle.uri}{P}/namespaces/scratch/tables/{ident['name']}", headers=mallory(handle))
        creds += creds_in(r)
    return creds


def exploits(handle: ReferenceCatalog, creds: list[dict[str, str]]) -> list[str]:
    """The S3 calls on the victim's keys that succeeded with the attacker's credentials."""
    admin = handle.s3_emulator.client("s3")
    won: list[str] = []
    for cfg in creds:
        s3 = s3_for(handle, cfg)
        for what, call in (
            ("list", lambda s3=s3: s3.list_objects_v2(Bucket=BUCKET, Prefix=VICTIM)),
            ("get", lambda s3=s3: s3.get_object(Bucket=BUCKET, Key=CANARY)["Body"].read()),
            ("delete", lambda s3=s3: s3.delete_object(Bucket=BUCKET, Key=CANARY)),
        ):
            admin.put_object(Bucket=BUCKET, Key=CANARY, Body=b"victim data")
            try:
                call()
            except ClientError as e:
                if e.response["Error"]["Code"] in ("AccessDenied", "403"):
                    continue
            won.append(f"{what} with credentials for {cfg.get('client.refresh-credentials-endpoint')}")
    admin.put_object(Bucket=BUCKET, Key=CANARY, Body=b"victim data")
    return won


def refused(r: httpx.Response, status: int = 400) -> bool:
    return r.status_code == status and r.json()["error"]["type"] == "BadRequestException"


def refused_for(location: str, r: httpx.Response) -> bool:
    """Foreign storage is a bad request (400); another place in the warehouse is the content managers' (403)."""
    if location.startswith(WH):
        return r.status_code == 403 and r.json()["error"]["type"] == "ForbiddenException"
    return refused(r)


def assert_attack_fails(handle: ReferenceCatalog, *responses: httpx.Response) -> None:
    won = exploits(handle, attacker_credentials(handle, *responses))
    assert not won, f"attacker reached the victim's objects: {won}"
    for r in responses:
        assert refused(r), r.text


def victim_metadata_location(handle: ReferenceCatalog) -> str:
    r = httpx.get(f"{handle.uri}{P}/namespaces/shop/tables/orders", headers=bearer(handle, "etl"))
    return r.json()["metadata-location"]


# ---------------------------------------------------------------- createTable
@pytest.mark.parametrize(
    "location",
    [WH, WH + "/", f"{WH}/shop/orders", f"{WH}/shop/orders/", f"{WH}/shop/orders/data", f"{WH}/shop"],
    ids=["warehouse-root", "warehouse-root-slash", "victim", "victim-slash", "inside-victim", "parent-of-victim"],
)
def test_create_table_on_foreign_storage_is_refused(s3cat: ReferenceCatalog, location: str) -> None:
    r = create(s3cat, f"grab_{abs(hash(location)) % 10**6}", location=location)
    assert_attack_fails(s3cat, r)


@pytest.mark.parametrize("key", ["write.data.path", "write.metadata.path", "write.object-storage.path"])
def test_create_table_with_a_path_property_into_another_table_is_refused(s3cat: ReferenceCatalog, key: str) -> None:
    r = create(s3cat, f"prop_{key.split('.')[1].replace('-', '_')}", properties={key: f"{WH}/shop/orders/data"})
    assert_attack_fails(s3cat, r)


def test_stage_create_on_foreign_storage_is_refused(s3cat: ReferenceCatalog) -> None:
    r = create(s3cat, "staged_grab", location=f"{WH}/shop/orders", stage=True)
    assert_attack_fails(s3cat, r)


# ---------------------------------------------------------------- commits
def test_commit_set_location_onto_another_table_is_refused(s3cat: ReferenceCatalog) -> None:
    assert create(s3cat, "mover").status_code == 200
    r = commit(s3cat, "mover", {"action": "set-location", "location": f"{WH}/shop/orders"})
    assert_attack_fails(s3cat, r)
    r = commit(s3cat, "mover", {"action": "set-location", "location": f"{WH}/shop/orders/sub"})
    assert_attack_fails(s3cat, r)
    loaded = httpx.get(f"{s3cat.uri}{P}/namespaces/scratch/tables/mover", headers=mallory(s3cat)).json()
    assert loaded["metadata"]["location"] == f"{WH}/scratch/mover"


def test_commit_set_properties_path_into_another_table_is_refused(s3cat: ReferenceCatalog) -> None:
    assert create(s3cat, "propper").status_code == 200
    for key in ("write.data.path", "write.folder-storage.path"):
        r = commit(s3cat, "propper", {"action": "set-properties", "updates": {key: f"{WH}/shop/orders/data"}})
        assert_attack_fails(s3cat, r)


def test_commit_moves_ownership(s3cat: ReferenceCatalog) -> None:
    """A table that moves away frees its old prefix for others, and owns the new one."""
    assert create(s3cat, "nomad").status_code == 200
    r = commit(s3cat, "nomad", {"action": "set-location", "location": f"{WH}/scratch/nomad_v2"})
    assert r.status_code == 200, r.text
    assert refused(create(s3cat, "squatter", location=f"{WH}/scratch/nomad_v2/x"))
    reuse = create(s3cat, "settler", location=f"{WH}/scratch/nomad")
    assert reuse.status_code == 200, reuse.text


# ---------------------------------------------------------------- register
def test_register_another_tables_metadata_is_refused(s3cat: ReferenceCatalog) -> None:
    r = httpx.post(
        f"{s3cat.uri}{P}/namespaces/scratch/register",
        headers=mallory(s3cat),
        json={"name": "stolen", "metadata-location": victim_metadata_location(s3cat)},
    )
    assert_attack_fails(s3cat, r)


def test_register_metadata_whose_log_names_another_tables_files_is_refused(s3cat: ReferenceCatalog) -> None:
    """delete-after-commit deletes the files that drop out of the metadata-log: a forged log
    naming another table's metadata would make the catalog delete them."""
    import json as _json

    made = create(s3cat, "forger")
    assert made.status_code == 200
    cfg = made.json()["config"]
    doc = made.json()["metadata"]
    assert httpx.delete(f"{s3cat.uri}{P}/namespaces/scratch/tables/forger", headers=mallory(s3cat)).status_code == 204
    victim_meta = victim_metadata_location(s3cat)
    doc["metadata-log"] = [{"metadata-file": victim_meta, "timestamp-ms": 1}]
    key = "wh/scratch/forger/metadata/99999-forged.metadata.json"
    s3_for(s3cat, cfg).put_object(Bucket=BUCKET, Key=key, Body=_json.dumps(doc).encode())
    r = httpx.post(
        f"{s3cat.uri}{P}/namespaces/scratch/register",
        headers=mallory(s3cat),
        json={"name": "forged", "metadata-location": f"s3://{BUCKET}/{key}"},
    )
    assert refused(r) and "metadata-log" in r.text, r.text
    admin = s3cat.s3_emulator.client("s3")
    assert admin.head_object(Bucket=BUCKET, Key=victim_meta.split(f"{BUCKET}/", 1)[1])["ContentLength"] > 0


def test_register_after_drop_adopts_the_freed_location(s3cat: ReferenceCatalog) -> None:
    """Once a table is dropped (not purged) its metadata may be registered again (restore)."""
    etl = bearer(s3cat, "etl")
    assert create(s3cat, "restorable", ns="shop", who="etl").status_code == 200
    meta = httpx.get(f"{s3cat.uri}{P}/namespaces/shop/tables/restorable", headers=etl).json()["metadata-location"]
    again = {"name": "restored", "metadata-location": meta}
    r = httpx.post(f"{s3cat.uri}{P}/namespaces/shop/register", headers=etl, json=again)
    assert refused(r), r.text  # still owned by shop.restorable
    assert httpx.delete(f"{s3cat.uri}{P}/namespaces/shop/tables/restorable", headers=etl).status_code == 204
    r = httpx.post(f"{s3cat.uri}{P}/namespaces/shop/register", headers=etl, json=again)
    assert r.status_code == 200, r.text


def test_purge_deletes_only_the_tables_own_files(s3cat: ReferenceCatalog) -> None:
    """A snapshot may name any file; purging it must never make the catalog (with its own keys)
    delete files of another table."""
    from pyiceberg.manifest import DataFile

    admin = s3cat.s3_emulator.client("s3")
    victim_files = [
        o["Key"]
        for o in admin.list_objects_v2(Bucket=BUCKET, Prefix=VICTIM)["Contents"]
        if o["Key"].endswith(".parquet")
    ]
    assert create(s3cat, "purger").status_code == 200
    cat = vended_catalog(s3cat, "attack-mallory", "mallory:mallory-secret-xyz")
    t = cat.load_table(("scratch", "purger"))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64())}))
    own = next(iter(t.scan().plan_files())).file
    forged = DataFile(*[own[i] for i in range(len(own))])
    forged[1] = f"s3://{BUCKET}/{victim_files[0]}"  # file_path
    with t.transaction() as tx, tx.update_snapshot().fast_append() as append:
        append.append_data_file(forged)
    r = httpx.delete(
        f"{s3cat.uri}{P}/namespaces/scratch/tables/purger", params={"purgeRequested": "true"}, headers=mallory(s3cat)
    )
    assert r.status_code == 204, r.text
    assert admin.head_object(Bucket=BUCKET, Key=victim_files[0])["ContentLength"] > 0  # the victim's file is intact
    left = admin.list_objects_v2(Bucket=BUCKET, Prefix="wh/scratch/purger/").get("Contents", [])
    assert not [o["Key"] for o in left if not o["Key"].endswith("/")]  # its own files are gone (not the dir markers)


# ---------------------------------------------------------------- path boundaries
def test_siblings_are_allowed_and_nesting_is_not(s3cat: ReferenceCatalog) -> None:
    assert create(s3cat, "a", location=f"{WH}/scratch/a").status_code == 200
    sibling = create(s3cat, "a_archive", location=f"{WH}/scratch/a_archive")
    assert sibling.status_code == 200, sibling.text
    assert refused(create(s3cat, "a_nested", location=f"{WH}/scratch/a/b"))
    assert refused(create(s3cat, "a_parent", location=f"{WH}/scratch"))
    # the victim's sibling prefix (orders_archive) exists and is untouched by the rules above
    etl = create(s3cat, "orders_2", ns="shop", who="etl", location=f"{WH}/shop/orders_2")
    assert etl.status_code == 200, etl.text
    assert refused(create(s3cat, "orders_sub", ns="shop", who="etl", location=f"{WH}/shop/orders/sub"))


def test_a_table_may_not_settle_in_another_namespaces_directory(s3cat: ReferenceCatalog) -> None:
    r = create(s3cat, "squat", location=f"{WH}/shop/future_table")
    assert_attack_fails(s3cat, r)


def test_rename_and_drop_keep_the_index_current(s3cat: ReferenceCatalog) -> None:
    etl = bearer(s3cat, "etl")
    assert create(s3cat, "before", ns="shop", who="etl").status_code == 200
    body = {
        "source": {"namespace": ["shop"], "name": "before"},
        "destination": {"namespace": ["shop"], "name": "after"},
    }
    assert httpx.post(f"{s3cat.uri}{P}/tables/rename", headers=etl, json=body).status_code == 204
    # the renamed table still owns its prefix
    assert refused(create(s3cat, "twin", ns="shop", who="etl", location=f"{WH}/shop/before"))
    assert httpx.delete(f"{s3cat.uri}{P}/namespaces/shop/tables/after", headers=etl).status_code == 204
    assert create(s3cat, "twin", ns="shop", who="etl", location=f"{WH}/shop/before").status_code == 200


# ---------------------------------------------------------------- namespace location
def test_namespace_location_on_foreign_storage_is_refused(s3cat: ReferenceCatalog, tmp_path: Path) -> None:
    local = tmp_path / "evil"
    for i, location in enumerate(
        [f"{WH}/shop", f"{WH}/shop/orders", WH, "s3://another-bucket/wh", "s3://attack-bucket-x/wh", local.as_uri()]
    ):
        r = httpx.post(
            f"{s3cat.uri}{P}/namespaces",
            headers=mallory(s3cat),
            json={"namespace": ["scratch", f"n{i}"], "properties": {"location": location}},
        )
        # had the namespace been created, its default table location would be on foreign storage
        tables = [create(s3cat, "orders", ns=f"scratch%1Fn{i}")] if r.status_code == 200 else []
        won = exploits(s3cat, attacker_credentials(s3cat, r, *tables))
        assert not won, f"attacker reached the victim's objects: {won}"
        assert refused_for(location, r), (location, r.text)
    assert not local.exists()


def test_namespace_location_update_is_checked(s3cat: ReferenceCatalog, tmp_path: Path) -> None:
    local = tmp_path / "evil"
    # {WH}/scratch_home: the home of a namespace that may come (squatting: test_attack_squat.py)
    for location in (f"{WH}/shop", "s3://another-bucket/x", local.as_uri(), "relative/x", f"{WH}/scratch_home"):
        r = httpx.post(
            f"{s3cat.uri}{P}/namespaces/scratch/properties",
            headers=mallory(s3cat),
            json={"updates": {"location": location}},
        )
        assert refused_for(location, r), (location, r.text)
    r = httpx.post(
        f"{s3cat.uri}{P}/namespaces/scratch/properties",
        headers=mallory(s3cat),
        json={"updates": {"location": f"{WH}/scratch/home"}},
    )
    assert r.status_code == 200, r.text
    made = create(s3cat, "homed")
    assert made.status_code == 200 and made.json()["metadata"]["location"] == f"{WH}/scratch/home/homed", made.text
    assert not local.exists()


def test_namespace_location_inside_the_warehouse_is_allowed(s3cat: ReferenceCatalog) -> None:
    r = httpx.post(
        f"{s3cat.uri}{P}/namespaces",
        headers=mallory(s3cat),
        json={"namespace": ["scratch", "own"], "properties": {"location": f"{WH}/scratch/own_place"}},
    )
    assert r.status_code == 200, r.text
    t = create(s3cat, "t1", ns="scratch%1Fown")
    assert t.status_code == 200 and t.json()["metadata"]["location"] == f"{WH}/scratch/own_place/t1", t.text
    assert_attack_fails(s3cat)  # and none of the attacker's credentials reach the victim


# ---------------------------------------------------------------- views
def view_body(name: str, location: str | None = None, namespace: str = "scratch") -> dict[str, Any]:
    """A ``SELECT 1 AS id`` view in ``namespace``, at ``location`` when given (what an attacker would point)."""
    body = support.view_body(name, "SELECT 1 AS id", namespace=namespace)
    if location is not None:
        body["location"] = location
    return body


@pytest.mark.parametrize(
    "location",
    [f"{WH}/shop/orders", f"{WH}/shop/orders/metadata", f"{WH}/shop", WH],
    ids=["on-table", "inside-table", "around-tables", "warehouse-root"],
)
def test_view_on_foreign_storage_is_refused(s3cat: ReferenceCatalog, location: str) -> None:
    """A view writes its metadata files under its location: never into a table's prefix."""
    admin = s3cat.s3_emulator.client("s3")

    def keys() -> set[str]:
        return {o["Key"] for o in admin.list_objects_v2(Bucket=BUCKET, Prefix="wh/shop/").get("Contents", [])}

    before = keys()
    r = httpx.post(
        f"{s3cat.uri}{P}/namespaces/scratch/views", headers=mallory(s3cat), json=view_body("vgrab", location)
    )
    assert refused(r), r.text
    assert keys() == before  # no view metadata was written into the victim's storage
    ok = httpx.post(f"{s3cat.uri}{P}/namespaces/scratch/views", headers=mallory(s3cat), json=view_body("vfine"))
    assert ok.status_code in (200, 409), ok.text


def test_views_own_their_prefixes(s3cat: ReferenceCatalog) -> None:
    """A view claims its prefix like a table: no table in, on or around it until it is dropped or moved."""
    home = httpx.get(f"{s3cat.uri}{P}/namespaces/scratch", headers=bearer(s3cat, "etl")).json()["properties"]
    loc = f"{home.get('location', WH + '/scratch').rstrip('/')}/claimed_view"  # inside scratch's (possibly moved) home
    made = httpx.post(
        f"{s3cat.uri}{P}/namespaces/scratch/views", headers=mallory(s3cat), json=view_body("claimed_view", loc)
    )
    assert made.status_code == 200, made.text
    assert_attack_fails(s3cat, create(s3cat, "under_view", location=f"{loc}/t"))
    assert_attack_fails(s3cat, create(s3cat, "over_view", location=loc))
    # a rename keeps the storage with the view
    renamed = httpx.post(
        f"{s3cat.uri}{P}/views/rename",
        headers=bearer(s3cat, "etl"),
        json={
            "source": {"namespace": ["scratch"], "name": "claimed_view"},
            "destination": {"namespace": ["scratch"], "name": "claimed_view2"},
        },
    )
    assert renamed.status_code == 204, renamed.text
    assert_attack_fails(s3cat, create(s3cat, "still_under_view", location=f"{loc}/t"))
    dropped = httpx.delete(f"{s3cat.uri}{P}/namespaces/scratch/views/claimed_view2", headers=bearer(s3cat, "etl"))
    assert dropped.status_code == 204, dropped.text
    assert create(s3cat, "after_view", location=loc).status_code == 200  # freed by the drop


# ---------------------------------------------------------------- an index built for an existing catalog
def test_objects_made_before_the_index_are_indexed_on_first_use(tmp_path: Path) -> None:
    from sqlalchemy import delete

    from lakesession.reference import store

    handle = start(data_dir=tmp_path / "old", bootstrap=POLICY.parse())
    try:
        etl = bearer(handle, "etl")
        wh = handle.settings.warehouse
        for ns in ("shop", "scratch"):
            assert httpx.post(f"{handle.uri}{P}/namespaces", headers=etl, json={"namespace": [ns]}).status_code == 200
        assert create(handle, "orders", ns="shop", who="etl").status_code == 200
        with handle.services.catalog.engine.begin() as conn:  # as if made by a version without the index
            conn.execute(delete(store.locations))
        handle.services.extras.pop("locations")
        # inside its own namespace (so only the rebuilt index can refuse it): the old table's data
        r = create(handle, "grab", ns="shop", who="etl", location=f"{wh}/shop/orders/data")
        assert refused(r) and "owned by another table" in r.json()["error"]["message"], r.text
        assert refused(create(handle, "squat", location=f"{wh}/shop/other"))
        assert create(handle, "fine").status_code == 200
    finally:
        handle.stop()


# ---------------------------------------------------------------- format version
def test_unsupported_format_versions_are_bad_requests(s3cat: ReferenceCatalog) -> None:
    """v1–v3 are supported (tests/catalog/test_format_v3.py); anything else is a 400, never a 500."""
    for version in ("4", "x", "0"):
        r = create(s3cat, f"v{version}", properties={"format-version": version})
        assert refused(r), r.text
        assert "format-version" in r.json()["error"]["message"]
    assert create(s3cat, "v2", properties={"format-version": "2"}).status_code == 200
    up = commit(s3cat, "v2", {"action": "upgrade-format-version", "format-version": 4})
    assert refused(up), up.text
    assert commit(s3cat, "v2", {"action": "upgrade-format-version", "format-version": 3}).status_code == 200
    down = commit(s3cat, "v2", {"action": "upgrade-format-version", "format-version": 2})
    assert refused(down) and "downgrade" in down.json()["error"]["message"], down.text


# ---------------------------------------------------------------- names (shared catalog)
BAD_NAMES = [".", "..", "", "a\x01b", "a/b"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=["dot", "dotdot", "empty", "control", "slash"])
def test_bad_names_are_bad_requests(catalog: ReferenceCatalog, http: httpx.Client, name: str) -> None:
    etl = bearer(catalog, "etl")
    http.post(f"{P}/namespaces", json={"namespace": ["names"]}, headers=etl)
    r = http.post(f"{P}/namespaces", json={"namespace": [name]}, headers=etl)
    assert refused(r), r.text
    r = http.post(f"{P}/namespaces", json={"namespace": ["names", name]}, headers=etl)
    assert refused(r), r.text
    r = http.post(f"{P}/namespaces/names/tables", json={"name": name, "schema": SCHEMA_JSON}, headers=etl)
    assert refused(r), r.text
    r = http.post(f"{P}/namespaces/names/views", json=view_body(name, namespace="names"), headers=etl)
    assert refused(r), r.text


@pytest.mark.parametrize("raw", ["%2E", "%2E%2E", "a%01b"])
def test_bad_names_in_paths_are_bad_requests(catalog: ReferenceCatalog, http: httpx.Client, raw: str) -> None:
    etl = bearer(catalog, "etl")
    for path in (f"{P}/namespaces/names/tables/{raw}", f"{P}/namespaces/names/views/{raw}", f"{P}/namespaces/{raw}"):
        r = http.get(path, headers=etl)
        assert refused(r), (path, r.text)
