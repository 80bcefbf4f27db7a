"""Reading the stores' own words: which refusals are authorization refusals, which operation, which cause.

The texts are what pyarrow 26, the AWS SDK for Java v2 (Iceberg's S3FileIO) and SeaweedFS/moto said
on these machines (the end-to-end tests in test_store_denials*.py produce the first two for real).
"""

from __future__ import annotations

import pytest

from lakesession.credentials._denials import (
    DENIED,
    EXPIRED,
    READ_ONLY,
    REVOKED,
    likely_cause,
    parse_denial,
    storage_error,
)
from lakesession.errors import LakesessionError, StorageAccessError

PYARROW_WRITE = (
    "When initiating multiple part upload for key 'wh/shop/orders/data/00000-0-x.parquet' in bucket 'lake': "
    "AWS Error ACCESS_DENIED during CreateMultipartUpload operation: Access Denied (Request ID: XoX)"
)
PYARROW_HEAD_403 = (
    "When reading information for key 'wh/shop/orders/metadata/snap.avro' in bucket 'lake': "
    "AWS Error UNKNOWN (HTTP status 403) during HeadObject operation: No response body."
)
JAVA_DENIED = (
    "software.amazon.awssdk.services.s3.model.S3Exception: Access Denied (Service: S3, Status Code: 403, "
    "Request ID: 1)\n\tat org.apache.iceberg.aws.s3.S3OutputStream.completeUploads(S3OutputStream.java:440)"
)
JAVA_EXPIRED = "S3Exception: The provided token has expired. (Service: S3, Status Code: 400, Request ID: 2)"
SEAWEED_EXPIRED = (
    "S3Exception: The AWS access key Id you provided does not exist in our records. (Service: S3, Status Code: 403)"
)


def test_pyarrow_write_refusal_names_request_operation_and_object() -> None:
    d = parse_denial(PYARROW_WRITE)
    assert d is not None and d.code == "AccessDenied" and d.operation == "write"
    assert d.request == "CreateMultipartUpload" and d.path == "s3://lake/wh/shop/orders/data/00000-0-x.parquet"
    assert likely_cause(d) == READ_ONLY
    assert likely_cause(d, mode="write") == DENIED  # a writer's refusal is no read-only grant
    assert likely_cause(d, revoked=True) == REVOKED


def test_bodiless_403_is_a_refusal_and_expiry_is_told_apart() -> None:
    d = parse_denial(PYARROW_HEAD_403)
    assert d is not None and d.code == "AccessDenied" and d.operation == "read"
    assert likely_cause(d) == DENIED and likely_cause(d, expired=True) == EXPIRED


@pytest.mark.parametrize(("text", "code"), [(JAVA_EXPIRED, "ExpiredToken"), (SEAWEED_EXPIRED, "InvalidAccessKeyId")])
def test_expired_keys_in_the_sdks_words(text: str, code: str) -> None:
    d = parse_denial(text, operation="read")
    assert d is not None and d.code == code and likely_cause(d) == EXPIRED


def test_java_refusal_takes_the_callers_operation() -> None:
    d = parse_denial(JAVA_DENIED, operation="write")
    assert d is not None and d.code == "AccessDenied" and d.operation == "write" and d.request is None


@pytest.mark.parametrize(
    "text",
    [
        "Path does not exist 'lake/wh/x.parquet'. Detail: [errno 2] No such file or directory",
        "org.apache.iceberg.exceptions.ForbiddenException: Forbidden: not authorized on table shop.orders",
        "When reading information for key 'k' in bucket 'b': AWS Error NETWORK_CONNECTION during HeadObject operation",
    ],
)
def test_other_failures_are_not_store_refusals(text: str) -> None:
    assert parse_denial(text) is None


