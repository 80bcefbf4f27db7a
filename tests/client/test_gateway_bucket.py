"""The gateway's ``/lakesession/bucket-credentials`` (issue #33): one key per bucket for Hadoop S3A, covering
the union of the session's prefixes there, against a real reference catalog and the S3 emulator (session
policies enforced). Attacks are the S3 calls the vended union key would enable, which the store must refuse.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from lakesession.gateway import Gateway
from lakesession.reference import ReferenceCatalog
from tests.factories import Policy, make_catalog, vended_s3_client
from tests.support import gateway_client, seed_shop
from tests.support import store_denied as refused

POLICY = (
    Policy()
    .service("etl", "etl-secret-xyz", role="eng")
    .user("alice", "alice-secret-xyz", role="readers")
    .location("s3://lake/landing/", "s3://lake/landing_old/", "s3://lake/scratch/", "s3://other/raw/")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant("readers", "LOCATION_READ", "location s3://lake/landing/")
    .grant("readers", "LOCATION_WRITE", "location s3://lake/scratch/")
    .grant("readers", "TABLE_READ_DATA", "table shop.orders")
    .grant("readers", "TABLE_READ_PROPERTIES", "namespace shop")
)
WH = "s3://lake/wh"


@pytest.fixture(scope="module")
def cat(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY, warehouse=WH, s3_emulator=True, credential_ttl=900, data_dir=tmp_path_factory.mktemp("gwbucket")
    ) as handle:
        handle.s3_emulator.create_bucket("other")
        admin = handle.s3_emulator.client()
        for key in ("landing/a.txt", "landing_old/b.txt", "scratch/c.txt"):
            admin.put_object(Bucket="lake", Key=key, Body=b"x")
        admin.put_object(Bucket="other", Key="raw/d.txt", Body=b"x")
        seed_shop(handle, "gwb-etl", "etl:etl-secret-xyz", ("orders", "returns"))
        yield handle


@pytest.fixture()
def gw(cat: ReferenceCatalog) -> Iterator[tuple[Gateway, httpx.Client]]:
    with gateway_client(cat, timeout=30) as (g, c):
        yield g, c


def bucket(c: httpx.Client, name: str, mode: str = "read") -> httpx.Response:
    return c.get("/lakesession/bucket-credentials", params={"bucket": name, "mode": mode, "min-valid-seconds": 60})


def s3_from(cat: ReferenceCatalog, r: httpx.Response) -> Any:
    return vended_s3_client(cat.s3_emulator.endpoint, r.json()["storage-credentials"][0]["config"])


def test_attack_union_key_covers_each_prefix_of_the_session_and_nothing_else(
    cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]
) -> None:
    g, c = gw
    fetched = g._app.paths.upstream_fetches
    r = bucket(c, "lake")
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["prefixes"] == ["s3://lake/landing/", "s3://lake/scratch/"]  # LOCATION_WRITE implies read
    assert [e["prefix"] for e in doc["storage-credentials"]] == doc["prefixes"]
    config = doc["storage-credentials"][0]["config"]
    assert config["s3.endpoint"] == cat.s3_emulator.endpoint and config["s3.path-style-access"] == "true"
    assert config["client.region"] == "us-east-1"
    assert g._app.paths.upstream_fetches == fetched + 1  # one upstream call for the whole union
    s3 = s3_from(cat, r)
    assert s3.get_object(Bucket="lake", Key="landing/a.txt")["Body"].read() == b"x"
    assert s3.get_object(Bucket="lake", Key="scratch/c.txt")["Body"].read() == b"x"
    assert refused(lambda: s3.get_object(Bucket="lake", Key="landing_old/b.txt"))  # sibling, ungranted
    assert refused(lambda: s3.list_objects_v2(Bucket="lake", Prefix="wh/shop/orders/"))  # not loaded yet
    assert refused(lambda: s3.get_object(Bucket="other", Key="raw/d.txt"))
    assert refused(lambda: s3.put_object(Bucket="lake", Key="scratch/new.txt", Body=b"y"))  # a read key
    # the same set again: held, no upstream call
    again = bucket(c, "lake")
    assert again.json()["storage-credentials"][0]["config"]["s3.access-key-id"] == config["s3.access-key-id"]
    assert g._app.paths.upstream_fetches == fetched + 1

    # the set grows: a table loaded in the bucket; the next call vends for the new union
    load = c.get(
        "/v1/lakesession/namespaces/shop/tables/orders", headers={"X-Iceberg-Access-Delegation": "vended-credentials"}
    )
    assert load.status_code == 200, load.text
    grown = bucket(c, "lake")
    assert grown.json()["prefixes"] == ["s3://lake/landing/", "s3://lake/scratch/", f"{WH}/shop/orders/"]
    s3 = s3_from(cat, grown)
    assert s3.list_objects_v2(Bucket="lake", Prefix="wh/shop/orders/")["KeyCount"] > 0
    assert s3.get_object(Bucket="lake", Key="landing/a.txt")["Body"].read() == b"x"
    assert refused(lambda: s3.list_objects_v2(Bucket="lake", Prefix="wh/shop/returns/"))  # another table
    assert refused(lambda: s3.list_objects_v2(Bucket="lake", Prefix="wh/"))

    # write: only the prefixes holding a write grant (the table's credentials are read-only)
    w = bucket(c, "lake", "write")
    assert w.status_code == 200, w.text
    assert w.json()["prefixes"] == ["s3://lake/scratch/"]
    s3w = s3_from(cat, w)
    s3w.put_object(Bucket="lake", Key="scratch/new.txt", Body=b"y")
    assert refused(lambda: s3w.put_object(Bucket="lake", Key="landing/new.txt", Body=b"y"))
    assert refused(lambda: s3w.put_object(Bucket="lake", Key="wh/shop/orders/data/x.parquet", Body=b"y"))


def test_a_bucket_without_a_grant_has_no_credential_and_bad_asks_are_refused(
    cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]
) -> None:
    g, c = gw
    r = bucket(c, "nowhere")
    assert r.status_code == 200 and r.json()["prefixes"] == [] and r.json()["storage-credentials"] == []
    assert bucket(c, "other").json()["prefixes"] == []  # registered there, but not granted to alice
    assert c.get("/lakesession/bucket-credentials", params={"bucket": "a/b"}).status_code == 400
    assert c.get("/lakesession/bucket-credentials", params={"bucket": "lake", "mode": "delete"}).status_code == 400
    no_secret = httpx.get(f"{g.uri}/lakesession/bucket-credentials", params={"bucket": "lake"}, timeout=30)
    assert no_secret.status_code == 401 and "storage-credentials" not in no_secret.text


def test_a_path_granted_since_joins_the_union(cat: ReferenceCatalog, gw: tuple[Gateway, httpx.Client]) -> None:
    _, c = gw
    before = bucket(c, "lake").json()["prefixes"]
    assert "s3://lake/landing_old/" not in before
    cat.admin.grant("readers", "LOCATION_READ", "location s3://lake/landing_old/")
    try:
        r = c.get("/lakesession/path-credentials", params={"path": "s3a://lake/landing_old/b.txt"})
        assert r.status_code == 200, r.text
        after = bucket(c, "lake")
        assert "s3://lake/landing_old/" in after.json()["prefixes"]
        assert s3_from(cat, after).get_object(Bucket="lake", Key="landing_old/b.txt")["Body"].read() == b"x"
    finally:
        cat.admin.revoke("readers", "LOCATION_READ", "location s3://lake/landing_old/")
