"""Raw paths the way people write them (issue #33): a granted location read as a *directory* by pandas,
pyarrow (``pq.read_table``, ``pyarrow.dataset``, recursive ``FileSelector``) and DuckDB (its Arrow scan of a
``pyarrow.dataset``, the route that needs no httpfs extension download), with and without a trailing slash
or a zero-byte directory marker, and nothing outside it; writes through ``session.filesystem()``; and the
emulator making a registered location's bucket exist.

Real parts: the embedded catalog on the S3/STS emulator (session policies enforced), the session's loopback
gateway, pyarrow's own S3 client signing with the vended key; the attacker tests use that key with boto3.
One catalog for the module (the fast set stays quick).
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError

from lakesession.errors import CatalogAccessError, StorageAccessError

B = f"rawdirs-{secrets.token_hex(4)}"  # bucket names are global in the process's moto
IDS = [1, 2, 3, 4]


def _parquet(ids: list[int]) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"id": ids}), sink)
    return bytes(sink.getvalue().to_pybytes())


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``landing/`` (no directory key) and ``marked/`` (a zero-byte ``marked/`` key) granted LOCATION_READ,
    ``drop/`` LOCATION_WRITE, ``private/`` registered without a grant; ``landing_old/`` is a sibling nobody owns.
    The bucket is never created by hand: registering its first location makes it (the emulator's side of #33)."""
    import lakesession

    s = lakesession.connect(data_dir=tmp_path_factory.mktemp("rawdirs"), catalog_name="rawdirs")
    handle = s.embedded.handle
    admin = handle.admin
    for name in ("landing", "marked", "drop", "private", "expiring"):
        admin.register_location(f"s3://{B}/{name}/")
    admin.create_role("raw_users", ["demo"])
    for name in ("landing", "marked", "expiring"):
        admin.grant("raw_users", "LOCATION_READ", f"location s3://{B}/{name}/")
    admin.grant("raw_users", "LOCATION_WRITE", f"location s3://{B}/drop/")
    s3 = handle.s3_emulator.client()
    for top in ("landing", "marked"):
        s3.put_object(Bucket=B, Key=f"{top}/2026/part-0.parquet", Body=_parquet([1, 2]))
        s3.put_object(Bucket=B, Key=f"{top}/2026/part-1.parquet", Body=_parquet([3]))
        s3.put_object(Bucket=B, Key=f"{top}/top.parquet", Body=_parquet([4]))
    s3.put_object(Bucket=B, Key="expiring/part-0.parquet", Body=_parquet([5]))
    s3.put_object(Bucket=B, Key="marked/", Body=b"")  # what the S3 console's "Create folder" leaves
    s3.put_object(Bucket=B, Key="landing_old/part-0.parquet", Body=_parquet([99]))
    s3.put_object(Bucket=B, Key="private/part-0.parquet", Body=_parquet([98]))
    yield s
    s.close()


@pytest.fixture(scope="module")
def vended(session: Any) -> Any:
    """The key ``session.filesystem(s3://B/landing/)`` holds, as a boto3 client: what an attacker holding it can do."""
    cfg = session.filesystem(f"s3://{B}/landing/").handler.creds.current()
    creds = (cfg["s3.access-key-id"], cfg["s3.secret-access-key"], cfg["s3.session-token"])
    return session.embedded.handle.s3_emulator.client(credentials=creds)


def _ids(table: pa.Table | pd.DataFrame) -> list[int]:
    column = table["id"] if isinstance(table, pd.DataFrame) else table.column("id").to_pylist()
    return sorted(int(v) for v in column)


def _duckdb_ids(path: str, fs: Any) -> list[int]:
    """What DuckDB users do with a pyarrow filesystem: scan a ``pyarrow.dataset`` (Arrow streams it in batches)."""
    lake = ds.dataset(path, filesystem=fs, format="parquet")
    con = duckdb.connect()
    con.register("lake", lake)
    return sorted(int(v) for (v,) in con.execute("SELECT id FROM lake").fetchall())


