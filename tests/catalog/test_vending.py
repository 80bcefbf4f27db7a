"""Credential vending and remote signing on the S3 emulator — enforced by the store, real SigV4 on loopback."""

from __future__ import annotations

import time

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from tests.factories import ROWS, SCHEMA, make_catalog, shop_policy, vended_s3_client
from tests.support import store_denied as denied

POLICY = shop_policy("xyz", others=["nobody"])
P = "/v1/lakesession"


@pytest.fixture(scope="module")
def s3cat(tmp_path_factory):  # type: ignore[no-untyped-def]
    with make_catalog(
        POLICY, bucket="lake-bucket", credential_ttl=900, data_dir=tmp_path_factory.mktemp("s3cat")
    ) as handle:
        etl = client(handle, "etl", "etl-secret-xyz")
        etl.create_namespace("shop")
        for name in ("orders", "orders_archive", "returns"):
            etl.create_table(("shop", name), SCHEMA).append(ROWS)
        yield handle


def client(handle, who: str, secret: str, **extra: str) -> RestCatalog:  # type: ignore[no-untyped-def]
    return RestCatalog(
        f"c-{who}-{time.monotonic_ns()}",
        uri=handle.uri,
        warehouse="lakesession",
        credential=f"{who}:{secret}",
        **{
            "oauth2-server-uri": f"{handle.issuer_uri}/token",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
            **extra,
        },
    )


def load(handle, who: str, table: str, delegation: str = "vended-credentials") -> httpx.Response:  # type: ignore[no-untyped-def]
    return httpx.get(
        f"{handle.uri}{P}/namespaces/shop/tables/{table}",
        headers={"Authorization": f"Bearer {handle.admin.token_for(who)}", "X-Iceberg-Access-Delegation": delegation},
    )


def s3_with(handle, cfg: dict[str, str]):  # type: ignore[no-untyped-def]
    return vended_s3_client(cfg["s3.endpoint"], cfg, cfg["client.region"], retries=None)


def test_pyiceberg_writes_and_reads_with_vended_credentials_only(s3cat) -> None:  # type: ignore[no-untyped-def]
    etl = client(s3cat, "etl", "etl-secret-xyz")
    t = etl.load_table(("shop", "orders"))
    assert t.io.properties["s3.session-token"]  # vended, not the catalog's own keys
    assert t.io.properties["s3.access-key-id"] != s3cat.s3_emulator.admin_credentials.access_key_id
    t.append(ROWS)
    assert t.scan().to_arrow().num_rows == 4
    reader = client(s3cat, "reader", "reader-secret-xyz")
    assert reader.load_table(("shop", "orders")).scan().to_arrow().num_rows == 4


def test_read_credentials_are_scoped_to_the_table_prefix(s3cat) -> None:  # type: ignore[no-untyped-def]
    body = load(s3cat, "reader", "orders").json()
    cfg = body["config"]
    [cred] = body["storage-credentials"]
    assert cred["prefix"].endswith("/shop/orders") and cred["config"]["s3.session-token"] == cfg["s3.session-token"]
    assert cfg["client.refresh-credentials-endpoint"] == "v1/lakesession/namespaces/shop/tables/orders/credentials"
    assert int(cfg["s3.session-token-expires-at-ms"]) > time.time() * 1000
    s3 = s3_with(s3cat, cfg)
    data_key = next(k["Key"] for k in s3.list_objects_v2(Bucket="lake-bucket", Prefix="wh/shop/orders/")["Contents"])
    assert s3.get_object(Bucket="lake-bucket", Key=data_key)["Body"].read()
    sibling = "wh/shop/orders_archive/"
    assert denied(lambda: s3.list_objects_v2(Bucket="lake-bucket", Prefix=sibling))
    assert denied(lambda: s3.get_object(Bucket="lake-bucket", Key=data_key.replace("/orders/", "/orders_archive/")))
    assert denied(lambda: s3.list_objects_v2(Bucket="lake-bucket", Prefix="wh/shop/returns/"))
    assert denied(lambda: s3.put_object(Bucket="lake-bucket", Key="wh/shop/orders/data/evil.parquet", Body=b"x"))


def test_write_credentials_allow_writes_only_inside(s3cat) -> None:  # type: ignore[no-untyped-def]
    cfg = load(s3cat, "etl", "orders").json()["config"]
    s3 = s3_with(s3cat, cfg)
    s3.put_object(Bucket="lake-bucket", Key="wh/shop/orders/data/probe.txt", Body=b"ok")
    s3.delete_object(Bucket="lake-bucket", Key="wh/shop/orders/data/probe.txt")
    assert denied(lambda: s3.put_object(Bucket="lake-bucket", Key="wh/shop/orders_archive/data/x", Body=b"x"))


