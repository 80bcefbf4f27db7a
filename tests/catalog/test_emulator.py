"""The embedded S3 + STS emulator enforces what AWS enforces for vended credentials.

Real boto3 clients, real SigV4, loopback HTTP. No mocks.
"""

from __future__ import annotations

import json
import time

import pytest
import requests
from botocore.exceptions import ClientError

from lakesession.reference.storage import S3Emulator, prefixes_session_policy, split_s3_location, table_session_policy
from lakesession.reference.storage.emulator import SUPPORTED_MOTO_VERSION, Credentials, check_moto_version
from lakesession.reference.storage.policy import evaluate, is_allowed, wildcard_match

BUCKET = "lake-emu-test"
ORDERS = f"s3://{BUCKET}/wh/orders"


def _error(exc_info: pytest.ExceptionInfo[ClientError]) -> tuple[str, int]:
    err = exc_info.value.response
    return err["Error"]["Code"], err["ResponseMetadata"]["HTTPStatusCode"]


def denied(call, *args, code: str = "AccessDenied", status: int = 403, **kwargs) -> None:
    with pytest.raises(ClientError) as exc:
        call(*args, **kwargs)
    assert _error(exc) == (code, status)


@pytest.fixture(scope="module")
def emu():
    with S3Emulator() as emulator:
        emulator.create_bucket(BUCKET)
        s3 = emulator.client("s3")
        for key in (
            "wh/orders/data/a.parquet",
            "wh/orders/metadata/v1.json",
            "wh/orders_archive/data/old.parquet",
            "wh/customers/data/c.parquet",
        ):
            s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
        yield emulator


# --- the session policy (pure)


