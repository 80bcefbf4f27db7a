"""Attacks on the remote signer, performed as an attacker would (issue 12, item 3).

mallory may read and write ``ns.orders`` only. Each attack is the real HTTP request to the signer
(the per-table endpoint and the legacy ``/v1/aws/s3/sign``), then — when a signature came back —
the S3 call with exactly the returned headers against the S3 emulator (which verifies SigV4).
Every test asserts the signer's 403 *and* that the store never performed the operation.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from tests._lake import Lake
from tests.factories import Policy, make_catalog, seed_tables

POLICY = (
    Policy()
    .service("etl", role="eng")
    .user("mallory", role="r_mallory")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all("r_mallory", ["TABLE_READ_DATA", "TABLE_WRITE_DATA"], "table ns.orders")
)
BUCKET = "atk-signer-bucket"
P = "/v1/lakesession"
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
SIGNERS = ["table", "legacy"]


def sign(
    lake: Lake,
    method: str,
    uri: str,
    headers: dict[str, str] | None = None,
    *,
    signer: str = "table",
    who: str = "mallory",
) -> httpx.Response:
    """Ask the table's signer (or the legacy one) to sign ``method uri`` as ``who``."""
    path = f"{P}/namespaces/ns/tables/orders/sign" if signer == "table" else "/v1/aws/s3/sign"
    body = {
        "region": lake.region,
        "uri": uri,
        "method": method,
        "headers": {k: [v] for k, v in (headers or {}).items()},
    }
    auth = {"Authorization": f"Bearer {lake.handle.admin.token_for(who)}"}
    return httpx.post(lake.handle.uri + path, json=body, headers=auth, timeout=30)


def attempt(
    lake: Lake,
    method: str,
    uri: str,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
    *,
    signer: str = "table",
    host: str | None = None,
) -> tuple[httpx.Response, httpx.Response | None]:
    """Ask the signer, then (if it signed) send the S3 request with the returned headers."""
    r = sign(lake, method, uri, headers, signer=signer)
    if r.status_code != 200:
        return r, None
    signed = {k: v[0] for k, v in r.json()["headers"].items()}
    if host is not None:  # replay on the store, keeping the Host header the signature covers
        path = uri.split(host, 1)[1]
        uri, signed = f"{lake.endpoint}{path}", {**signed, "Host": host}
    return r, httpx.request(method, uri, headers=signed, content=content, timeout=30)


def urlhost(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def refused(r: httpx.Response, s3: httpx.Response | None) -> str:
    """Diagnostic for a failed assertion: what the signer and the store answered."""
    store = f"S3 {s3.status_code} {s3.text[:300]!r}" if s3 is not None else "S3 not called"
    return f"{store}; signer {r.status_code} {r.text[:300]!r}"


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lake]:
    with make_catalog(POLICY, bucket=BUCKET, data_dir=tmp_path_factory.mktemp("atk-signer")) as handle:
        loc = seed_tables(handle, BUCKET, ("orders", "orders_archive", "secret"))
        yield Lake(handle, bucket=BUCKET, loc=loc)


# ---------------------------------------------------------------- the attacks
@pytest.mark.parametrize("signer", SIGNERS)
def test_copy_source_from_another_table_is_refused(lake: Lake, signer: str) -> None:
    stolen = lake.key("orders", f"data/stolen-{signer}.parquet")
    source = f"/{BUCKET}/{lake.key('secret', 'data/secret.parquet')}"
    r, s3 = attempt(lake, "PUT", lake.url(f"/{stolen}"), {"x-amz-copy-source": source}, signer=signer)
    copied = lake.exists(stolen)
    assert r.status_code == 403, refused(r, s3)
    assert not copied and s3 is None


@pytest.mark.parametrize("signer", SIGNERS)
def test_delete_objects_naming_another_tables_keys_is_refused(lake: Lake, signer: str) -> None:
    victim = lake.key("secret", "data/secret.parquet")
    body = f"<Delete><Object><Key>{victim}</Key></Object><Quiet>true</Quiet></Delete>".encode()
    headers = {"content-md5": md5(body), "content-type": "application/xml"}
    uri = lake.url(f"?delete&prefix={lake.loc['orders']}/")
    r, s3 = attempt(lake, "POST", uri, headers, body, signer=signer)
    still_there = lake.exists(victim)
    assert r.status_code == 403, refused(r, s3)
    assert still_there and s3 is None


