"""What changed for loadTable p99 / commit p50 under 50 sessions (``benchmarks/load.py``), each tested for
what could go wrong: a commit without pyiceberg's deep copy must produce exactly pyiceberg's metadata and
leave the (cached) base untouched; the SQLite write lock must be given back when an idempotent commit
loses its key (it was not: 30 s stalls); ``Server-Timing`` only when asked for."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.refs import SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    RemovePropertiesUpdate,
    SetPropertiesUpdate,
    SetSnapshotRefUpdate,
    update_table_metadata,
)
from pyiceberg.types import LongType, NestedField
from sqlalchemy import text
from sqlalchemy.orm import Session

from lakesession.reference import idempotency, store
from lakesession.reference.guard import Receive, Scope, Send
from lakesession.reference.sqlcatalog import CachingSqlCatalog
from lakesession.reference.sqlitelock import serialize_writes
from lakesession.reference.timing import ServerTiming, add, mark_started


def _table(tmp_path: Path, snapshots: int) -> tuple[CachingSqlCatalog, Table]:
    catalog = CachingSqlCatalog("c", uri=store.sqlite_url(tmp_path / "c.db"), warehouse=(tmp_path / "wh").as_uri())
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    meta = new_table_metadata(schema, UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER, f"{tmp_path}/t", {"a": "1"})
    for i in range(snapshots):
        meta = update_table_metadata(meta, _append(meta, 100 + i), metadata_location=f"{tmp_path}/t/m{i}.json")
    location = f"{tmp_path}/t/metadata/00007-{uuid.uuid4()}.metadata.json"
    return catalog, Table(("ns", "t"), meta, location, catalog._load_file_io(location=location), catalog)


def _append(meta: Any, sid: int) -> tuple[Any, ...]:
    snap = Snapshot.model_validate(
        {
            "snapshot-id": sid,
            "parent-snapshot-id": meta.current_snapshot_id,
            "sequence-number": meta.last_sequence_number + 1,
            "timestamp-ms": meta.last_updated_ms + 1,
            "manifest-list": f"{meta.location}/metadata/snap-{sid}.avro",
            "summary": Summary(Operation.APPEND, **{"added-records": "10"}),
            "schema-id": 0,
        }
    )
    ref = {"ref-name": "main", "type": SnapshotRefType.BRANCH, "snapshot-id": sid}
    return (AddSnapshotUpdate(snapshot=snap), SetSnapshotRefUpdate.model_validate(ref))


@pytest.mark.parametrize(
    "extra",
    [(), (SetPropertiesUpdate(updates={"b": "2"}),), (RemovePropertiesUpdate(removals=["a"]),)],
    ids=["append", "append+set-properties", "append+remove-properties"],
)
def test_commit_without_deep_copy_matches_pyiceberg_and_leaves_the_base_alone(tmp_path: Path, extra: tuple) -> None:
    catalog, table = _table(tmp_path, 30)
    before = table.metadata.model_dump_json()
    updates = (*_append(table.metadata, 999), *extra)
    staged = catalog._update_and_stage_table(table, table.name(), (), updates)
    expected = update_table_metadata(table.metadata, updates, metadata_location=table.metadata_location)
    assert staged.metadata.model_dump_json() == expected.model_dump_json()  # byte for byte what pyiceberg writes
    assert table.metadata.model_dump_json() == before  # the cached base is unchanged
    assert staged.metadata_location.split("/")[-1].startswith("00008-")  # the next version
    assert staged.metadata.metadata_log[-1].metadata_file == table.metadata_location
    # and a second commit on top of the first shares nothing mutable with it
    again = catalog._update_and_stage_table(staged, staged.name(), (), _append(staged.metadata, 1000))
    assert again.metadata.current_snapshot_id == 1000
    assert staged.metadata.current_snapshot_id == 999
    assert len(staged.metadata.snapshots) == 31 and len(again.metadata.snapshots) == 32
    catalog.engine.dispose()


def test_commit_without_deep_copy_still_checks_requirements(tmp_path: Path) -> None:
    from pyiceberg.exceptions import CommitFailedException

    catalog, table = _table(tmp_path, 3)
    stale = AssertRefSnapshotId.model_validate({"ref": "main", "snapshot-id": 100})  # the current one is 102
    with pytest.raises(CommitFailedException):
        catalog._update_and_stage_table(table, table.name(), (stale,), _append(table.metadata, 7))
    catalog.engine.dispose()


def test_an_idempotent_commit_losing_its_key_gives_the_sqlite_write_lock_back(tmp_path: Path) -> None:
    """The loser's commit hook rolls back; the lock it took at its first write must be released with it
    (it was not: the next writer waited 30 s, while holding the table's commit lock)."""
    engine = store.make_engine(store.sqlite_url(tmp_path / "i.db"))
    lock = serialize_writes(engine)  # a second lock on the same engine: observable here
    idempotency.install(engine)
    now = time.time()
    row = {"principal": "p", "key": "k", "request_hash": "h", "status": 200, "body": None}
    row |= {"created_at": now, "expires_at": now + 60}

    def mutate() -> None:  # as pyiceberg's SqlCatalog.commit_table writes: an ORM session, then commit()
        token = idempotency._armed.set(idempotency._Pending(engine, dict(row)))
        try:
            with Session(engine) as session:
                session.execute(text("INSERT INTO ls_roles (name, created_at) VALUES (:n, 0)"), {"n": uuid.uuid4().hex})
                session.commit()
        finally:
            idempotency._armed.reset(token)

    mutate()  # the winner: its row lands with its mutation
    with pytest.raises(idempotency.KeyInFlight):
        mutate()  # the loser: rolled back
    assert not lock.locked()
    done = threading.Event()

    def writer() -> None:
        with engine.begin() as conn:
            conn.execute(text("INSERT INTO ls_roles (name, created_at) VALUES ('next', 0)"))
        done.set()

    threading.Thread(target=writer, daemon=True).start()
    assert done.wait(5), "the next writer is stuck behind the loser's lock"
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ls_roles")).scalar_one() == 2  # winner + next, not the loser
    engine.dispose()


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    mark_started(scope)
    add(scope, "audit", 0.002)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def test_server_timing_splits_queue_app_and_audit() -> None:
    async def run() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=ServerTiming(_app)), base_url="http://t") as c:
            return await c.get("/")

    import asyncio

    r = asyncio.run(run())
    parts = dict(p.strip().split(";dur=") for p in r.headers["server-timing"].split(","))
    assert set(parts) == {"queue", "app", "total", "audit"}
    assert float(parts["audit"]) == pytest.approx(2.0)
    assert float(parts["queue"]) + float(parts["app"]) == pytest.approx(float(parts["total"]), abs=0.02)
    # without the middleware nothing is recorded or sent
    scope: dict[str, Any] = {"type": "http", "state": {}}
    mark_started(scope)
    add(scope, "audit", 1.0)
    assert scope["state"] == {}


