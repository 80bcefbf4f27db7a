"""``Session.filesystem``: pandas/pyarrow read a granted raw location through path credentials
(issue #22, item 4) — the embedded catalog on the S3 emulator (session policies and expiry enforced),
the session's real gateway, real SigV4 from pyarrow's S3 client.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from lakesession.errors import CatalogAccessError, StorageAccessError

TTL = 8


def _session(tmp_path: Path, ttl: int) -> Any:
    """A session whose catalog has ``s3://{BUCKET}/landing/`` (granted) and ``…/private/`` (not) registered."""
    import lakesession

    s = lakesession.connect(data_dir=tmp_path, credential_ttl=ttl, catalog_name=f"fs_{ttl}")
    handle = s.embedded.handle
    emulator = handle.s3_emulator
    B = f"fs-raw-{secrets.token_hex(4)}"  # bucket names are global in the process's moto
    emulator.create_bucket(B)
    admin = handle.admin
    admin.register_location(f"s3://{B}/landing/")
    admin.register_location(f"s3://{B}/private/")
    admin.create_role("raw_readers", ["demo"])
    admin.grant("raw_readers", "LOCATION_READ", f"location s3://{B}/landing/")
    s3 = emulator.client()
    for name, key in (("a", "landing/part-0.parquet"), ("b", "private/part-0.parquet"), ("c", "landing_x/p.parquet")):
        sink = pa.BufferOutputStream()
        pq.write_table(pa.table({"id": [1, 2, 3], "src": [name] * 3}), sink)
        s3.put_object(Bucket=B, Key=key, Body=sink.getvalue().to_pybytes())
    s.test_bucket = B
    return s


@pytest.fixture()
def session(tmp_path: Path) -> Iterator[Any]:
    s = _session(tmp_path, 900)
    yield s
    s.close()


def test_pandas_and_pyarrow_read_a_granted_location(session: Any) -> None:
    B = session.test_bucket
    fs = session.filesystem(f"s3://{B}/landing/")
    table = pq.read_table(f"{B}/landing/part-0.parquet", filesystem=fs)
    assert table.column("src").to_pylist() == ["a"] * 3
    df = pd.read_parquet(f"s3://{B}/landing/part-0.parquet", filesystem=fs)
    assert df["id"].sum() == 6
    assert [i.path for i in fs.get_file_info(pa.fs.FileSelector(f"{B}/landing/"))] == [f"{B}/landing/part-0.parquet"]
    # the key is scoped to the granted prefix: the store refuses its neighbours (one line naming the path,
    # still an OSError for pyarrow's and pandas's callers); a write through a filesystem opened for reading is
    # refused before it reaches the store
    for neighbour in (f"{B}/landing_x/p.parquet", f"{B}/private/part-0.parquet"):
        with pytest.raises(StorageAccessError) as refused:
            pq.read_table(neighbour, filesystem=fs)
        err = refused.value
        assert isinstance(err, OSError) and err.code == "AccessDenied" and err.path == f"s3://{neighbour}"
        assert str(err).startswith(f"The object store refused to read s3://{neighbour} as ")
        assert f"cover s3://{B}/landing/ only" in str(err) and len(str(err).splitlines()) == 1
    since = time.time()
    with pytest.raises(StorageAccessError) as early:
        pq.write_table(pa.table({"x": [1]}), f"{B}/landing/new.parquet", filesystem=fs)
    assert early.value.code == "ReadOnlyFilesystem" and "mode='write'" in str(early.value)
    emulator = session.embedded.handle.s3_emulator
    assert not [r for r in emulator.requests if r.time >= since and r.method in ("PUT", "POST")]
    assert f"s3://{B}/landing/" in session.locations()
    records = [r for r in session.access_log.records() if r.action == "path_credentials"]
    assert records and records[0].object == f"path s3://{B}/landing/"


def test_ungranted_location_is_a_catalog_access_error_and_the_store_refuses(session: Any) -> None:
    B = session.test_bucket
    with pytest.raises(CatalogAccessError) as info:
        session.filesystem(f"s3://{B}/private/")
    err = info.value
    assert err.status == 403 and err.kind == "forbidden"
    assert f"s3://{B}/private/" in str(err) and "LOCATION_READ" in str(err) and "session.locations()" in str(err)
    # the granted key does not open it either (the store enforces the prefix, not just the client)
    fs = session.filesystem(f"s3://{B}/landing/")
    cfg = fs.handler.creds.current()
    s3 = session.embedded.handle.s3_emulator.client(
        credentials=(cfg["s3.access-key-id"], cfg["s3.secret-access-key"], cfg["s3.session-token"])
    )
    with pytest.raises(ClientError) as denied:
        s3.get_object(Bucket=B, Key="private/part-0.parquet")
    assert denied.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


@pytest.mark.slow
def test_reads_span_several_short_ttls_with_renewed_keys(tmp_path: Path) -> None:
    s = _session(tmp_path, TTL)
    B = s.test_bucket
    try:
        fs = s.filesystem(f"s3://{B}/landing/", min_valid_seconds=3)
        keys: set[str] = set()
        started = time.time()
        while time.time() - started < 2.5 * TTL:  # more than two lifetimes
            assert pq.read_table(f"{B}/landing/part-0.parquet", filesystem=fs).num_rows == 3
            creds = fs.handler.creds
            keys.add(creds.current()["s3.access-key-id"])
            assert creds.expires_at - time.time() >= 3 * 0.9  # never read with a nearly expired key
            time.sleep(0.5)
        assert len(keys) >= 3, keys  # renewed ahead of expiry, at least once per lifetime
    finally:
        s.close()