def test_no_grant_no_credentials(s3cat) -> None:  # type: ignore[no-untyped-def]
    assert load(s3cat, "nobody", "orders").status_code == 403
    r = load(s3cat, "reader", "returns")
    assert r.status_code == 403 and "s3." not in r.text


def test_credentials_endpoint_reauthorizes_and_revocation_bites(s3cat) -> None:  # type: ignore[no-untyped-def]
    url = f"{s3cat.uri}{P}/namespaces/shop/tables/orders/credentials"
    h = {"Authorization": f"Bearer {s3cat.admin.token_for('reader')}"}
    ok = httpx.get(url, headers=h)
    assert ok.status_code == 200 and ok.json()["storage-credentials"][0]["prefix"].endswith("/shop/orders")
    s3cat.admin.revoke("readers", "TABLE_READ_DATA", "table shop.orders")
    try:
        refused = httpx.get(url, headers=h)
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "ForbiddenException"
        records = s3cat.admin.audit(principal="reader", action="load_credentials")
        assert records[-1].decision == "deny"
    finally:
        s3cat.admin.grant("readers", "TABLE_READ_DATA", "table shop.orders")


def test_issuance_is_cached_and_audited(s3cat) -> None:  # type: ignore[no-untyped-def]
    vendor = s3cat.services.vendor
    load(s3cat, "etl", "returns")
    before = vendor.sts_calls
    token = s3cat.admin.token_for("etl")
    with httpx.Client(
        base_url=s3cat.uri,
        headers={"Authorization": f"Bearer {token}", "X-Iceberg-Access-Delegation": "vended-credentials"},
    ) as c:
        for _ in range(200):
            assert c.get(f"{P}/namespaces/shop/tables/returns").status_code == 200
    assert vendor.sts_calls - before <= 1
    issued = s3cat.admin.audit(principal="etl", securable="table shop.returns", action="vend_credentials")
    assert issued and issued[-1].detail["mode"] == "write" and issued[-1].detail["expires_at"] > time.time()


def sign(handle, who: str, method: str, uri: str, table: str | None = "orders") -> httpx.Response:  # type: ignore[no-untyped-def]
    path = f"{P}/namespaces/shop/tables/{table}/sign" if table else "/v1/aws/s3/sign"
    return httpx.post(
        f"{handle.uri}{path}",
        headers={"Authorization": f"Bearer {handle.admin.token_for(who)}"},
        json={"region": "us-east-1", "uri": uri, "method": method, "headers": {}},
    )


def test_remote_signing_signs_inside_and_refuses_outside(s3cat) -> None:  # type: ignore[no-untyped-def]
    endpoint = s3cat.s3_emulator.endpoint
    cfg = load(s3cat, "reader", "orders", delegation="remote-signing").json()["config"]
    assert cfg["s3.remote-signing-enabled"] == "true"
    assert cfg["s3.signer.endpoint"] == "v1/lakesession/namespaces/shop/tables/orders/sign"
    assert "s3.access-key-id" not in cfg and "s3.session-token" not in cfg
    listing = f"{endpoint}/lake-bucket?list-type=2&prefix=wh/shop/orders/"
    r = sign(s3cat, "reader", "GET", listing)
    assert r.status_code == 200 and r.headers["cache-control"] == "private"
    signed = {k: v[0] for k, v in r.json()["headers"].items()}
    got = httpx.get(listing, headers=signed)
    assert got.status_code == 200 and b"wh/shop/orders/" in got.content
    for who, method, uri, table in [
        ("reader", "GET", f"{endpoint}/lake-bucket/wh/shop/orders_archive/data/x.parquet", "orders"),
        ("reader", "GET", f"{endpoint}/lake-bucket?list-type=2&prefix=wh/shop/orders_arc", "orders"),
        ("reader", "PUT", f"{endpoint}/lake-bucket/wh/shop/orders/data/new.parquet", "orders"),
        ("nobody", "GET", f"{endpoint}/lake-bucket/wh/shop/orders/data/x.parquet", "orders"),
        ("reader", "GET", f"{endpoint}/lake-bucket/wh/shop/returns/data/x.parquet", None),
    ]:
        assert sign(s3cat, who, method, uri, table).status_code == 403, (who, method, uri)
    put = sign(s3cat, "etl", "PUT", f"{endpoint}/lake-bucket/wh/shop/orders/data/new.parquet", None)
    assert put.status_code == 200 and put.headers["cache-control"] == "no-cache"
    decisions = {(r.action, r.decision) for r in s3cat.admin.audit(action="sign_request")}
    assert ("sign_request", "allow") in decisions and ("sign_request", "deny") in decisions
