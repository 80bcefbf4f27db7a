"""The S3 emulator's write-through object directory: what a restarted emulator serves is what the old one held."""

from __future__ import annotations

from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from lakesession.reference.storage import S3Emulator, table_session_policy


def objects(emu: S3Emulator, bucket: str) -> dict[str, bytes]:
    s3 = emu.client("s3")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    return {k: s3.get_object(Bucket=bucket, Key=k)["Body"].read() for k in keys}


def test_objects_survive_a_restart(tmp_path: Path) -> None:
    first = S3Emulator(persist_dir=tmp_path).start()
    try:
        first.create_bucket("persist-a")
        s3 = first.client("s3")
        for key in ("wh/t/data/1.parquet", "wh/t/metadata/v1.json", "wh/t/gone", "a/../b", "wh/t", "wh/t/odd key%2F"):
            s3.put_object(Bucket="persist-a", Key=key, Body=key.encode() * 3)
        s3.put_object(Bucket="persist-a", Key="wh/t/data/1.parquet", Body=b"overwritten")
        s3.delete_object(Bucket="persist-a", Key="wh/t/gone")
        s3.copy_object(Bucket="persist-a", Key="wh/copy", CopySource={"Bucket": "persist-a", "Key": "wh/t"})
        s3.delete_objects(Bucket="persist-a", Delete={"Objects": [{"Key": "a/../b"}]})
        up = s3.create_multipart_upload(Bucket="persist-a", Key="wh/big")["UploadId"]
        part = s3.upload_part(Bucket="persist-a", Key="wh/big", UploadId=up, PartNumber=1, Body=b"x" * 10)
        s3.complete_multipart_upload(
            Bucket="persist-a",
            Key="wh/big",
            UploadId=up,
            MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
        )
        s3.create_bucket(Bucket="persist-gone")
        s3.put_object(Bucket="persist-gone", Key="k", Body=b"v")
        s3.delete_object(Bucket="persist-gone", Key="k")
        s3.delete_bucket(Bucket="persist-gone")
        # a refused write (read-only scoped credential) changes nothing, in memory or on disk
        scoped = first.client("s3", first.assume(table_session_policy("s3://persist-a/wh/t", write=False)))
        with pytest.raises(ClientError):
            scoped.put_object(Bucket="persist-a", Key="wh/t/data/evil", Body=b"x")
        before = objects(first, "persist-a")
        assert set(before) == {
            "wh/t/data/1.parquet",
            "wh/t/metadata/v1.json",
            "wh/t",
            "wh/t/odd key%2F",
            "wh/copy",
            "wh/big",
        }
    finally:
        first.stop(clear=True)  # memory gone: only the directory remains
    second = S3Emulator(persist_dir=tmp_path).start()
    try:
        assert objects(second, "persist-a") == before
        assert [b["Name"] for b in second.client("s3").list_buckets()["Buckets"]] == ["persist-a"]
        assert before["wh/t/data/1.parquet"] == b"overwritten" and before["wh/big"] == b"x" * 10
    finally:
        second.stop(clear=True)