def test_table_session_policy_normalises_and_is_path_boundary_safe():
    read = table_session_policy("s3://b/wh/orders", write=False)
    assert read == table_session_policy("s3://b/wh/orders/", write=False)
    assert read == table_session_policy("s3a://b//wh/orders//", write=False)
    assert split_s3_location("s3://b/wh/orders/") == ("b", "wh/orders")
    objects = next(s for s in read["Statement"] if "s3:GetObject" in s["Action"])  # packed: one statement, no Sid
    assert objects["Resource"] == ["arn:aws:s3:::b/wh/orders", "arn:aws:s3:::b/wh/orders/*"]
    assert set(objects["Action"]) == {"s3:GetObject", "s3:GetObjectVersion"}
    listing = next(s for s in read["Statement"] if s["Action"] == "s3:ListBucket")
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["wh/orders/*"]}}
    write = table_session_policy("s3://b/wh/orders", write=True)
    actions = {a for s in write["Statement"] for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert {
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
    } <= actions
    assert "s3:ListBucketMultipartUploads" not in actions  # bucket-wide: it would show other tables' uploads
    assert len(json.dumps(write, separators=(",", ":"))) <= 2048  # STS plain-text session policy limit

    for bad in ("s3://b", "s3://b/", "gs://b/x", "s3://b/wh/*", "s3://b/wh/ord?rs", "s3://b/${aws:username}"):
        with pytest.raises(ValueError):
            table_session_policy(bad, write=False)

    def ok(action: str, resource: str, **ctx: str) -> bool:
        return evaluate([read], action, resource, ctx) == "Allow"

    assert ok("s3:GetObject", "arn:aws:s3:::b/wh/orders/data/x.parquet")
    assert not ok("s3:GetObject", "arn:aws:s3:::b/wh/orders_archive/x")
    assert ok("s3:GetObject", "arn:aws:s3:::b/wh/orders")  # the directory key itself: S3A's and pyarrow's HEAD
    assert not ok("s3:GetObject", "arn:aws:s3:::b/wh/orders_archive")
    assert not ok("s3:PutObject", "arn:aws:s3:::b/wh/orders")  # never write a file shadowing the directory
    assert not ok("s3:PutObject", "arn:aws:s3:::b/wh/orders/x")
    assert ok("S3:getobject", "arn:aws:s3:::b/wh/orders/x")  # actions are case-insensitive
    assert ok("s3:ListBucket", "arn:aws:s3:::b", **{"s3:prefix": "wh/orders/"})
    assert not ok("s3:ListBucket", "arn:aws:s3:::b", **{"s3:prefix": "wh/orders"})  # would list wh/orders_archive names
    assert not ok("s3:ListBucket", "arn:aws:s3:::b", **{"s3:prefix": "wh/orders_archive"})
    assert not ok("s3:ListBucket", "arn:aws:s3:::b", **{"s3:prefix": "wh/"})
    assert not ok("s3:ListBucket", "arn:aws:s3:::b")  # no prefix: condition key absent

    both = prefixes_session_policy(["s3://b/wh/orders/", "s3://b/raw/landing", "s3://c/x/y"], write=False)
    union = lambda action, resource, **ctx: evaluate([both], action, resource, ctx) == "Allow"  # noqa: E731
    assert union("s3:GetObject", "arn:aws:s3:::b/wh/orders/1") and union("s3:GetObject", "arn:aws:s3:::b/raw/landing/2")
    assert union("s3:GetObject", "arn:aws:s3:::c/x/y/3") and union(
        "s3:ListBucket", "arn:aws:s3:::c", **{"s3:prefix": "x/y/"}
    )
    assert not union("s3:GetObject", "arn:aws:s3:::b/raw/landing_old/2")
    assert not union("s3:GetObject", "arn:aws:s3:::c/wh/orders/1")  # prefixes stay with their bucket
    assert not union("s3:ListBucket", "arn:aws:s3:::c", **{"s3:prefix": "raw/landing/"})
    assert union("s3:ListBucket", "arn:aws:s3:::b", **{"s3:prefix": "raw/landing/"})
    with pytest.raises(ValueError):
        prefixes_session_policy([], write=False)


def test_evaluator_conditions_and_deny():
    assert wildcard_match("a/*/c?", "a/x/y/cd") and not wildcard_match("a/*", "A/x")
    doc = {
        "Statement": [
            {"Effect": "Allow", "Action": "s3:*", "Resource": "*"},
            {"Effect": "Deny", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/keep/*"},
            {
                "Effect": "Deny",
                "Action": "s3:*",
                "Resource": "*",
                "Condition": {"StringNotEquals": {"aws:SourceIp": "127.0.0.1"}},
            },
        ]
    }
    ctx = {"aws:SourceIp": "127.0.0.1"}
    assert evaluate([doc], "s3:DeleteObject", "arn:aws:s3:::b/x", ctx) == "Allow"
    assert evaluate([doc], "s3:DeleteObject", "arn:aws:s3:::b/keep/x", ctx) == "Deny"
    assert evaluate([doc], "s3:GetObject", "arn:aws:s3:::b/x", {"aws:sourceip": "10.0.0.1"}) == "Deny"
    assert evaluate([doc], "s3:GetObject", "arn:aws:s3:::b/x", {}) == "Deny"  # negated operator, key absent: true
    session = {"Statement": [{"Effect": "Allow", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}
    assert is_allowed([doc], [session], "s3:GetObject", "arn:aws:s3:::b/x", ctx)
    assert not is_allowed([doc], [session], "s3:PutObject", "arn:aws:s3:::b/x", ctx)  # intersection
    odd = {
        "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*", "Condition": {"Frobnicate": {"k": "v"}}}]
    }
    assert not is_allowed([odd], None, "s3:GetObject", "arn:aws:s3:::b/x", {})  # unsupported operator: fail closed
    ifexists = {
        "Statement": [
            {
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": "*",
                "Condition": {"StringLikeIfExists": {"s3:prefix": "a/*"}},
            }
        ]
    }
    assert is_allowed([ifexists], None, "s3:ListBucket", "arn:aws:s3:::b", {})
    assert not is_allowed([ifexists], None, "s3:ListBucket", "arn:aws:s3:::b", {"s3:prefix": "b/"})


def test_moto_version_is_pinned():
    check_moto_version()
    assert SUPPORTED_MOTO_VERSION == "5.2.1"
    with pytest.raises(RuntimeError, match=r"moto==5\.2\.1.*found moto 5\.3\.0"):
        check_moto_version("5.3.0")


# --- authentication


def test_unsigned_and_unknown_credentials_are_rejected(emu):
    url = f"{emu.endpoint}/{BUCKET}/wh/orders/data/a.parquet"
    assert requests.get(url, timeout=5).status_code == 403
    assert requests.put(f"{emu.endpoint}/{BUCKET}/wh/orders/new", data=b"x", timeout=5).status_code == 403
    listing = requests.get(f"{emu.endpoint}/{BUCKET}?list-type=2", timeout=5)
    assert listing.status_code == 403 and b"AccessDenied" in listing.content
    sts = requests.post(emu.endpoint, data={"Action": "GetCallerIdentity", "Version": "2011-06-15"}, timeout=5)
    assert sts.status_code == 403
    assert requests.post(f"{emu.endpoint}/moto-api/reset", timeout=5).status_code == 404
    for header in ("AWS4-HMAC-SHA256 garbage", "Bearer", f"AWS {emu.admin_credentials.access_key_id}:c2ln"):
        assert requests.get(url, headers={"Authorization": header}, timeout=5).status_code == 400  # never 500
    no_date = (
        f"AWS4-HMAC-SHA256 Credential={emu.admin_credentials.access_key_id}/20260101/us-east-1/s3/aws4_request,"
        f" SignedHeaders=host, Signature={'0' * 64}"
    )
    assert requests.get(url, headers={"Authorization": no_date}, timeout=5).status_code == 403

    unknown = emu.client("s3", Credentials("UNKNOWNKEYID0000", "notasecret" + "x" * 30))
    denied(unknown.get_object, Bucket=BUCKET, Key="wh/orders/data/a.parquet", code="InvalidAccessKeyId")
    denied(unknown.list_buckets, code="InvalidAccessKeyId")
    wrong_secret = emu.client("s3", Credentials(emu.admin_credentials.access_key_id, "x" * 40))
    denied(wrong_secret.get_object, Bucket=BUCKET, Key="wh/orders/data/a.parquet", code="SignatureDoesNotMatch")
    denied(
        emu.client("sts", Credentials("UNKNOWNKEYID0000", "y" * 40)).get_caller_identity, code="InvalidClientTokenId"
    )
    creds = emu.assume(table_session_policy(ORDERS, write=False))
    bad_token = emu.client("s3", Credentials(creds.access_key_id, creds.secret_access_key, "not-the-token"))
    denied(bad_token.get_object, Bucket=BUCKET, Key="wh/orders/data/a.parquet", code="InvalidToken", status=400)


def test_admin_creates_buckets_and_objects(emu):
    s3 = emu.client("s3")
    s3.create_bucket(Bucket="lake-emu-admin")
    for key in ("t/id=1/part 0.parquet", "t/ümlaut+plus.json", "t/a~b!c'd(e).txt"):  # SigV4 over encoded paths
        s3.put_object(Bucket="lake-emu-admin", Key=key, Body=b"payload")
        assert s3.get_object(Bucket="lake-emu-admin", Key=key)["Body"].read() == b"payload"
    assert s3.list_objects_v2(Bucket="lake-emu-admin")["KeyCount"] == 3
    assert {b["Name"] for b in s3.list_buckets()["Buckets"]} >= {BUCKET, "lake-emu-admin"}
    ident = emu.client("sts").get_caller_identity()
    assert ident["Arn"] == emu.admin_arn and ident["Account"] == emu.account_id


# --- scoped sessions


def test_read_only_session_is_scoped_to_the_table_prefix(emu):
    s3 = emu.client("s3", emu.assume(table_session_policy(ORDERS, write=False)))
    assert s3.get_object(Bucket=BUCKET, Key="wh/orders/data/a.parquet")["Body"].read() == b"wh/orders/data/a.parquet"
    assert s3.head_object(Bucket=BUCKET, Key="wh/orders/metadata/v1.json")["ContentLength"] > 0
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="wh/orders/")["Contents"]]
    assert keys == ["wh/orders/data/a.parquet", "wh/orders/metadata/v1.json"]
    # s3:prefix "wh/orders" (no slash) is refused: it would list the names under wh/orders_archive/ too
    denied(s3.list_objects_v2, Bucket=BUCKET, Prefix="wh/orders")
    assert s3.list_objects(Bucket=BUCKET, Prefix="wh/orders/data/")["Contents"][0]["Key"] == "wh/orders/data/a.parquet"
    s3.get_bucket_location(Bucket=BUCKET)

    denied(s3.get_object, Bucket=BUCKET, Key="wh/orders_archive/data/old.parquet")
    for dotted in ("wh/orders/../orders_archive/data/old.parquet", "wh/orders/%2e%2e/orders_archive/data/old.parquet"):
        denied(s3.get_object, Bucket=BUCKET, Key=dotted, code="NoSuchKey", status=404)  # keys are literal
    denied(s3.get_object, Bucket=BUCKET, Key="wh/customers/data/c.parquet")
    denied(s3.put_object, Bucket=BUCKET, Key="wh/orders/data/new.parquet", Body=b"x")
    denied(s3.delete_object, Bucket=BUCKET, Key="wh/orders/data/a.parquet")
    denied(s3.list_objects_v2, Bucket=BUCKET, Prefix="wh/orders_archive")
    denied(s3.list_objects_v2, Bucket=BUCKET, Prefix="wh/orders_archive/")
    denied(s3.list_objects_v2, Bucket=BUCKET, Prefix="wh/")
    denied(s3.list_objects_v2, Bucket=BUCKET)
    denied(s3.create_bucket, Bucket="lake-emu-nope")
    denied(s3.list_buckets)
    denied(
        emu.client("sts", emu.assume(table_session_policy(ORDERS, write=False))).assume_role,
        RoleArn=emu.vending_role_arn,
        RoleSessionName="chain",
    )


def test_write_session_puts_deletes_and_uploads_only_under_the_prefix(emu):
    s3 = emu.client("s3", emu.assume(table_session_policy(ORDERS, write=True)))
    s3.put_object(Bucket=BUCKET, Key="wh/orders/data/w.parquet", Body=b"w")
    assert s3.get_object(Bucket=BUCKET, Key="wh/orders/data/w.parquet")["Body"].read() == b"w"
    s3.delete_object(Bucket=BUCKET, Key="wh/orders/data/w.parquet")
    denied(s3.put_object, Bucket=BUCKET, Key="wh/orders_archive/data/w.parquet", Body=b"w")
    denied(s3.put_object, Bucket=BUCKET, Key="wh/orders", Body=b"w")
    denied(s3.delete_object, Bucket=BUCKET, Key="wh/customers/data/c.parquet")
    # a copy reads its source: not from another table
    denied(
        s3.copy_object,
        Bucket=BUCKET,
        Key="wh/orders/data/stolen.parquet",
        CopySource={"Bucket": BUCKET, "Key": "wh/customers/data/c.parquet"},
    )
    s3.copy_object(
        Bucket=BUCKET,
        Key="wh/orders/data/copy.parquet",
        CopySource={"Bucket": BUCKET, "Key": "wh/orders/data/a.parquet"},
    )

    key = "wh/orders/data/big.parquet"
    upload = s3.create_multipart_upload(Bucket=BUCKET, Key=key)["UploadId"]
    part = s3.upload_part(Bucket=BUCKET, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * 1024)
    assert [p["PartNumber"] for p in s3.list_parts(Bucket=BUCKET, Key=key, UploadId=upload)["Parts"]] == [1]
    denied(s3.list_multipart_uploads, Bucket=BUCKET)  # other tables' uploads stay unseen
    s3.complete_multipart_upload(
        Bucket=BUCKET, Key=key, UploadId=upload, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
    )
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"p" * 1024
    aborted = s3.create_multipart_upload(Bucket=BUCKET, Key="wh/orders/data/tmp.parquet")["UploadId"]
    s3.abort_multipart_upload(Bucket=BUCKET, Key="wh/orders/data/tmp.parquet", UploadId=aborted)
    denied(s3.create_multipart_upload, Bucket=BUCKET, Key="wh/orders_archive/data/big.parquet")

    # DeleteObjects: allowed keys go; any key outside the prefix denies the batch
    result = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": "wh/orders/data/copy.parquet"}]})
    assert [d["Key"] for d in result["Deleted"]] == ["wh/orders/data/copy.parquet"]
    result = s3.delete_objects(
        Bucket=BUCKET,
        Delete={"Objects": [{"Key": "wh/orders/data/big.parquet"}, {"Key": "wh/customers/data/c.parquet"}]},
    )
    assert {e["Code"] for e in result["Errors"]} == {"AccessDenied"} and not result.get("Deleted")
    assert emu.client("s3").head_object(Bucket=BUCKET, Key="wh/customers/data/c.parquet")


@pytest.mark.slow  # waits for real expiry (~3 s): off the fast set (5-min budget)
def test_credentials_expire_with_expired_token(emu):
    creds = emu.assume(table_session_policy(ORDERS, write=False), duration_seconds=3)
    s3, sts = emu.client("s3", creds), emu.client("sts", creds)
    s3.get_object(Bucket=BUCKET, Key="wh/orders/data/a.parquet")
    assert sts.get_caller_identity()["Arn"].endswith("assumed-role/lakesession-vending/lakesession")
    time.sleep(3.2)
    with pytest.raises(ClientError) as exc:
        s3.get_object(Bucket=BUCKET, Key="wh/orders/data/a.parquet")
    assert _error(exc) == ("ExpiredToken", 400)
    assert exc.value.response["Error"]["Message"] == "The provided token has expired."
    denied(s3.list_objects_v2, Bucket=BUCKET, Prefix="wh/orders/", code="ExpiredToken", status=400)
    denied(sts.get_caller_identity, code="ExpiredToken", status=403)

    revoked = emu.assume(table_session_policy(ORDERS, write=False))
    emu.expire(revoked.access_key_id)
    denied(
        emu.client("s3", revoked).get_object,
        Bucket=BUCKET,
        Key="wh/orders/data/a.parquet",
        code="ExpiredToken",
        status=400,
    )


def test_session_policy_cannot_exceed_the_role_policy(emu):
    emu.create_bucket("lake-emu-b1")
    emu.create_bucket("lake-emu-b2")
    admin = emu.client("s3")
    for bucket in ("lake-emu-b1", "lake-emu-b2"):
        admin.put_object(Bucket=bucket, Key="t/data/x", Body=b"x")
    b1_only = emu.create_role(
        "b1-only",
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Action": "s3:*",
                    "Resource": ["arn:aws:s3:::lake-emu-b1", "arn:aws:s3:::lake-emu-b1/*"],
                }
            ],
        },
    )
    on_b2 = emu.client("s3", emu.assume(table_session_policy("s3://lake-emu-b2/t", write=True), role_arn=b1_only))
    denied(on_b2.get_object, Bucket="lake-emu-b2", Key="t/data/x")
    denied(on_b2.list_objects_v2, Bucket="lake-emu-b2", Prefix="t/")
    on_b1 = emu.client("s3", emu.assume(table_session_policy("s3://lake-emu-b1/t", write=False), role_arn=b1_only))
    assert on_b1.get_object(Bucket="lake-emu-b1", Key="t/data/x")["Body"].read() == b"x"
    denied(on_b1.put_object, Bucket="lake-emu-b1", Key="t/data/y", Body=b"y")  # session is read-only
    unscoped = emu.client("s3", emu.assume(role_arn=b1_only))  # no session policy: the role's own policy
    unscoped.put_object(Bucket="lake-emu-b1", Key="anything", Body=b"y")
    denied(unscoped.get_object, Bucket="lake-emu-b2", Key="t/data/x")


def test_assume_role_is_validated(emu):
    policy = table_session_policy(ORDERS, write=False)
    denied(emu.assume, policy, role_arn=f"arn:aws:iam::{emu.account_id}:role/missing")
    denied(emu.assume, "{not json", code="MalformedPolicyDocument", status=400)
    denied(
        emu.assume,
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:GetObject"}]},
        code="MalformedPolicyDocument",
        status=400,
    )
    huge = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": "s3:GetObject", "Resource": f"arn:aws:s3:::{BUCKET}/{'x' * 2100}/*"}
        ],
    }
    denied(emu.assume, huge, code="ValidationError", status=400)
    denied(emu.assume, policy, duration_seconds=0, code="ValidationError", status=400)
    denied(emu.assume, policy, duration_seconds=43201, code="ValidationError", status=400)
    untrusted = emu.create_role(
        "trusts-nobody",
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]},
        trusted_principals=["arn:aws:iam::000000000000:root"],
    )
    denied(emu.assume, policy, role_arn=untrusted)


def test_two_emulators_are_isolated(emu):
    started = time.perf_counter()
    other = S3Emulator().start()
    startup = time.perf_counter() - started
    print(f"\nS3Emulator().start(): {startup * 1000:.1f} ms")
    assert startup < 1.0
    try:
        assert other.account_id != emu.account_id and other.endpoint != emu.endpoint
        other.create_bucket("lake-emu-other")
        mine, theirs = emu.client("s3"), other.client("s3")
        theirs.put_object(Bucket="lake-emu-other", Key="k", Body=b"other")
        denied(mine.get_object, Bucket="lake-emu-other", Key="k")  # another account's bucket
        denied(theirs.get_object, Bucket=BUCKET, Key="wh/orders/data/a.parquet")
        # keys are only valid at the emulator that issued them
        cross = other.client("s3", emu.admin_credentials)
        denied(cross.get_object, Bucket="lake-emu-other", Key="k", code="InvalidAccessKeyId")
        with pytest.raises(ValueError, match="global"):
            other.create_bucket(BUCKET)
        other.reset()
        assert other.client("s3").list_buckets()["Buckets"] == []
        assert mine.get_object(Bucket=BUCKET, Key="wh/orders/data/a.parquet")["Body"].read()
    finally:
        other.stop(clear=True)
    assert mine.list_objects_v2(Bucket=BUCKET, Prefix="wh/")["KeyCount"] >= 4


def test_pyarrow_s3_filesystem_with_vended_credentials(emu):
    """pyiceberg's FileIO writes through pyarrow (AWS SDK for C++): multipart and all."""
    pafs = pytest.importorskip("pyarrow.fs")
    creds = emu.assume(table_session_policy(ORDERS, write=True))
    fs = pafs.S3FileSystem(
        access_key=creds.access_key_id,
        secret_key=creds.secret_access_key,
        session_token=creds.session_token,
        endpoint_override=emu.endpoint,
        scheme="http",
        region=emu.region,
        force_virtual_addressing=False,
    )
    with fs.open_output_stream(f"{BUCKET}/wh/orders/metadata/v2.metadata.json") as out:
        out.write(b'{"format-version": 2}')
    with fs.open_input_stream(f"{BUCKET}/wh/orders/metadata/v2.metadata.json") as src:
        assert src.read() == b'{"format-version": 2}'
    with pytest.raises(OSError, match="(?i)access[ _]?denied"):
        fs.open_input_stream(f"{BUCKET}/wh/orders_archive/data/old.parquet").read()
    with pytest.raises(OSError, match="(?i)access[ _]?denied"):
        with fs.open_output_stream(f"{BUCKET}/wh/orders_archive/x.json") as out:
            out.write(b"x")


def test_a_request_without_host_is_a_400_not_a_500(emu):
    """HTTP/1.0 allows no Host header; moto then fails with a 500 (client input must never be a 5xx)."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(emu.endpoint)
    with socket.create_connection((where.hostname, where.port), timeout=10) as sock:
        sock.sendall(b"GET /bucket-x/some/key HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.split(b"\r\n", 1)[0].split()[1] == b"400", answer[:200]


def _signed_get(emu, url: str, headers: dict[str, str], signed: list[str], creds=None):  # type: ignore[no-untyped-def]
    """A GET signed with SigV4 over exactly ``signed`` (as AWS SDK v1 signs: User-Agent included)."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    key = creds or emu.admin_credentials
    request = AWSRequest(method="GET", url=url, headers=headers)

    class AsSdkV1(S3SigV4Auth):
        def headers_to_sign(self, request):  # type: ignore[no-untyped-def]
            mine = super().headers_to_sign(request)
            for name, value in request.headers.items():
                if name.lower() in signed and name.lower() not in mine:
                    mine[name.lower()] = value
            for name in list(mine.keys()):
                if name not in signed:
                    del mine[name]
            return mine

    AsSdkV1(BotoCredentials(key.access_key_id, key.secret_access_key), "s3", emu.region).add_auth(request)
    return dict(request.headers.items())


def test_sigv4_is_checked_over_exactly_the_headers_the_client_signed(emu):
    """AWS SDK v1 (Hadoop 3.3's S3A, Spark 3.5) signs User-Agent; botocore, which moto re-signs with, never does:
    moto answered every SDK v1 request SignatureDoesNotMatch. Signed headers are verified as signed, no more."""
    url = f"{emu.endpoint}/{BUCKET}/wh/orders/data/a.parquet"
    ua = {"User-Agent": "aws-sdk-java/1.12.262 Linux/6.1 Hadoop 3.3.4"}
    headers = _signed_get(emu, url, ua, ["host", "user-agent", "x-amz-content-sha256", "x-amz-date"])
    assert "user-agent" in headers["Authorization"]
    ok = requests.get(url, headers=headers, timeout=5)
    assert ok.status_code == 200, ok.text
    assert ok.content == b"wh/orders/data/a.parquet"
    # a header nobody signed changes nothing; a signed one altered in transit fails
    assert requests.get(url, headers={**headers, "X-Extra": "1"}, timeout=5).status_code == 200
    tampered = requests.get(url, headers={**headers, "User-Agent": "something-else"}, timeout=5)
    assert tampered.status_code == 403 and b"SignatureDoesNotMatch" in tampered.content
    # AWS requires the Host header among the signed ones
    no_host = _signed_get(emu, url, ua, ["user-agent", "x-amz-content-sha256", "x-amz-date"])
    refused = requests.get(url, headers=no_host, timeout=5)
    assert refused.status_code == 403 and b"SignatureDoesNotMatch" in refused.content
    # a session key scoped elsewhere still gets no byte, however it signs
    other = emu.assume(table_session_policy(f"s3://{BUCKET}/wh/customers", write=False))
    scoped = _signed_get(
        emu,
        url,
        ua,
        ["host", "user-agent", "x-amz-content-sha256", "x-amz-date", "x-amz-security-token"],
        Credentials(other.access_key_id, other.secret_access_key, other.session_token),
    )
    assert (
        requests.get(url, headers={**scoped, "X-Amz-Security-Token": other.session_token}, timeout=5).status_code == 403
    )
