"""A GCS warehouse (``gs://``) on fake-gcs-server: per-table OAuth tokens, refresh, revocation.

fake-gcs-server checks no token (proved below: an expired read-only token writes). What is tested
instead: the FileIO is built with the tokens the catalog vends (and only those), they are refreshed
ahead of expiry, and a revoked grant stops the next refresh (no token minted). What a real deployment's tokens may do is decided by their Credential Access Boundary (checked
as JSON here; GCS enforces it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from lakesession.catalog._tables import create_table
from lakesession.credentials import REVOKED, CredentialsError, CredentialsRevokedError, CredentialStore, VendedFileIO
from lakesession.errors import StorageAccessError
from lakesession.reference.gcsvending import DownscopedTokenSource, GcsSettings, LocalTokenSource
from tests._fakegcs import fake_gcs
from tests._lake import Lake
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy
from tests.support import load_vended

pytestmark = pytest.mark.slow  # fake-gcs-server start, waits across token lifetimes
TTL = 6
POLICY = shop_policy("xyz")


def token_of(lake: Lake, store: CredentialStore, table: str) -> str:
    return lake.vended(store, table, "gcs.oauth2.token")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with fake_gcs(tmp_path_factory.mktemp("fakegcs")) as fg:
        fg.create_bucket("lake")
        source = LocalTokenSource()
        with make_catalog(
            POLICY,
            warehouse="gs://lake/wh",
            gcs=GcsSettings(project_id="test", endpoint=fg.url, token_source=source, credential_ttl=TTL),
            data_dir=tmp_path_factory.mktemp("gcscat"),
        ) as handle:
            lk = Lake(handle, POLICY.secrets("etl", "reader"), name="gcs", server=fg, tokens=source)
            lk.catalogs["etl"].create_namespace("shop")
            store = CredentialStore()
            for name in ("orders", "returns"):
                t = create_table(
                    lk.catalogs["etl"], f"shop.{name}", SCHEMA, store, lk.ids["etl"].token, handle.uri, mode="write"
                )
                assert isinstance(t.io, VendedFileIO)
                t.append(ROWS)
            yield lk


def test_load_vends_a_token_with_iceberg_keys(lake: Lake) -> None:
    r = load_vended(lake.handle.uri, lake.ids["reader"].token(), "shop", "orders")
    (cred,) = r.json()["storage-credentials"]
    assert cred["prefix"] == "gs://lake/wh/shop/orders"
    cfg = cred["config"]
    assert lake.tokens.minted[cfg["gcs.oauth2.token"]][:2] == ("gs://lake/wh/shop/orders", False)  # read-only
    assert 0 < int(cfg["gcs.oauth2.token-expires-at"]) / 1000 - time.time() <= TTL + 1
    assert cfg["gcs.oauth2.refresh-credentials-endpoint"].endswith("/namespaces/shop/tables/orders/credentials")
    assert cfg["gcs.service.host"] == lake.server.url and cfg["gcs.project-id"] == "test"
    objects = lake.server.objects("lake", "wh/shop/orders/")
    assert any(o.startswith("wh/shop/orders/data/") for o in objects)


def test_round_trip_across_two_lifetimes_with_refreshed_tokens(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, mode="read")
    tokens = set()
    started = time.time()
    while time.time() - started < 2.4 * TTL:
        assert t.scan().to_arrow().num_rows >= 2
        tokens.add(token_of(lake, store, "shop.orders"))
        time.sleep(0.3)
    entry = store.entry("shop.orders")
    assert entry.refreshes >= 2 and len(tokens) == entry.refreshes + 1
    assert tokens <= set(lake.tokens.minted)  # each one minted by the catalog's token source
    assert all(not lake.tokens.minted[tok][1] for tok in tokens)  # read-only: the reader's privilege
    assert not any(tok in str(store.snapshot()) + repr(t.io) + str(t.io.properties) for tok in tokens)


def test_writer_appends_after_its_first_token_expired(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("etl", "shop.returns", store, mode="write")
    n = t.scan().to_arrow().num_rows
    time.sleep(TTL + 0.5)
    t.append(ROWS)
    assert t.scan().to_arrow().num_rows == n + 2 and store.entry("shop.returns").refreshes >= 1
    assert lake.tokens.minted[token_of(lake, store, "shop.returns")][1]  # a read-write token


def test_a_readers_append_writes_no_object(lake: Lake) -> None:
    """Before: the append wrote its data file to the bucket (fake-gcs-server checks no token) and was stopped
    only at the commit. The catalog says the token is read-only: the client refuses before any upload."""
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, principal="reader")
    before = lake.server.objects("lake", "wh/shop/orders/")
    with pytest.raises(StorageAccessError) as caught:
        t.append(ROWS)
    err = caught.value
    assert err.code == "ReadOnlyCredentials" and err.table == "shop.orders" and err.operation == "write"
    assert "refused to write table shop.orders as reader before it reached the store" in str(err)
    assert err.path and err.path.startswith("gs://lake/wh/shop/orders/data/")
    assert token_of(lake, store, "shop.orders") not in str(err)
    assert lake.server.objects("lake", "wh/shop/orders/") == before  # listed before and after: nothing written


def test_revoked_grant_stops_the_next_refresh(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store)
    t.scan().to_arrow()
    minted = len(lake.tokens.minted)
    lake.handle.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
    try:
        deadline = time.time() + TTL + 2
        with pytest.raises(CredentialsRevokedError, match="shop.orders"):
            while time.time() < deadline:
                t.scan().to_arrow()
                time.sleep(0.3)
        assert store.state("shop.orders") == REVOKED
        assert len(lake.tokens.minted) == minted  # no token minted for the revoked grant
    finally:
        lake.handle.admin.grant("readers", "TABLE_READ_DATA", "table shop.orders")


def test_what_fake_gcs_server_cannot_prove(lake: Lake) -> None:
    """It accepts a read-only token's write and an expired token's read: GCS itself would refuse both."""
    token, expires = lake.tokens.token("lake", "wh/shop/orders", False, 1)
    time.sleep(max(0.0, expires - time.time()) + 0.5)
    put = httpx.post(
        f"{lake.server.url}/upload/storage/v1/b/lake/o",
        params={"uploadType": "media", "name": "wh/shop/orders/data/planted"},
        headers={"Authorization": f"Bearer {token}"},
        content=b"x",
    )
    assert put.status_code == 200  # an expired, read-only token wrote: nothing is checked
    assert "wh/shop/orders/data/planted" in lake.server.objects("lake", "wh/shop/orders/data/")


def test_production_tokens_are_downscoped_to_the_table_prefix() -> None:
    doc = DownscopedTokenSource.boundary("lake", "wh/shop/orders", write=False).to_json()
    (rule,) = doc["accessBoundary"]["accessBoundaryRules"]
    assert rule["availablePermissions"] == ["inRole:roles/storage.objectViewer"]
    assert rule["availableResource"] == "//storage.googleapis.com/projects/_/buckets/lake"
    expr = rule["availabilityCondition"]["expression"]
    assert "objects/wh/shop/orders/')" in expr and "startsWith('wh/shop/orders/')" in expr  # path-boundary safe
    write = DownscopedTokenSource.boundary("lake", "wh/shop/orders", write=True).to_json()
    assert write["accessBoundary"]["accessBoundaryRules"][0]["availablePermissions"] == [
        "inRole:roles/storage.objectAdmin"
    ]


def test_remote_signing_is_s3_only_and_says_so(lake: Lake) -> None:
    with pytest.raises(CredentialsError, match="Remote signing is S3-only"):
        lake.load("reader", "shop.orders", CredentialStore(), access="remote-signing")
