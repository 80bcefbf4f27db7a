"""An ADLS warehouse (``abfss://``) on Azurite: per-table SAS vending, refresh, and what Azurite enforces.

Azurite checks SAS signatures, permissions and expiry itself, so these tests pass only if the catalog's
SAS tokens are really read-only for readers, really expire, and really get refreshed. Azurite cannot
check directory scoping: it refuses directory SAS (``sr=d``) outright (proved below), so the catalog
vends container SAS here (``sas_scope="container"``), as for any flat-namespace account.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

import httpx
import pytest
from azure.core.exceptions import HttpResponseError
from azure.storage.blob import BlobClient

from lakesession.catalog._tables import create_table
from lakesession.credentials import (
    REVOKED,
    CredentialsError,
    CredentialsRevokedError,
    CredentialStore,
    VendedFileIO,
)
from lakesession.errors import StorageAccessError
from lakesession.reference.cloudvending import AdlsSettings, AdlsVendor
from tests._azurite import Azurite, azurite
from tests._lake import Lake
from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy, without_storage_access
from tests.support import load_vended

pytestmark = pytest.mark.slow  # Azurite start, waits across SAS lifetimes
TTL = 6
POLICY = shop_policy("xyz")


def sas_of(lake: Lake, store: CredentialStore, table: str) -> str:
    return lake.vended(store, table, f"adls.sas-token.{lake.server.host}")


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with azurite(tmp_path_factory.mktemp("azurite")) as az:
        az.create_container("lake")
        settings = AdlsSettings(
            az.account, az.account_key, endpoint=az.endpoint, sas_scope="container", credential_ttl=TTL
        )
        with make_catalog(
            POLICY, warehouse=f"abfss://lake@{az.host}/wh", adls=settings, data_dir=tmp_path_factory.mktemp("adlscat")
        ) as handle:
            lk = Lake(handle, POLICY.secrets("etl", "reader"), name="adls", server=az)
            etl = lk.catalogs["etl"]
            etl.create_namespace("shop")
            store = CredentialStore()
            for name in ("orders", "returns"):
                t = create_table(etl, f"shop.{name}", SCHEMA, store, lk.ids["etl"].token, handle.uri, mode="write")
                assert isinstance(t.io, VendedFileIO)
                t.append(ROWS)
            yield lk


def _blob(az: Azurite, path: str, sas: str) -> BlobClient:
    return BlobClient(az.endpoint, "lake", path, credential=sas)


def test_catalog_metadata_and_data_land_in_azurite_under_the_table(lake: Lake) -> None:
    blobs = lake.server.blobs("lake", "wh/")
    assert any(b.startswith("wh/shop/orders/metadata/") and b.endswith(".metadata.json") for b in blobs), blobs
    assert any(b.startswith("wh/shop/orders/data/") and b.endswith(".parquet") for b in blobs), blobs


def test_load_vends_a_sas_with_iceberg_keys_and_the_read_mode_by_privilege(lake: Lake) -> None:
    r = load_vended(lake.handle.uri, lake.ids["reader"].token(), "shop", "orders")
    doc = r.json()
    (cred,) = doc["storage-credentials"]
    host = lake.server.host
    assert cred["prefix"] == f"abfss://lake@{host}/wh/shop/orders"
    cfg = cred["config"]
    sas = parse_qs(cfg[f"adls.sas-token.{host}"])
    assert sas["sr"] == ["c"] and sas["sp"] == ["rl"]  # read + list only: the reader's privilege
    expires_ms = int(cfg[f"adls.sas-token-expires-at-ms.{host}"])
    assert 0 < expires_ms / 1000 - time.time() <= TTL + 1
    assert cfg["adls.refresh-credentials-endpoint"].endswith("/namespaces/shop/tables/orders/credentials")
    assert cfg[f"adls.connection-string.{host}"] == lake.server.endpoint  # Iceberg Java's endpoint for Azurite
    assert "adls.account-key" not in str(doc) and lake.server.account_key not in r.text  # the key never leaves


def test_reader_round_trip_across_two_lifetimes_refreshes_the_sas(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, mode="read")
    issued_before = lake.handle.services.vendor.issued
    tokens = set()
    started = time.time()
    while time.time() - started < 2.4 * TTL:
        assert t.scan().to_arrow().num_rows >= 2
        tokens.add(sas_of(lake, store, "shop.orders"))
        time.sleep(0.3)
    entry = store.entry("shop.orders")
    assert entry.refreshes >= 2, entry.refreshes  # refreshed ahead of each expiry, through the catalog
    assert len(tokens) == entry.refreshes + 1
    assert lake.handle.services.vendor.issued - issued_before <= entry.refreshes + 1
    row = store.snapshot()[0]
    assert row["mode"] == "read" and row["state"] == "valid" and row["prefix"].startswith("abfss://lake@")
    assert not any(tok in str(store.snapshot()) + repr(t.io) + str(t.io.properties) for tok in tokens)


def test_writer_appends_after_its_first_sas_expired(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("etl", "shop.returns", store, mode="write")
    n = t.scan().to_arrow().num_rows
    time.sleep(TTL + 0.5)
    t.append(ROWS)
    assert t.scan().to_arrow().num_rows == n + 2 and store.entry("shop.returns").refreshes >= 1


def test_read_only_sas_write_is_refused_by_azurite_itself(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, mode="read")
    sas = sas_of(lake, store, "shop.orders")
    inside = "wh/shop/orders/data/planted.parquet"
    with pytest.raises(HttpResponseError) as err:  # the attack: a raw PUT with the vended SAS
        _blob(lake.server, inside, sas).upload_blob(b"x")
    assert err.value.status_code == 403 and err.value.error_code == "AuthorizationPermissionMismatch"
    assert inside not in lake.server.blobs("lake", "wh/shop/orders/")
    assert _blob(lake.server, t.metadata_location.split(lake.server.host + "/", 1)[1], sas).download_blob().readall()


def test_a_readers_append_is_one_storage_access_error_before_or_at_the_store(lake: Lake) -> None:
    """The catalog says the SAS is read-only: refused before any upload. A catalog that does not say: Azurite
    refuses the upload (adlfs's ``RuntimeError: Failed to upload block … AuthorizationPermissionMismatch``, raised
    when the stream closes), and the user gets the same one line naming table, operation and principal."""
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, mode="read", principal="reader")
    blobs = lake.server.blobs("lake", "wh/shop/orders/")
    with pytest.raises(StorageAccessError) as early:
        t.append(ROWS)
    assert early.value.code == "ReadOnlyCredentials" and early.value.table == "shop.orders"
    assert "refused to write table shop.orders as reader before it reached the store" in str(early.value)
    assert lake.server.blobs("lake", "wh/shop/orders/") == blobs
    without_storage_access(store, "shop.orders")
    with pytest.raises(StorageAccessError) as at_store:
        t.append(ROWS)
    err = at_store.value
    message = str(err)
    assert (
        err.code == "AuthorizationPermissionMismatch" and err.operation == "write" and err.reason == "read-only grant"
    )
    assert message.startswith("The object store refused to write table shop.orders as reader: ")
    assert "TABLE_WRITE_DATA" in message and len(message.splitlines()) == 1
    assert isinstance(err.__cause__, RuntimeError)  # adlfs's own, kept
    assert sas_of(lake, store, "shop.orders").split("sig=")[-1][:10] not in message
    assert lake.server.blobs("lake", "wh/shop/orders/") == blobs  # Azurite kept nothing either


def test_expired_sas_is_refused_by_azurite(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store, mode="read")
    sas = sas_of(lake, store, "shop.orders")
    path = t.metadata_location.split(lake.server.host + "/", 1)[1]
    assert _blob(lake.server, path, sas).download_blob().readall()  # valid now
    expires = store.entry("shop.orders").expires_at
    assert expires is not None
    time.sleep(max(0.0, expires - time.time()) + 1.5)
    with pytest.raises(HttpResponseError) as err:
        _blob(lake.server, path, sas).download_blob().readall()
    assert err.value.status_code == 403 and err.value.error_code == "AuthorizationFailure"
    assert t.scan().to_arrow().num_rows >= 2  # while the table itself refreshed and reads on


def test_revoked_grant_stops_the_next_refresh(lake: Lake) -> None:
    store = CredentialStore()
    t = lake.load("reader", "shop.orders", store)
    t.scan().to_arrow()
    lake.handle.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
    try:
        deadline = time.time() + TTL + 2
        with pytest.raises(CredentialsRevokedError, match="shop.orders"):
            while time.time() < deadline:
                t.scan().to_arrow()
                time.sleep(0.3)
        assert store.state("shop.orders") == REVOKED
    finally:
        lake.handle.admin.grant("readers", "TABLE_READ_DATA", "table shop.orders")


def test_remote_signing_is_s3_only_and_says_so(lake: Lake) -> None:
    with pytest.raises(CredentialsError, match="Remote signing is S3-only"):
        lake.load("reader", "shop.orders", CredentialStore(), access="remote-signing")
    r = httpx.post(
        f"{lake.handle.uri}/v1/lakesession/namespaces/shop/tables/orders/sign",
        headers={"Authorization": f"Bearer {lake.ids['reader'].token()}"},
        json={"region": "us-east-1", "uri": f"{lake.server.endpoint}/lake/x", "method": "GET", "headers": {}},
    )
    assert r.status_code == 400 and "S3-only" in r.json()["error"]["message"]


def test_directory_sas_is_scoped_to_the_table_but_azurite_refuses_it(lake: Lake, tmp_path: Path) -> None:
    """What a hierarchical-namespace account gets (``sr=d`` on exactly the table's directory), and the proof
    that Azurite cannot check it: it rejects every directory SAS, so container scope is the emulator's narrowest."""
    az = lake.server
    vendor = AdlsVendor(AdlsSettings(az.account, az.account_key, endpoint=az.endpoint, credential_ttl=60))
    location = f"abfss://lake@{az.host}/wh/shop/orders"
    cred, _ = vendor.vend("reader", "shop.orders", location, "write")
    sas = cred.config[f"adls.sas-token.{az.host}"]
    q = parse_qs(sas)
    assert q["sr"] == ["d"] and q["sdd"] == ["3"] and set(q["sp"][0]) == set("racwdl")
    exp = dt.datetime.fromisoformat(q["se"][0].replace("Z", "+00:00")).timestamp()
    assert abs(exp - cred.expires_at) < 1.5
    with pytest.raises(HttpResponseError) as err:
        _blob(az, "wh/shop/orders/data/x", sas).upload_blob(b"x")
    assert err.value.status_code == 403 and err.value.error_code == "AuthorizationFailure"