READERS: dict[str, Callable[[str, Any], list[int]]] = {
    "pandas": lambda path, fs: _ids(pd.read_parquet(path, filesystem=fs)),
    "pq.read_table": lambda path, fs: _ids(pq.read_table(path, filesystem=fs)),
    "pyarrow.dataset": lambda path, fs: _ids(ds.dataset(path, filesystem=fs, format="parquet").to_table()),
    "duckdb": _duckdb_ids,
}
SPELLINGS = ("s3://{b}/{top}/", "s3://{b}/{top}", "{b}/{top}/", "{b}/{top}")


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize("top", ["landing", "marked"])
def test_a_granted_location_reads_as_a_directory(session: Any, top: str, spelling: str, reader: str) -> None:
    """The issue's reads: ``pd.read_parquet("s3://lake/landing/", filesystem=fs)`` and friends, every spelling."""
    fs = session.filesystem(f"s3://{B}/{top}/")
    assert READERS[reader](spelling.format(b=B, top=top), fs) == IDS


@pytest.mark.parametrize("reader", list(READERS))
def test_a_directory_below_the_location_reads_too(session: Any, reader: str) -> None:
    """Worked before #33 (it never touches the location's own directory key); kept working."""
    fs = session.filesystem(f"s3://{B}/landing/")
    assert READERS[reader](f"s3://{B}/landing/2026/", fs) == [1, 2, 3]


@pytest.mark.parametrize("top", ["landing", "marked"])
def test_listing_and_file_info_stay_inside_the_prefix(session: Any, top: str) -> None:
    fs = session.filesystem(f"{'s3a'}://{B}/{top}")  # another scheme, no slash: the same location
    for base in (f"{B}/{top}", f"s3://{B}/{top}/"):
        listed = fs.get_file_info(pafs.FileSelector(base, recursive=True))
        files = sorted(i.path for i in listed if i.type == pafs.FileType.File)
        assert files == [f"{B}/{top}/2026/part-0.parquet", f"{B}/{top}/2026/part-1.parquet", f"{B}/{top}/top.parquet"]
        assert {i.path for i in listed if i.type == pafs.FileType.Directory} == {f"{B}/{top}/2026"}
    assert fs.get_file_info(f"s3://{B}/{top}/").type == pafs.FileType.Directory
    assert fs.get_file_info(f"{B}/{top}").type == pafs.FileType.Directory
    # a missing key inside the prefix is "not found" (S3 with list permission answers 404), never a denial
    assert fs.get_file_info(f"{B}/{top}/nope.parquet").type == pafs.FileType.NotFound
    assert fs.get_file_info(f"{B}/{top}/nope/").type == pafs.FileType.NotFound


OUTSIDE = {
    "sibling directory": lambda fs: pq.read_table(f"s3://{B}/landing_old/", filesystem=fs),
    "sibling file": lambda fs: pq.read_table(f"{B}/landing_old/part-0.parquet", filesystem=fs),
    "bucket root listing": lambda fs: fs.get_file_info(pafs.FileSelector(f"{B}/", recursive=True)),
    "another location": lambda fs: pd.read_parquet(f"s3://{B}/private/", filesystem=fs),
    "another granted location": lambda fs: pd.read_parquet(f"s3://{B}/marked/", filesystem=fs),
}


@pytest.mark.parametrize("what", list(OUTSIDE))
def test_nothing_outside_the_location_through_the_filesystem(session: Any, what: str) -> None:
    fs = session.filesystem(f"s3://{B}/landing/")
    with pytest.raises(StorageAccessError) as refused:
        OUTSIDE[what](fs)
    err = refused.value
    assert isinstance(err, OSError) and err.code == "AccessDenied"  # still what pyarrow's callers catch
    message = str(err)
    assert len(message.splitlines()) == 1 and err.path and err.path in message
    assert f"this filesystem's credentials cover s3://{B}/landing/ only" in message
    assert "session.locations()" in message
    cfg = fs.handler.creds.current()
    assert cfg["s3.secret-access-key"] not in message and cfg["s3.session-token"] not in message


def _status(call: Callable[[], Any]) -> int:
    try:
        return int(call()["ResponseMetadata"]["HTTPStatusCode"])
    except ClientError as e:
        return int(e.response["ResponseMetadata"]["HTTPStatusCode"])


