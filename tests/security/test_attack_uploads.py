"""Vended write credentials must not reveal other tables' multipart uploads (issue 23, finding 8).

hr starts a multipart upload in its own table (the upload's key and id are what an attacker needs to
add parts to it or abort it); sales, a writer of another table, lists the bucket's uploads with its
vended credentials. The store decides: the embedded emulator (moto with session-policy hooks) and
SeaweedFS (an independent S3 + STS that enforces session policies itself).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from botocore.exceptions import ClientError

from lakesession.reference import ReferenceCatalog, start
from tests._seaweedfs import key_settings, seaweedfs
from tests.factories import Policy, make_catalog, vended_s3_client
from tests.support import load_vended

POLICY = (
    Policy()
    .service("etl", "etl-secret-up", role="eng")
    .user("hr", "hr-secret-up", role="hr-writers")
    .user("sales", "sales-secret-up", role="sales-writers")
    .grant("eng", "CATALOG_MANAGE_CONTENT", "catalog")
    .grant_all("hr-writers", ["TABLE_READ_DATA", "TABLE_WRITE_DATA"], "namespace hr")
    .grant_all("sales-writers", ["TABLE_READ_DATA", "TABLE_WRITE_DATA"], "namespace sales")
)
SCHEMA = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def _prepare(handle: ReferenceCatalog) -> ReferenceCatalog:
    etl = {"Authorization": f"Bearer {handle.admin.token_for('etl')}"}
    for ns, table in (("hr", "salaries"), ("sales", "orders")):
        assert httpx.post(f"{handle.uri}/v1/lakesession/namespaces", headers=etl, json={"namespace": [ns]}).is_success
        created = httpx.post(
            f"{handle.uri}/v1/lakesession/namespaces/{ns}/tables", headers=etl, json={"name": table, "schema": SCHEMA}
        )
        assert created.is_success, created.text
    return handle


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReferenceCatalog]:
    with make_catalog(
        POLICY, bucket="uploads-bucket", credential_ttl=900, data_dir=tmp_path_factory.mktemp("uploads")
    ) as handle:
        yield _prepare(handle)


def vended_s3(handle: ReferenceCatalog, who: str, ns: str, table: str) -> tuple[Any, str, str]:
    """loadTable as ``who`` with vended credentials (the real REST call): an S3 client with those
    credentials, the bucket and the table's key prefix."""
    body = load_vended(handle.uri, handle.admin.token_for(who), ns, table).json()
    cfg = dict(body.get("config") or {})
    for cred in body.get("storage-credentials") or []:
        cfg.update(cred["config"])
    assert cfg.get("s3.session-token"), "no credentials were vended"
    bucket, _, key = body["metadata"]["location"].split("://", 1)[1].partition("/")
    s3 = vended_s3_client(
        cfg.get("s3.endpoint") or handle.settings.s3.endpoint, cfg, cfg.get("client.region", "us-east-1")
    )
    return s3, bucket, key.rstrip("/") + "/"


def attack(handle: ReferenceCatalog) -> None:
    hr, bucket, hr_prefix = vended_s3(handle, "hr", "hr", "salaries")
    upload = hr.create_multipart_upload(Bucket=bucket, Key=hr_prefix + "data/payroll.parquet")["UploadId"]
    try:
        sales, _, sales_prefix = vended_s3(handle, "sales", "sales", "orders")
        with pytest.raises(ClientError) as denied:  # fa6e17e: lists hr's key and upload id
            sales.list_multipart_uploads(Bucket=bucket)
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
        with pytest.raises(ClientError):  # not even "only my prefix": the action is not granted at all
            sales.list_multipart_uploads(Bucket=bucket, Prefix=hr_prefix)
        # what writers need still works: a multipart upload of their own, start to finish
        key = sales_prefix + "data/big.parquet"
        own = sales.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        part = sales.upload_part(Bucket=bucket, Key=key, UploadId=own, PartNumber=1, Body=b"p" * 1024)
        assert [p["PartNumber"] for p in sales.list_parts(Bucket=bucket, Key=key, UploadId=own)["Parts"]] == [1]
        sales.complete_multipart_upload(
            Bucket=bucket, Key=key, UploadId=own, MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]}
        )
        assert sales.get_object(Bucket=bucket, Key=key)["Body"].read() == b"p" * 1024
        with pytest.raises(ClientError):  # and hr's upload stays out of reach by id
            sales.abort_multipart_upload(Bucket=bucket, Key=hr_prefix + "data/payroll.parquet", UploadId=upload)
    finally:
        hr.abort_multipart_upload(Bucket=bucket, Key=hr_prefix + "data/payroll.parquet", UploadId=upload)


def test_write_credentials_do_not_list_other_tables_uploads_emulator(emulated: ReferenceCatalog) -> None:
    attack(emulated)


@pytest.mark.slow  # starts SeaweedFS
def test_write_credentials_do_not_list_other_tables_uploads_seaweedfs(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with seaweedfs(tmp_path_factory.mktemp("seaweed-uploads")) as store:
        settings = key_settings(store)
        handle = start(
            warehouse=f"s3://{store.bucket}/wh",
            s3=settings,
            data_dir=tmp_path_factory.mktemp("sw-uploads"),
            bootstrap=POLICY.parse(),
        )
        try:
            attack(_prepare(handle))
        finally:
            handle.stop()