@pytest.mark.parametrize("signer", SIGNERS)
def test_put_bucket_policy_is_refused(lake: Lake, signer: str) -> None:
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/*"}
        ],
    }
    body = json.dumps(policy).encode()
    r, s3 = attempt(
        lake, "PUT", lake.url(f"?policy&prefix={lake.loc['orders']}/"), {"content-md5": md5(body)}, body, signer=signer
    )
    with pytest.raises(ClientError, match="NoSuchBucketPolicy"):
        lake.s3.get_bucket_policy(Bucket=BUCKET)
    assert r.status_code == 403, refused(r, s3)


@pytest.mark.parametrize("signer", SIGNERS)
def test_put_bucket_lifecycle_is_refused(lake: Lake, signer: str) -> None:
    body = (
        b"<LifecycleConfiguration><Rule><ID>wipe</ID><Filter><Prefix></Prefix></Filter><Status>Enabled</Status>"
        b"<Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>"
    )
    headers = {"content-md5": md5(body), "content-type": "application/xml"}
    r, s3 = attempt(lake, "PUT", lake.url(f"?lifecycle&prefix={lake.loc['orders']}/"), headers, body, signer=signer)
    with pytest.raises(ClientError, match="NoSuchLifecycleConfiguration"):
        lake.s3.get_bucket_lifecycle_configuration(Bucket=BUCKET)
    assert r.status_code == 403, refused(r, s3)


@pytest.mark.parametrize("signer", SIGNERS)
@pytest.mark.parametrize("where", ["object", "bucket"])
def test_get_acl_is_refused(lake: Lake, signer: str, where: str) -> None:
    own = lake.key("orders", "data/orders.parquet")
    uri = lake.url(f"/{own}?acl") if where == "object" else lake.url(f"?acl&prefix={lake.loc['orders']}/")
    r, s3 = attempt(lake, "GET", uri, signer=signer)
    assert r.status_code == 403, refused(r, s3)
    assert s3 is None


@pytest.mark.parametrize("signer", SIGNERS)
@pytest.mark.parametrize("sub", ["tagging", "versions", "uploads", "website", "cors", "encryption"])
def test_other_subresources_are_refused(lake: Lake, signer: str, sub: str) -> None:
    r, s3 = attempt(lake, "GET", lake.url(f"?{sub}&prefix={lake.loc['orders']}/"), signer=signer)
    assert r.status_code == 403, refused(r, s3)
    r, s3 = attempt(lake, "PUT", lake.url(f"/{lake.key('orders', 'data/orders.parquet')}?{sub}"), signer=signer)
    assert r.status_code == 403, refused(r, s3)


@pytest.mark.parametrize("signer", SIGNERS)
def test_bare_prefix_listing_does_not_reach_the_sibling(lake: Lake, signer: str) -> None:
    for prefix in (lake.loc["orders"], lake.loc["orders"] + "_", "", lake.loc["orders"] + "/../"):
        r, s3 = attempt(lake, "GET", lake.url(f"?list-type=2&prefix={prefix}"), signer=signer)
        leaked = s3 is not None and "orders_archive" in s3.text
        assert r.status_code == 403 and not leaked, f"prefix {prefix!r}: {refused(r, s3)}"
    # the legitimate listing of the table's own prefix still works, and shows only its own keys
    r, s3 = attempt(lake, "GET", lake.url(f"?list-type=2&prefix={lake.loc['orders']}/data/"), signer=signer)
    assert r.status_code == 200 and s3 is not None and s3.status_code == 200, refused(r, s3)
    assert "orders.parquet" in s3.text and "orders_archive" not in s3.text and "secret" not in s3.text


@pytest.mark.parametrize("signer", SIGNERS)
def test_host_other_than_the_store_is_refused(lake: Lake, signer: str) -> None:
    with socket.socket() as sock:  # a port on loopback that is not the store: the attacker's listener
        sock.bind(("127.0.0.1", 0))
        foreign = f"127.0.0.1:{sock.getsockname()[1]}"
    key = lake.key("orders", "data/orders.parquet")
    for uri in (
        f"http://{foreign}/{BUCKET}/{key}",
        f"https://{urlhost(lake.endpoint)}/{BUCKET}/{key}",
        f"http://{BUCKET}.s3.attacker.example/{key}",
        f"http://{BUCKET}.s3.amazonaws.com/{key}",
    ):
        host = urlhost(uri)
        # replayed on the store with the signed Host header, the signature would be accepted
        r, s3 = attempt(lake, "GET", uri, signer=signer, host=host)
        assert r.status_code == 403, f"{uri}: {refused(r, s3)}"
        assert s3 is None


@pytest.mark.parametrize("signer", SIGNERS)
def test_smuggled_headers_are_not_signed(lake: Lake, signer: str) -> None:
    key = lake.key("orders", f"data/acl-{signer}.parquet")
    smuggled = {
        "x-amz-acl": "public-read",
        "x-amz-website-redirect-location": "https://attacker.example/",
        "x-amz-tagging": "owner=mallory",
        "x-amz-security-token": "forged",
    }
    body = b"mine"
    headers = {**smuggled, "content-type": "application/octet-stream", "content-length": str(len(body))}
    r, s3 = attempt(lake, "PUT", lake.url(f"/{key}"), headers, body, signer=signer)
    assert r.status_code == 200 and s3 is not None and s3.status_code == 200, refused(r, s3)
    grants = lake.s3.get_object_acl(Bucket=BUCKET, Key=key)["Grants"]
    assert not any("AllUsers" in str(g.get("Grantee")) for g in grants)
    assert "WebsiteRedirectLocation" not in lake.s3.head_object(Bucket=BUCKET, Key=key)
    assert lake.s3.get_object_tagging(Bucket=BUCKET, Key=key)["TagSet"] == []
    returned = {k.lower(): v for k, v in r.json()["headers"].items()}
    signed = returned["authorization"][0].split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    assert not set(smuggled) & set(returned) and not set(smuggled) & set(signed)
    assert {"host", "x-amz-date", "x-amz-content-sha256", "content-type"} <= set(signed)


# ---------------------------------------------------------------- what stays allowed
@pytest.mark.parametrize("signer", SIGNERS)
def test_allowlisted_operations_still_work(lake: Lake, signer: str) -> None:
    key = lake.key("orders", f"data/mp-{signer}.parquet")
    own = lake.key("orders", "data/orders.parquet")
    r, s3 = attempt(lake, "GET", lake.url(f"/{own}"), {"range": "bytes=0-5"}, signer=signer)
    assert s3 is not None and s3.status_code == 206 and s3.content == b"orders", refused(r, s3)
    r, s3 = attempt(lake, "HEAD", lake.url(f"/{own}"), signer=signer)
    assert s3 is not None and s3.status_code == 200, refused(r, s3)
    # multipart: create, upload a part, list parts, complete; then delete the object
    r, s3 = attempt(lake, "POST", lake.url(f"/{key}?uploads"), signer=signer)
    assert s3 is not None and s3.status_code == 200, refused(r, s3)
    upload = s3.text.split("<UploadId>", 1)[1].split("</UploadId>", 1)[0]
    part = b"x" * 1024
    r, s3 = attempt(lake, "PUT", lake.url(f"/{key}?partNumber=1&uploadId={upload}"), {}, part, signer=signer)
    assert s3 is not None and s3.status_code == 200, refused(r, s3)
    etag = s3.headers["etag"]
    r, s3 = attempt(lake, "GET", lake.url(f"/{key}?uploadId={upload}"), signer=signer)
    assert s3 is not None and s3.status_code == 200 and "<PartNumber>1</PartNumber>" in s3.text, refused(r, s3)
    done = (
        f"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    )
    r, s3 = attempt(lake, "POST", lake.url(f"/{key}?uploadId={upload}"), {}, done.encode(), signer=signer)
    assert s3 is not None and s3.status_code == 200, refused(r, s3)
    assert lake.s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == part
    r, s3 = attempt(lake, "POST", lake.url(f"/{key}?uploads"), signer=signer)
    assert s3 is not None
    upload = s3.text.split("<UploadId>", 1)[1].split("</UploadId>", 1)[0]
    r, s3 = attempt(lake, "DELETE", lake.url(f"/{key}?uploadId={upload}"), signer=signer)
    assert s3 is not None and s3.status_code == 204, refused(r, s3)
    r, s3 = attempt(lake, "DELETE", lake.url(f"/{key}"), signer=signer)
    assert s3 is not None and s3.status_code == 204 and not lake.exists(key), refused(r, s3)


def test_methods_and_write_operations_need_the_right_privilege(lake: Lake) -> None:
    own = lake.key("orders", "data/orders.parquet")
    for method in ("PATCH", "OPTIONS", "TRACE"):
        assert sign(lake, method, lake.url(f"/{own}")).status_code in (400, 403)
    for bad in ("http://[::1/x", "http://127.0.0.1:99999/b/k", "ftp://x/y", "not a url"):  # bad input: 400, never 500
        assert sign(lake, "GET", bad).status_code == 400, bad
    # a write to another table's prefix through orders' endpoint, and a read of a table mallory lacks
    assert sign(lake, "PUT", lake.url(f"/{lake.key('secret', 'data/x.parquet')}")).status_code == 403
    assert (
        sign(lake, "GET", lake.url(f"/{lake.key('secret', 'data/secret.parquet')}"), signer="legacy").status_code == 403
    )


def test_legacy_signer_works_with_a_table_on_another_store(lake: Lake, tmp_path: Any) -> None:
    """A table whose location is not on this catalog's S3 store must not break the legacy signer."""
    catalog = lake.handle.services.catalog
    catalog.create_table(
        ("ns", "elsewhere"),
        Schema(NestedField(1, "id", LongType(), required=False)),
        location=(tmp_path / "t").as_uri(),
    )
    etl = {"Authorization": f"Bearer {lake.handle.admin.token_for('etl')}"}
    base = f"{lake.handle.uri}{P}/namespaces/ns/tables/elsewhere"
    assert httpx.get(base, headers=etl).status_code == 200
    assert httpx.get(f"{base}/credentials", headers=etl).status_code == 200  # the catalog now knows its location
    own = lake.key("orders", "data/orders.parquet")
    r, s3 = attempt(lake, "GET", lake.url(f"/{own}"), signer="legacy")
    assert r.status_code == 200 and s3 is not None and s3.status_code == 200, refused(r, s3)
    assert s3.content == b"orders rows"