def test_the_vended_key_itself_reaches_the_directory_and_nothing_beside_it(vended: Any) -> None:
    """The attacker's view: the store, asked directly with the key, allows the directory and refuses the rest."""
    listed = vended.list_objects_v2(Bucket=B, Prefix="landing/")
    assert sorted(o["Key"] for o in listed["Contents"]) == [
        "landing/2026/part-0.parquet",
        "landing/2026/part-1.parquet",
        "landing/top.parquet",
    ]
    assert _status(lambda: vended.head_object(Bucket=B, Key="landing")) == 404  # readable, missing: not found
    assert _status(lambda: vended.head_object(Bucket=B, Key="landing/")) == 404
    assert _status(lambda: vended.get_object(Bucket=B, Key="landing/top.parquet")) == 200
    # listing the bare prefix would name landing_old/'s keys; the bucket root names everything
    assert _status(lambda: vended.list_objects_v2(Bucket=B, Prefix="landing")) == 403
    assert _status(lambda: vended.list_objects_v2(Bucket=B, Prefix="")) == 403
    assert _status(lambda: vended.list_objects_v2(Bucket=B, Prefix="landing_old/")) == 403
    for key in ("landing_old/part-0.parquet", "private/part-0.parquet", "marked/top.parquet", "landing_old"):
        assert _status(functools.partial(vended.get_object, Bucket=B, Key=key)) == 403, key
    # read-only: not even the directory key can be written (it would shadow the directory)
    assert _status(lambda: vended.put_object(Bucket=B, Key="landing/x.parquet", Body=b"x")) == 403
    assert _status(lambda: vended.put_object(Bucket=B, Key="landing", Body=b"x")) == 403


def _puts_since(session: Any, since: float) -> list[Any]:
    return [r for r in session.embedded.handle.s3_emulator.requests if r.time >= since and r.method in ("PUT", "POST")]


WRITES: dict[str, Callable[[str, Any], None]] = {
    "pandas": lambda d, fs: pd.DataFrame({"id": [7]}).to_parquet(f"s3://{d}/w-pandas.parquet", filesystem=fs),
    "pq.write_table": lambda d, fs: pq.write_table(pa.table({"id": [7]}), f"{d}/w-pq.parquet", filesystem=fs),
    "pyarrow.dataset": lambda d, fs: ds.write_dataset(
        pa.table({"id": [7]}),
        f"{d}/w-ds",
        filesystem=fs,
        format="parquet",
        existing_data_behavior="overwrite_or_ignore",
    ),
}


@pytest.mark.parametrize("writer", list(WRITES))
def test_a_write_through_a_read_only_location_is_refused_before_the_store(session: Any, writer: str) -> None:
    fs = session.filesystem(f"s3://{B}/landing/")
    since = time.time()
    with pytest.raises(StorageAccessError) as refused:
        WRITES[writer](f"{B}/landing", fs)
    err = refused.value
    message = str(err)
    assert err.code == "ReadOnlyFilesystem" and isinstance(err, OSError)
    assert len(message.splitlines()) == 1 and "LOCATION_WRITE" in message and "mode='write'" in message
    assert err.path and err.path.startswith(f"s3://{B}/landing") and err.path in message
    assert not _puts_since(session, since)  # nothing reached the store: no half-written file


@pytest.mark.parametrize("writer", list(WRITES))
def test_a_write_location_takes_pandas_and_pyarrow_writes(session: Any, writer: str) -> None:
    fs = session.filesystem(f"s3://{B}/drop/", mode="write")
    WRITES[writer](f"{B}/drop/{writer}", fs)
    assert _ids(pd.read_parquet(f"s3://{B}/drop/{writer}/", filesystem=fs)) == [7]
    # the write key's reach ends at the prefix too: the store refuses the PUT (told at the stream's close, one
    # line); write_dataset's create_dir is refused before (S3 has no directories: inside the prefix it makes none)
    since = time.time()
    with pytest.raises(StorageAccessError) as refused:
        WRITES[writer](f"{B}/landing_old", fs)
    err = refused.value
    assert err.code == ("OutsideLocation" if writer == "pyarrow.dataset" else "AccessDenied")
    assert f"cover s3://{B}/drop/ only" in str(err) and len(str(err).splitlines()) == 1
    assert err.path and err.path.startswith(f"s3://{B}/landing_old/") and isinstance(err, OSError)
    s3 = session.embedded.handle.s3_emulator.client()
    assert "Contents" not in s3.list_objects_v2(Bucket=B, Prefix="landing_old/w-")
    if writer == "pyarrow.dataset":
        assert not _puts_since(session, since)


