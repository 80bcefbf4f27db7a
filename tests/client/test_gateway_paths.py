"""The gateway's credentials-by-path routes (issue #22): ``/lakesession/path-credentials`` and
``/lakesession/policy-locations``, against a real reference catalog with the S3 emulator (moto,
session policies and expiry enforced). Attacks are real HTTP requests to the gateway, then the S3
calls their answers would enable.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from lakesession.gateway import Gateway
from lakesession.gateway._credcache import required_life
from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog, vended_s3_client
from tests.support import gateway_client, seed_shop

POLICY = (
    Policy()
    .service("etl", "etl-secret-xyz", role="eng")
    .user("alice", "alice-secret-xyz", role="readers")
    .location("s3://gw-raw/landing/", "s3://gw-raw/secret/", "s3://gw-raw/churn/")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("readers", "LOCATION_READ", "location s3://gw-raw/landing/")
    .grant("readers", "LOCATION_READ", "location s3://gw-raw/churn/")
    .grant("readers", "TABLE_READ_DATA", "table shop.orders")
    .grant("readers", "TABLE_READ_PROPERTIES", "namespace shop")
)
WH = "s3://gw-bucket/wh"


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY, warehouse=WH, s3_emulator=True, credential_ttl=900, data_dir=tmp_path_factory.mktemp("gwpaths")
    ) as handle:
        handle.s3_emulator.create_bucket("gw-raw")
        admin = handle.s3_emulator.client()
        for key in ("landing/a.txt", "landing_archive/b.txt", "secret/c.txt"):
            admin.put_object(Bucket="gw-raw", Key=key, Body=b"x")
        seed_shop(handle, "gw-etl", "etl:etl-secret-xyz")
        yield handle


@pytest.fixture()
def gw(cat: ReferenceCatalog) -> Iterator[tuple[Gateway, httpx.Client]]:
    with gateway_client(cat, timeout=30) as (g, c):
        yield g, c


def creds(c: httpx.Client, path: str, **extra: Any) -> httpx.Response:
    return c.get("/lakesession/path-credentials", params={"path": path, **extra})


def s3_from(cat: ReferenceCatalog, r: httpx.Response) -> Any:
    (entry,) = r.json()["storage-credentials"]
    cfg = entry["config"]
    return vended_s3_client(cat.s3_emulator.endpoint, cfg)


def refused(call: Any) -> bool:
    try:
        call()
    except ClientError as e:
        return e.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    return False


def test_registered_location_through_the_gateway(cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]) -> None:
    g, c = gw
    r = creds(c, "s3a://gw-raw/landing/a.txt")
    assert r.status_code == 200, r.text
    (entry,) = r.json()["storage-credentials"]
    assert entry["prefix"] == "s3a://gw-raw/landing/"
    cfg = entry["config"]
    assert set(cfg) >= {
        "s3.access-key-id",
        "s3.secret-access-key",
        "s3.session-token",
        "s3.session-token-expires-at-ms",
    }
    assert int(cfg["s3.session-token-expires-at-ms"]) / 1000 - time.time() > 60
    s3 = s3_from(cat, r)
    assert s3.get_object(Bucket="gw-raw", Key="landing/a.txt")["Body"].read() == b"x"
    assert refused(lambda: s3.get_object(Bucket="gw-raw", Key="landing_archive/b.txt"))
    assert refused(lambda: s3.get_object(Bucket="gw-raw", Key="secret/c.txt"))
    assert refused(lambda: s3.put_object(Bucket="gw-raw", Key="landing/w.txt", Body=b"w"))  # read grant only
    # the second ask for anything under the prefix is served from the per-prefix cache
    fetched = g._app.paths.upstream_fetches
    again = creds(c, "s3://gw-raw/landing/deeper/part-0.parquet")
    assert again.status_code == 200 and again.json()["storage-credentials"][0]["prefix"] == "s3://gw-raw/landing/"
    assert again.json()["storage-credentials"][0]["config"]["s3.access-key-id"] == cfg["s3.access-key-id"]
    assert g._app.paths.upstream_fetches == fetched
    records = [r for r in g.access_log.records() if r.action == "path_credentials"]
    assert records and all(r.status == 200 for r in records)
    assert {r.object for r in records} == {"path s3://gw-raw/landing/"}
    assert sum(r.count for r in records) == 2


def test_attack_ungranted_paths_get_403_error_models(cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]) -> None:
    _, c = gw
    granted = creds(c, "s3://gw-raw/landing/a.txt")
    assert granted.status_code == 200
    for path in (
        "s3://gw-raw/secret/c.txt",  # registered, not granted
        "s3://gw-raw/landing_archive/b.txt",  # sibling name of a held prefix: never served from its cache
        "s3://gw-raw/other/x",  # nothing registered
        f"{WH}/shop/orders_archive/",  # no such table, nothing owns it
    ):
        r = creds(c, path)
        assert r.status_code == 403, (path, r.text)
        err = r.json()["error"]
        assert err["type"] == "ForbiddenException" and path.split("/")[-2] in err["message"]
        assert "storage-credentials" not in r.text
    # the key alice holds does not open what was refused
    s3 = s3_from(cat, granted)
    assert refused(lambda: s3.get_object(Bucket="gw-raw", Key="secret/c.txt"))
    for bad in ("s3://gw-raw/landing/../secret/c.txt", "file:///etc/passwd", "gs://x/y"):
        r = creds(c, bad)
        assert r.status_code == 400 and r.json()["error"]["type"] == "BadRequestException"
    assert creds(c, "s3://gw-raw/landing/a.txt", mode="admin").status_code == 400
    assert creds(c, "s3://gw-raw/landing/a.txt", **{"min-valid-seconds": "soon"}).status_code == 400
    # the JVM authenticates with the session secret only: the user's token or nothing is refused
    anon = httpx.get(f"{c.base_url}/lakesession/path-credentials", params={"path": "s3://gw-raw/landing/a.txt"})
    assert anon.status_code == 401
    user = httpx.get(
        f"{c.base_url}/lakesession/policy-locations",
        headers={"Authorization": f"Bearer {cat.admin.token_for('alice')}"},
    )
    assert user.status_code == 401


def test_loaded_table_path_uses_the_table_credentials(cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]) -> None:
    g, c = gw
    load = c.get(
        "/v1/lakesession/namespaces/shop/tables/orders", headers={"X-Iceberg-Access-Delegation": "vended-credentials"}
    )
    assert load.status_code == 200, load.text
    load_key = load.json()["config"]["s3.access-key-id"]
    fetched = g._app.paths.upstream_fetches
    r = creds(c, f"{WH}/shop/orders/metadata/00001.metadata.json")
    assert r.status_code == 200, r.text
    (entry,) = r.json()["storage-credentials"]
    assert entry["prefix"] == f"{WH}/shop/orders/"
    assert entry["config"]["s3.access-key-id"] == load_key  # the table's cached credentials, no new call
    assert g._app.paths.upstream_fetches == fetched
    s3 = s3_from(cat, r)
    assert s3.list_objects_v2(Bucket="gw-bucket", Prefix="wh/shop/orders/")["KeyCount"] > 0
    assert refused(lambda: s3.get_object(Bucket="gw-raw", Key="landing/a.txt"))


def test_policy_locations_lists_loaded_tables_and_granted_locations(
    cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]
) -> None:
    _, c = gw
    before = c.get("/lakesession/policy-locations").json()["locations"]
    assert before == ["s3://gw-raw/churn/", "s3://gw-raw/landing/"]  # not secret/: no grant
    c.get(
        "/v1/lakesession/namespaces/shop/tables/orders", headers={"X-Iceberg-Access-Delegation": "vended-credentials"}
    )
    after = c.get("/lakesession/policy-locations").json()["locations"]
    assert after == sorted([*before, f"{WH}/shop/orders/"])


def test_concurrent_first_asks_share_one_upstream_call(gw: tuple[Gateway, httpx.Client]) -> None:
    g, c = gw
    results: list[int] = []
    barrier = threading.Barrier(8)

    def ask(i: int) -> None:
        barrier.wait()
        results.append(creds(c, f"s3://gw-raw/churn/file-{i}.parquet").status_code)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200] * 8
    assert g._app.paths.upstream_fetches == 1


def test_handout_rule_keeps_enough_life_for_the_reader() -> None:
    assert required_life(3600) == 540  # 15 % of an hour
    assert required_life(3600, 900) == 900  # a reader with a 15 min deadline
    assert required_life(60) == 30  # never the 9 s (15 %) that failed Comet's 30 s I/O deadline
    assert required_life(30) == 15
    assert required_life(300, 120) == 120


def test_revoked_location_grant_is_refused_at_the_next_refresh(
    cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]
) -> None:
    g, c = gw
    assert creds(c, "s3://gw-raw/churn/x").status_code == 200
    cat.admin.revoke("readers", "LOCATION_READ", "location s3://gw-raw/churn/")
    try:
        g._app.paths.clear()  # as if the held credential came due for a refresh
        r = creds(c, "s3://gw-raw/churn/x")
        assert r.status_code == 403 and json.loads(r.content)["error"]["type"] == "ForbiddenException"
    finally:
        cat.admin.grant("readers", "LOCATION_READ", "location s3://gw-raw/churn/")


def test_jvm_refreshes_never_get_a_key_too_close_to_expiry() -> None:
    """Iceberg's ``/credentials`` answers from the gateway cache follow the same rule: a 60 s key with
    25 s left is not handed out (the old rule, 15 % of the lifetime, handed out down to 9 s)."""
    from lakesession.gateway._credcache import CredentialCache, _Entry

    cache = CredentialCache()
    now = time.time()
    body = json.dumps({"storage-credentials": [{"prefix": "s3://b/t", "config": {}}]}).encode()
    cache._entries["k"] = _Entry((200, body, {}), now - 35, now + 25)
    assert cache.get("k") is None
    cache._entries["k"] = _Entry((200, body, {}), now - 25, now + 35)
    assert cache.get("k") is not None
    cache._entries["k"] = _Entry((200, body, {}), now - 3000, now + 600)  # an hour's key, 10 min left
    assert cache.get("k") is not None
    assert cache.get("k", min_valid=900) is None  # a reader with a 15 min deadline gets a refresh


def test_attack_a_table_loaded_through_a_view_chain_is_not_served_by_path(gw: tuple[Gateway, httpx.Client]) -> None:
    """A DEFINER chain's table must not become readable by a direct reference: its prefix is not
    registered for path credentials (a raw ``s3a://`` read of it would bypass the view)."""
    g, c = gw
    body = json.dumps({"metadata": {"location": f"{WH}/hidden/base"}, "config": {}}).encode()
    g._app._note_load("/v1/lakesession/namespaces/hidden/tables/base", "referenced-by=v", {}, (200, body, {}))
    assert f"{WH}/hidden/base/" not in c.get("/lakesession/policy-locations").json()["locations"]
    g._app._note_load("/v1/lakesession/namespaces/hidden/tables/base", "", {}, (200, body, {}))
    assert f"{WH}/hidden/base/" in c.get("/lakesession/policy-locations").json()["locations"]
