"""Registered storage locations and credentials by path (issue #22), attacked over real HTTP.

A real catalog on loopback with the S3 emulator (moto, session policies and expiry enforced):
each attack is the HTTP request an attacker would send, then the S3 calls its answer would enable,
which the store must refuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakesession.reference import ReferenceCatalog
from tests.conftest import bearer
from tests.factories import Policy, make_catalog, vended_catalog, vended_s3_client
from tests.support import store_denied as denied

POLICY = (
    Policy()
    .service("etl", "etl-secret-xyz", role="eng")
    .user("alice", "alice-secret-xyz", role="readers")
    .user("bob", "bob-secret-xyz", role="writers")
    .user("carol", "carol-secret-xyz", role="scratchers")
    .user("dave", "dave-secret-xyz", role="unioners")
    .location("s3://raw-bucket/landing/", "s3://raw-bucket/secret/")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("readers", "LOCATION_READ", "location s3://raw-bucket/landing/")
    .grant("readers", "TABLE_READ_DATA", "table shop.orders")
    .grant("writers", "LOCATION_WRITE", "location s3://raw-bucket/landing")
    .grant("unioners", "LOCATION_READ", "location s3://raw-bucket/landing/")
    .grant("unioners", "LOCATION_READ", "location s3://raw-bucket/secret/")
    .grant("unioners", "TABLE_READ_DATA", "table shop.orders")
    .grant("unioners", "TABLE_READ_DATA", "table shop.orders_archive")
    .grant_all("scratchers", ["TABLE_CREATE", "TABLE_WRITE_DATA"], "namespace scratch")
)
WH = "s3://loc-bucket/wh"
P = "/v1/lakesession"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
ROWS = pa.table({"id": pa.array([1, 2], pa.int64())})


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    from tests.spec_validation import SpecRecorder

    recorder = SpecRecorder()
    emulator_bucket = "raw-bucket"
    with make_catalog(
        POLICY,
        warehouse=WH,
        s3_emulator=True,
        credential_ttl=900,
        data_dir=tmp_path_factory.mktemp("locations"),
        wrap_app=recorder.wrap,
    ) as handle:
        handle.s3_emulator.create_bucket(emulator_bucket)
        admin = handle.s3_emulator.client()
        for key in ("landing/a.txt", "landing_archive/b.txt", "secret/c.txt", "other/d.txt"):
            admin.put_object(Bucket=emulator_bucket, Key=key, Body=b"x")
        etl = vended_catalog(handle, "loc-etl", "etl:etl-secret-xyz")
        etl.create_namespace("shop")
        etl.create_namespace("scratch")
        etl.create_table(("shop", "orders"), SCHEMA).append(ROWS)
        etl.create_table(("shop", "orders_archive"), SCHEMA).append(ROWS)
        yield handle
    errors = recorder.validate_all()
    assert not errors, "responses violating the Iceberg REST spec:\n" + "\n".join(errors[:20])


def ask(handle: ReferenceCatalog, who: str, location: str, mode: str | None = None) -> httpx.Response:
    params = {"location": location, **({"mode": mode} if mode else {})}
    return httpx.get(f"{handle.uri}{P}/lakesession/location-credentials", params=params, headers=bearer(handle, who))


def s3_with(handle: ReferenceCatalog, response: httpx.Response) -> Any:
    cfg = response.json()["storage-credentials"][0]["config"]
    return vended_s3_client(handle.s3_emulator.endpoint, cfg)


def test_config_advertises_the_routes(cat: ReferenceCatalog) -> None:
    endpoints = httpx.get(f"{cat.uri}/v1/config", headers=bearer(cat, "alice")).json()["endpoints"]
    assert "GET /v1/{prefix}/lakesession/location-credentials" in endpoints
    assert "GET /v1/{prefix}/lakesession/locations" in endpoints


def test_registered_location_by_location_grant_and_store_enforces_the_prefix(cat: ReferenceCatalog) -> None:
    r = ask(cat, "alice", "s3://raw-bucket/landing/a.txt")
    assert r.status_code == 200, r.text
    (entry,) = r.json()["storage-credentials"]
    assert entry["prefix"] == "s3://raw-bucket/landing/"
    assert int(entry["config"]["s3.session-token-expires-at-ms"]) > 0
    s3 = s3_with(cat, r)
    assert s3.get_object(Bucket="raw-bucket", Key="landing/a.txt")["Body"].read() == b"x"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="raw-bucket", Prefix="landing/").get("Contents", [])]
    assert keys == ["landing/a.txt"]
    # path-boundary: landing/ never reaches landing_archive/, nor the other location, nor the warehouse
    assert denied(lambda: s3.get_object(Bucket="raw-bucket", Key="landing_archive/b.txt"))
    assert denied(lambda: s3.get_object(Bucket="raw-bucket", Key="secret/c.txt"))
    assert denied(lambda: s3.list_objects_v2(Bucket="raw-bucket", Prefix="landing"))
    assert denied(lambda: s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/"))
    # read-only: a write with read grants is refused by the store
    assert denied(lambda: s3.put_object(Bucket="raw-bucket", Key="landing/new.txt", Body=b"y"))


def test_write_mode_needs_a_write_grant(cat: ReferenceCatalog) -> None:
    assert ask(cat, "alice", "s3://raw-bucket/landing/", "write").status_code == 403
    r = ask(cat, "bob", "s3a://raw-bucket/landing/", "write")
    assert r.status_code == 200, r.text
    assert r.json()["storage-credentials"][0]["prefix"] == "s3a://raw-bucket/landing/"  # the caller's scheme
    s3 = s3_with(cat, r)
    s3.put_object(Bucket="raw-bucket", Key="landing/bob.txt", Body=b"b")
    assert denied(lambda: s3.put_object(Bucket="raw-bucket", Key="landing_archive/bob.txt", Body=b"b"))


def test_attack_ungranted_and_unregistered_paths_are_403(cat: ReferenceCatalog) -> None:
    for who, path in [
        ("alice", "s3://raw-bucket/secret/c.txt"),  # registered, not granted to alice
        ("alice", "s3://raw-bucket/landing_archive/b.txt"),  # sibling name of a granted prefix
        ("alice", "s3://raw-bucket/landing/../secret/c.txt"),  # dot-dot escape
        ("alice", "s3://raw-bucket/other/d.txt"),  # nothing registered
        ("alice", "s3://raw-bucket/"),  # the whole bucket
        ("bob", f"{WH}/shop/orders/"),  # a table bob has no grant on
        ("alice", f"{WH}/shop/orders_archive/data/x.parquet"),  # sibling table of alice's
        ("alice", f"{WH}/shop/"),  # a namespace home spans tables: never vended
    ]:
        r = ask(cat, who, path)
        assert r.status_code in (400, 403), (who, path, r.status_code, r.text)
        assert r.json()["error"]["type"] in ("ForbiddenException", "BadRequestException")
        assert "storage-credentials" not in r.text
    r = ask(cat, "alice", "s3://raw-bucket/other/d.txt")
    assert r.status_code == 403 and "LOCATION_READ" in r.json()["error"]["message"]


def test_table_path_by_table_grants(cat: ReferenceCatalog) -> None:
    r = ask(cat, "alice", f"{WH}/shop/orders/data/part-0.parquet")
    assert r.status_code == 200, r.text
    assert r.json()["storage-credentials"][0]["prefix"] == f"{WH}/shop/orders/"
    s3 = s3_with(cat, r)
    listed = s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/shop/orders/")["Contents"]
    assert listed and all(o["Key"].startswith("wh/shop/orders/") for o in listed)
    assert denied(lambda: s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/shop/orders_archive/"))
    assert denied(lambda: s3.get_object(Bucket="raw-bucket", Key="landing/a.txt"))
    assert ask(cat, "alice", f"{WH}/shop/orders/", "write").status_code == 403  # read grant only


def test_audit_records_each_decision(cat: ReferenceCatalog) -> None:
    ask(cat, "alice", "s3://raw-bucket/landing/a.txt")
    ask(cat, "alice", "s3://raw-bucket/secret/c.txt")
    records = cat.admin.audit(action="location_credentials", limit=500)
    issued = [r for r in records if r.decision == "issued" and r.principal == "alice"]
    assert any(r.securable == "location s3://raw-bucket/landing/" for r in issued)
    assert all((r.detail or {}).get("prefix") for r in issued)
    assert any(r.decision == "deny" and r.securable == "location s3://raw-bucket/secret/" for r in records)


def test_locations_list_shows_only_granted(cat: ReferenceCatalog) -> None:
    body = httpx.get(f"{cat.uri}{P}/lakesession/locations", headers=bearer(cat, "alice")).json()
    assert body == {"locations": [{"location": "s3://raw-bucket/landing/", "privileges": ["LOCATION_READ"]}]}
    bob = httpx.get(f"{cat.uri}{P}/lakesession/locations", headers=bearer(cat, "bob")).json()
    assert bob["locations"][0]["privileges"] == ["LOCATION_READ", "LOCATION_WRITE"]


def test_attack_overlapping_registrations_are_refused(cat: ReferenceCatalog) -> None:
    admin = bearer(cat, "admin")
    url = f"{cat.uri}/management/v1/locations"
    for loc in (
        "s3://raw-bucket/landing/",  # itself again is fine (idempotent) ...
    ):
        assert httpx.post(url, headers=admin, json={"location": loc}).status_code == 201
    for loc in (
        "s3://raw-bucket/",  # whole bucket
        "s3://raw-bucket/landing/sub/",  # inside another location: a grant on it would be a grant on part of landing
        "s3://raw-bucket/landing/../secret/",
        f"{WH}/shop/orders/",  # a table's storage
        f"{WH}/raw/",  # inside the warehouse
        "s3://loc-bucket/",  # contains the warehouse
        "s3://loc-bucket/w*/",  # IAM wildcard
    ):
        r = httpx.post(url, headers=admin, json={"location": loc})
        assert r.status_code == 400, (loc, r.text)
    # containing an existing location is refused too: its grants would reach landing's data
    assert httpx.post(url, headers=admin, json={"location": "s3://raw-bucket/"}).status_code == 400
    # a non-admin may not register
    assert httpx.post(url, headers=bearer(cat, "alice"), json={"location": "s3://raw-bucket/mine/"}).status_code == 403
    # a table may not be created inside a registered location
    r = httpx.post(
        f"{cat.uri}{P}/namespaces/shop/tables",
        headers=bearer(cat, "etl"),
        json={"name": "sneaky", "schema": {"type": "struct", "fields": []}, "location": "s3://raw-bucket/landing/t"},
    )
    assert r.status_code == 400, r.text
    # nor write its data files there through a path property, nor home a namespace there
    r = httpx.post(
        f"{cat.uri}{P}/namespaces/shop/tables",
        headers=bearer(cat, "etl"),
        json={
            "name": "sneaky2",
            "schema": {"type": "struct", "fields": []},
            "properties": {"write.data.path": "s3://raw-bucket/landing/data"},
        },
    )
    assert r.status_code == 400, r.text
    r = httpx.post(
        f"{cat.uri}{P}/namespaces",
        headers=bearer(cat, "etl"),
        json={"namespace": ["sneakyns"], "properties": {"location": "s3://raw-bucket/landing/ns"}},
    )
    assert r.status_code == 400, r.text


def test_grants_on_locations_are_checked(cat: ReferenceCatalog) -> None:
    url = f"{cat.uri}/management/v1/grants"
    admin = bearer(cat, "admin")
    unregistered = {"role": "readers", "privilege": "LOCATION_READ", "on": "location s3://raw-bucket/other/"}
    r = httpx.post(url, headers=admin, json=unregistered)
    assert r.status_code == 400 and "not registered" in r.json()["error"]["message"]
    wrong = {"role": "readers", "privilege": "TABLE_READ_DATA", "on": "location s3://raw-bucket/landing/"}
    assert httpx.post(url, headers=admin, json=wrong).status_code == 400
    wrong = {"role": "readers", "privilege": "LOCATION_READ", "on": "namespace shop"}
    assert httpx.post(url, headers=admin, json=wrong).status_code == 400


def test_register_grant_revoke_unregister(cat: ReferenceCatalog) -> None:
    admin = bearer(cat, "admin")
    loc = "s3://raw-bucket/tmp-zone/"
    assert httpx.post(f"{cat.uri}/management/v1/locations", headers=admin, json={"location": loc}).status_code == 201
    grant = {"role": "readers", "privilege": "LOCATION_READ", "on": f"location {loc}"}
    assert httpx.post(f"{cat.uri}/management/v1/grants", headers=admin, json=grant).status_code == 201
    assert ask(cat, "alice", loc + "f.parquet").status_code == 200
    listed = httpx.get(f"{cat.uri}/management/v1/locations", headers=admin).json()["locations"]
    assert loc in listed
    r = httpx.delete(f"{cat.uri}/management/v1/locations", headers=admin, params={"location": loc})
    assert r.status_code == 204
    assert ask(cat, "alice", loc + "f.parquet").status_code == 403
    # re-registered, it starts without the old grant
    assert httpx.post(f"{cat.uri}/management/v1/locations", headers=admin, json={"location": loc}).status_code == 201
    assert ask(cat, "alice", loc + "f.parquet").status_code == 403


def test_bad_requests_are_error_models(cat: ReferenceCatalog) -> None:
    for params in ({"location": "file:///etc/passwd"}, {"location": "s3://raw-bucket/landing/", "mode": "admin"}, {}):
        r = httpx.get(f"{cat.uri}{P}/lakesession/location-credentials", params=params, headers=bearer(cat, "alice"))
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == 400
    r = httpx.get(f"{cat.uri}{P}/lakesession/location-credentials", params={"location": "s3://raw-bucket/landing/"})
    assert r.status_code == 401


def test_staged_table_credentials_refresh_before_the_commit(cat: ReferenceCatalog) -> None:
    """CTAS under a short TTL: the staged table's refresh endpoint works before the table exists."""
    headers = {**bearer(cat, "carol"), "X-Iceberg-Access-Delegation": "vended-credentials"}
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    r = httpx.post(
        f"{cat.uri}{P}/namespaces/scratch/tables",
        headers=headers,
        json={"name": "ctas", "schema": schema, "stage-create": True},
    )
    assert r.status_code == 200, r.text
    endpoint = r.json()["config"]["client.refresh-credentials-endpoint"]
    assert "staged-location=" in endpoint
    refreshed = httpx.get(f"{cat.uri}/{endpoint}", headers=bearer(cat, "carol"))
    assert refreshed.status_code == 200, refreshed.text
    (entry,) = refreshed.json()["storage-credentials"]
    assert entry["prefix"] == f"{WH}/scratch/ctas"
    s3 = s3_with(cat, refreshed)
    s3.put_object(Bucket="loc-bucket", Key="wh/scratch/ctas/data/f.parquet", Body=b"p")
    assert denied(lambda: s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/shop/orders/"))


def test_attack_staged_location_cannot_reach_other_storage(cat: ReferenceCatalog) -> None:
    base = f"{cat.uri}{P}/namespaces/scratch/tables/ghost/credentials"
    for who, staged, status in [
        ("carol", f"{WH}/shop/orders", 400),  # another table's storage
        ("carol", "s3://raw-bucket/landing", 400),  # outside the warehouse (a registered location)
        ("carol", f"{WH}/scratch", 400),  # the namespace home itself
        ("alice", f"{WH}/scratch/ghost", 403),  # no TABLE_CREATE / data grant in scratch
    ]:
        r = httpx.get(base, params={"staged-location": staged}, headers=bearer(cat, who))
        assert r.status_code == status, (who, staged, r.text)
        assert "storage-credentials" not in r.text
    # an existing table ignores staged-location: its own location decides
    r = httpx.get(
        f"{cat.uri}{P}/namespaces/shop/tables/orders/credentials",
        params={"staged-location": "s3://raw-bucket/landing"},
        headers=bearer(cat, "alice"),
    )
    assert r.status_code == 200 and r.json()["storage-credentials"][0]["prefix"] == f"{WH}/shop/orders"


def ask_many(handle: ReferenceCatalog, who: str, locations: list[str], mode: str = "read") -> httpx.Response:
    params = [("location", loc) for loc in locations] + [("mode", mode)]
    return httpx.get(f"{handle.uri}{P}/lakesession/location-credentials", params=params, headers=bearer(handle, who))


def test_attack_union_key_reads_each_granted_prefix_and_nothing_else(cat: ReferenceCatalog) -> None:
    """Several locations in one request: one key for the union of the owning prefixes, used directly against
    the store: each granted prefix reads, every key outside the union (siblings, a granted table not asked
    for, another bucket) is AccessDenied."""
    r = ask_many(cat, "dave", ["s3a://raw-bucket/landing/", "s3a://raw-bucket/secret/c.txt", f"{WH}/shop/orders/"])
    assert r.status_code == 200, r.text
    entries = r.json()["storage-credentials"]
    assert [e["prefix"] for e in entries] == [
        "s3a://raw-bucket/landing/",
        "s3a://raw-bucket/secret/",
        f"{WH}/shop/orders/",
    ]
    assert all(e["config"] == entries[0]["config"] for e in entries)  # one credential for the union
    cfg = entries[0]["config"]
    assert cfg["s3.endpoint"] == cat.s3_emulator.endpoint and cfg["s3.path-style-access"] == "true"
    assert cfg["client.region"]
    s3 = s3_with(cat, r)
    assert s3.get_object(Bucket="raw-bucket", Key="landing/a.txt")["Body"].read() == b"x"
    assert s3.get_object(Bucket="raw-bucket", Key="secret/c.txt")["Body"].read() == b"x"
    assert s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/shop/orders/")["Contents"]
    assert denied(lambda: s3.get_object(Bucket="raw-bucket", Key="landing_archive/b.txt"))  # sibling name
    assert denied(lambda: s3.get_object(Bucket="raw-bucket", Key="other/d.txt"))
    assert denied(lambda: s3.list_objects_v2(Bucket="raw-bucket", Prefix="landing"))
    assert denied(lambda: s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/shop/orders_archive/"))  # not asked
    assert denied(lambda: s3.list_objects_v2(Bucket="loc-bucket", Prefix="wh/"))
    assert denied(lambda: s3.put_object(Bucket="raw-bucket", Key="landing/dave.txt", Body=b"d"))  # read only
    # the same set in another order: the vendor's cache hands out the same key (cache key: the sorted set)
    again = ask_many(cat, "dave", [f"{WH}/shop/orders/x", "s3://raw-bucket/secret/", "s3://raw-bucket/landing/"])
    assert again.status_code == 200 and again.json()["storage-credentials"][0]["config"] == cfg
    # a different set: a different key, scoped to it
    alone = ask_many(cat, "dave", ["s3://raw-bucket/landing/"])
    assert alone.json()["storage-credentials"][0]["config"]["s3.access-key-id"] != cfg["s3.access-key-id"]
    assert denied(lambda: s3_with(cat, alone).get_object(Bucket="raw-bucket", Key="secret/c.txt"))


def test_attack_an_ungranted_location_among_granted_ones_vends_nothing(cat: ReferenceCatalog) -> None:
    before = len(cat.s3_emulator._realm.sessions)  # STS sessions the store knows: nothing is minted below
    for locations in (
        ["s3://raw-bucket/landing/", "s3://raw-bucket/secret/c.txt"],  # alice: secret is not hers
        ["s3://raw-bucket/secret/c.txt", "s3://raw-bucket/landing/"],
        ["s3://raw-bucket/landing/", "s3://raw-bucket/landing_archive/b.txt"],
        ["s3://raw-bucket/landing/", f"{WH}/shop/orders_archive/"],
    ):
        r = ask_many(cat, "alice", locations)
        assert r.status_code == 403, (locations, r.text)
        assert "storage-credentials" not in r.text
        refused = next(loc for loc in locations if "landing/" not in loc)
        assert refused in r.json()["error"]["message"]  # the refused one is named
    assert len(cat.s3_emulator._realm.sessions) == before
    records = cat.admin.audit(action="location_credentials", limit=500)
    assert any(
        x.decision == "deny" and x.principal == "alice" and "landing_archive" in str(x.securable) for x in records
    )
    # bounded
    r = ask_many(cat, "dave", ["s3://raw-bucket/landing/"] * 65)
    assert r.status_code == 400 and "64" in r.json()["error"]["message"]
    # write: each location needs its write grant; bob holds LOCATION_WRITE on landing only
    r = ask_many(cat, "bob", ["s3://raw-bucket/landing/", "s3://raw-bucket/secret/"], "write")
    assert r.status_code == 403 and "secret" in r.json()["error"]["message"]