def test_the_catalogs_metadata_writes_are_one_put_each(monkeypatch: pytest.MonkeyPatch) -> None:
    """pyarrow's default (a multipart upload per file: three S3 requests per commit) is what this avoids."""
    from lakesession.reference.sqlcatalog import FileIOCache, PutObjectFileIO
    from lakesession.reference.storage import emulator as emulator_mod

    seen: list[tuple[str, str]] = []
    original = emulator_mod._RealmApp.__call__

    def spy(self: Any, environ: dict[str, Any], start_response: Any) -> Any:
        seen.append((environ["REQUEST_METHOD"], environ.get("QUERY_STRING", "")))
        return original(self, environ, start_response)

    monkeypatch.setattr(emulator_mod._RealmApp, "__call__", spy)
    with emulator_mod.S3Emulator() as emu:
        emu.create_bucket("put-once")
        admin = emu.admin_credentials
        props = {"s3.endpoint": emu.endpoint, "s3.region": emu.region}
        props |= {"s3.access-key-id": admin.access_key_id, "s3.secret-access-key": admin.secret_access_key}
        io = FileIOCache().get(props, "s3://put-once/t")
        assert isinstance(io, PutObjectFileIO)
        body = b'{"format-version":2}' * 10_000  # 200 KB, as a table with a few hundred snapshots
        for i in range(3):
            with io.new_output(f"s3://put-once/t/metadata/{i}.metadata.json").create(overwrite=True) as out:
                out.write(body)
        assert seen == [("PUT", "")] * 3, seen  # no CreateMultipartUpload / UploadPart / Complete
        with io.new_input("s3://put-once/t/metadata/1.metadata.json").open() as f:
            assert f.read() == body