def test_the_error_is_one_line_in_ipython_and_names_everything() -> None:
    d = parse_denial(PYARROW_WRITE)
    assert d is not None
    err = storage_error(d, table="shop.orders", principal="reader", cause=likely_cause(d))
    assert isinstance(err, StorageAccessError) and isinstance(err, LakesessionError)
    assert (err.table, err.operation, err.principal, err.reason) == ("shop.orders", "write", "reader", READ_ONLY)
    shown = err._render_traceback_()
    assert len(shown) == 1 and "refused to write table shop.orders as reader" in shown[0]
    assert "CreateMultipartUpload on s3://lake/wh/shop/orders/data/00000-0-x.parquet" in shown[0]


class _Held:
    """What ``_spark._denials`` reads of a Session: its gateway's access log, its identity, whether closed."""

    def __init__(self, principal: str) -> None:
        from lakesession.gateway import AccessLog

        self.access_log = AccessLog()
        self._identity = type("Id", (), {"principal": principal})()
        self.closed = False


def test_spark_denials_name_the_table_loaded_last_and_a_revocation_since() -> None:
    """The table a failed job wrote is the one its gateway loaded last (across the process's sessions);
    a refresh the catalog refused since then makes the cause "revoked"."""
    import time

    from lakesession._spark import _denials
    from lakesession.gateway import AccessRecord

    now = time.time()
    alice, bob = _Held("alice"), _Held("bob")
    for who in (alice, bob):
        _denials.register(who)
    alice.access_log.add(AccessRecord(now - 20, "load_table", "table sales.src", 200, 1.0))
    alice.access_log.add(AccessRecord(now - 10, "load_table", "table sales.dst", 200, 1.0))
    bob.access_log.add(AccessRecord(now - 300, "load_table", "table hr.pay", 200, 1.0))
    found = _denials._suspect(now)
    assert found is not None
    session, table, revoked, also = found
    assert session is alice and table == "sales.dst" and not revoked and also == ["sales.src"]
    alice.access_log.add(AccessRecord(now - 5, "refresh_credentials", "table sales.dst", 403, 1.0))
    assert _denials._suspect(now)[2] is True  # type: ignore[index]
    alice.closed = True
    assert _denials._suspect(now)[1] == "hr.pay"  # type: ignore[index]  # a closed session's loads are no suspects
    bob.closed = True


# adlfs on Azurite (tests/interop/test_clouds_adls.py produces it for real), and pyarrow's GcsFileSystem, whose
# errors are ``"google::cloud::Status(" << status << ")"`` (arrow/filesystem/gcsfs_internal.cc): fake-gcs-server
# checks no token, so this one is the format's, not a recording
ADLS_WRITE = (
    "Failed to upload block: This request is not authorized to perform this operation using this permission.\n"
    "RequestId:c0b0da8c\nTime:2026-11-28T01:23:59.145Z\nErrorCode:AuthorizationPermissionMismatch\nContent: <Error>"
)
GCS_WRITE = (
    "google::cloud::Status(PERMISSION_DENIED: Permanent error in UploadChunk: reader@x.iam.gserviceaccount.com does "
    "not have storage.objects.create access to the Google Cloud Storage object. http_status_code=403)"
)
GCS_EXPIRED = "google::cloud::Status(UNAUTHENTICATED: Permanent error in ReadObject: Invalid Credentials)"


@pytest.mark.parametrize(
    ("text", "code", "cause"),
    [
        (ADLS_WRITE, "AuthorizationPermissionMismatch", READ_ONLY),
        (GCS_WRITE, "PERMISSION_DENIED", READ_ONLY),
        (GCS_EXPIRED, "UNAUTHENTICATED", EXPIRED),
    ],
)
def test_azure_and_gcs_refusals_in_their_own_words(text: str, code: str, cause: str) -> None:
    d = parse_denial(text, operation="write" if cause == READ_ONLY else "read")
    assert d is not None and d.code == code and likely_cause(d) == cause
    assert parse_denial("google::cloud::Status(NOT_FOUND: No such object: wh/x http_status_code=404)") is None