def test_ungranted_paths_name_the_path_and_the_grant(session: Any) -> None:
    with pytest.raises(CatalogAccessError) as unread:
        session.filesystem(f"s3://{B}/private/")
    assert unread.value.status == 403 and unread.value.kind == "forbidden"
    assert f"s3://{B}/private/" in str(unread.value) and "LOCATION_READ" in str(unread.value)
    with pytest.raises(CatalogAccessError) as unwritten:  # a read grant opened for writing
        session.filesystem(f"s3://{B}/landing/", mode="write")
    assert unwritten.value.status == 403
    assert f"s3://{B}/landing/" in str(unwritten.value) and "LOCATION_WRITE" in str(unwritten.value)
    with pytest.raises(CatalogAccessError):  # no location at all: a sibling nobody registered
        session.filesystem(f"s3://{B}/landing_old/")


def test_registering_a_location_on_the_emulator_creates_its_bucket(session: Any) -> None:
    """Nobody created bucket ``B`` (the fixture only registered locations in it), nor the one below."""
    handle = session.embedded.handle
    s3 = handle.s3_emulator.client()
    assert _status(lambda: s3.head_bucket(Bucket=B)) == 200
    other = f"rawdirs-new-{secrets.token_hex(4)}"
    assert _status(lambda: s3.head_bucket(Bucket=other)) == 404
    import httpx

    token = handle.admin.token_for("admin")  # the management API's route, not only the in-process admin
    r = httpx.post(
        f"{handle.uri}/management/v1/locations",
        json={"location": f"s3://{other}/in/"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code == 201, r.text
    assert _status(lambda: s3.head_bucket(Bucket=other)) == 200


def test_a_bootstrap_files_locations_get_buckets_and_a_taken_name_leaves_the_registration(
    session: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """``locations:`` of a bootstrap file are registered before the emulator serves: their buckets exist too.
    A bucket name another emulator of this process owns (names are global, as on S3) is logged, not fatal."""
    from lakesession.reference import bootstrap, start

    fresh = f"rawdirs-boot-{secrets.token_hex(4)}"
    policy = bootstrap.Bootstrap(locations=[{"location": f"s3://{fresh}/in/"}, {"location": f"s3://{B}/elsewhere/"}])
    with caplog.at_level("WARNING", logger="lakesession.reference.storage_locations"):
        handle = start(warehouse=f"s3://rawdirs-wh-{secrets.token_hex(4)}/wh", s3_emulator=True, bootstrap=policy)
    try:
        s3 = handle.s3_emulator.client()
        assert _status(lambda: s3.head_bucket(Bucket=fresh)) == 200
        assert _status(lambda: s3.head_bucket(Bucket=B)) == 403  # the module's emulator owns it: not this account's
        from lakesession.reference import storage_locations
        from lakesession.reference.routes.common import locations_of

        registered = storage_locations.registered(locations_of(handle.services))
        assert f"s3://{fresh}/in/" in registered and f"s3://{B}/elsewhere/" in registered
        assert any(f"cannot create bucket '{B}'" in r.getMessage() for r in caplog.records)
    finally:
        handle.stop()


def test_a_key_the_store_stops_honouring_inside_the_location_is_told_as_such(session: Any) -> None:
    """A refusal *inside* the granted prefix is no scope problem: the message says the key died early (here the
    emulator expires it ahead of its stated expiry, as a revoked STS session would be), never "ask for LOCATION_WRITE"."""
    fs = session.filesystem(f"s3://{B}/expiring/")
    assert _ids(pd.read_parquet(f"s3://{B}/expiring/", filesystem=fs)) == [5]
    session.embedded.handle.s3_emulator.expire(fs.handler.creds.current()["s3.access-key-id"])
    with pytest.raises(StorageAccessError) as refused:
        pd.read_parquet(f"s3://{B}/expiring/", filesystem=fs)
    message = str(refused.value)
    # the HEAD pyarrow sends first answers 400 without a body (as S3 does for a dead session token): no raw OSError
    assert refused.value.code == "BadRequest" and isinstance(refused.value, OSError)
    assert refused.value.path == f"s3://{B}/expiring/" and len(message.splitlines()) == 1
    assert f"the store no longer honours the key for s3://{B}/expiring/" in message and "LOCATION_WRITE" not in message
    assert "lakesession.connect()" in message
