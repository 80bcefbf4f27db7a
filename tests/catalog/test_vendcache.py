"""The vending cache shared by processes on one catalog database (``reference/vendcache.py``).

Two ``CredentialVendor``s on one database and one data directory stand for two ``serve`` workers (the
workers' own test is ``test_vendcache_workers.py``); STS is the S3 emulator's real AssumeRole. The
attacks: what a read-only copy of the database gives away, and a row moved to another principal's id.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlalchemy import Engine, select, update

from lakesession.reference import store, vendcache
from lakesession.reference.storage.emulator import S3Emulator
from lakesession.reference.vendcache import SharedVendCache, load_key
from lakesession.reference.vending import READ, WRITE, CredentialVendor, S3Settings

BUCKET = "vendcache"
LOC = f"s3://{BUCKET}/wh/sales/orders"


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Settings]:
    with S3Emulator() as emu:
        emu.create_bucket(BUCKET)
        admin = emu.admin_credentials
        yield S3Settings(
            role_arn=emu.vending_role_arn,
            region=emu.region,
            endpoint=emu.endpoint,
            access_key_id=admin.access_key_id,
            secret_access_key=admin.secret_access_key,
            credential_ttl=900,
        )


@pytest.fixture()
def engine(tmp_path: Path) -> Engine:
    return store.make_engine(store.sqlite_url(tmp_path / "catalog.db"))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def any_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    """Both backends ``serve`` runs on (``--workers`` needs PostgreSQL; the upserts differ by dialect)."""
    if request.param == "sqlite":
        return store.make_engine(store.sqlite_url(tmp_path / "catalog.db"))
    from tests._pg import new_database

    return store.make_engine(new_database("vendcache"))


def worker(s3: S3Settings, engine: Engine, data_dir: Path) -> CredentialVendor:
    """What ``build_services`` makes in each serve worker: its own vendor, the shared tier under it."""
    data_dir.mkdir(exist_ok=True)
    return CredentialVendor(s3, shared=SharedVendCache(engine, load_key(data_dir), s3.min_remaining))


def test_a_second_worker_hands_out_the_first_workers_credential(
    s3: S3Settings, any_engine: Engine, tmp_path: Path
) -> None:
    a, b = worker(s3, any_engine, tmp_path), worker(s3, any_engine, tmp_path)
    first, hit_a = a.vend("alice", "table sales.orders", LOC, READ)
    second, hit_b = b.vend("alice", "table sales.orders", LOC, READ)
    assert (hit_a, hit_b) == (False, True)
    assert second.access_key_id == first.access_key_id and second.session_token == first.session_token
    assert second.expires_at == first.expires_at and second.prefix == first.prefix and second.mode == READ
    assert a.sts_calls + b.sts_calls == 1
    # another mode, principal or table is another credential
    b.vend("alice", "table sales.orders", LOC, WRITE)
    b.vend("bob", "table sales.orders", LOC, READ)
    assert a.sts_calls + b.sts_calls == 3


def test_racing_workers_make_one_sts_call(s3: S3Settings, any_engine: Engine, tmp_path: Path) -> None:
    vendors = [worker(s3, any_engine, tmp_path) for _ in range(3)]
    start = threading.Barrier(12)
    keys: list[str] = []

    def load(v: CredentialVendor) -> None:
        start.wait()
        keys.append(v.vend("alice", "table sales.orders", LOC, READ)[0].access_key_id)

    threads = [threading.Thread(target=load, args=(vendors[i % 3],)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(keys) == 12 and len(set(keys)) == 1
    assert sum(v.sts_calls for v in vendors) == 1


def test_a_stale_shared_credential_is_replaced_once(s3: S3Settings, any_engine: Engine, tmp_path: Path) -> None:
    short = replace(s3, credential_ttl=10)  # reused while 9 s of 10 remain: stale after ~1 s
    a, b = worker(short, any_engine, tmp_path), worker(short, any_engine, tmp_path)
    old, _ = a.vend("alice", "table sales.orders", LOC, READ)
    time.sleep(1.5)
    new, hit = b.vend("alice", "table sales.orders", LOC, READ)
    assert not hit and new.access_key_id != old.access_key_id
    again, hit = a.vend("alice", "table sales.orders", LOC, READ)  # a's own copy is stale too: the shared one
    assert hit and again.access_key_id == new.access_key_id
    assert a.sts_calls + b.sts_calls == 2


def test_an_abandoned_claim_delays_a_load_but_never_fails_it(
    s3: S3Settings, any_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker that claimed a key and died: the next one waits its bounded wait, then issues itself."""
    monkeypatch.setattr(vendcache, "WAIT_SECONDS", 0.3)
    dead = SharedVendCache(any_engine, load_key(tmp_path), s3.min_remaining)
    key = ("alice", "table sales.orders", LOC, READ)
    assert dead.claim(key)
    live = worker(s3, any_engine, tmp_path)
    t0 = time.monotonic()
    cred, hit = live.vend(*key)
    assert not hit and cred.access_key_id and live.sts_calls == 1
    assert time.monotonic() - t0 >= 0.3
    assert worker(s3, any_engine, tmp_path).vend(*key)[0].access_key_id == cred.access_key_id  # and it is shared


def test_a_database_dump_reveals_no_keys_and_no_who_loaded_what(s3: S3Settings, engine: Engine, tmp_path: Path) -> None:
    """The attacker holds a read-only copy of the catalog database (a backup, a replica's dump)."""
    v = worker(s3, engine, tmp_path)
    cred, _ = v.vend("alice", "table sales.orders", LOC, WRITE)
    db = sqlite3.connect(tmp_path / "catalog.db")
    dump = "\n".join(db.iterdump()).encode()
    rows = db.execute("SELECT * FROM ls_vended_credentials").fetchall()
    db.close()
    raw = b"".join((tmp_path / name).read_bytes() for name in os.listdir(tmp_path) if name.startswith("catalog.db"))
    assert len(rows) == 1
    for secret in (cred.secret_access_key, cred.session_token, cred.access_key_id):
        assert secret.encode() not in dump and secret.encode() not in raw
    row = " ".join(str(c) for c in rows[0])
    for name in ("alice", "sales", "orders", BUCKET):
        assert name not in row
    # the key lives outside the database, readable by the catalog's user only
    key_file = tmp_path / vendcache.KEY_FILE
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key_file.read_text().strip().encode() not in raw


def test_a_row_moved_to_another_principal_is_not_handed_out(s3: S3Settings, any_engine: Engine, tmp_path: Path) -> None:
    """Write access to the database: copy alice's sealed write credential into bob's read row."""
    v = worker(s3, any_engine, tmp_path)
    alice, _ = v.vend("alice", "table sales.orders", LOC, WRITE)
    bob, _ = v.vend("bob", "table sales.orders", LOC, READ)
    t = store.vended_credentials
    shared = v.shared
    assert shared is not None
    with any_engine.begin() as conn:
        payload = conn.execute(
            select(t.c.payload).where(t.c.id == shared._id(("alice", "table sales.orders", LOC, WRITE)))
        ).scalar_one()
        conn.execute(
            update(t).where(t.c.id == shared._id(("bob", "table sales.orders", LOC, READ))).values(payload=payload)
        )
    fresh_worker = worker(s3, any_engine, tmp_path)  # no in-memory copy: reads the tampered row
    got, hit = fresh_worker.vend("bob", "table sales.orders", LOC, READ)
    assert got.access_key_id not in (alice.access_key_id, bob.access_key_id)
    assert not hit and got.mode == READ and fresh_worker.sts_calls == 1


def test_another_data_directory_cannot_read_the_rows(s3: S3Settings, engine: Engine, tmp_path: Path) -> None:
    a = worker(s3, engine, tmp_path / "a")
    first, _ = a.vend("alice", "table sales.orders", LOC, READ)
    b = worker(s3, engine, tmp_path / "b")  # another key: its id for the same load differs, so a miss
    second, hit = b.vend("alice", "table sales.orders", LOC, READ)
    assert not hit and second.access_key_id != first.access_key_id


def test_invalidate_reaches_the_shared_tier(s3: S3Settings, engine: Engine, tmp_path: Path) -> None:
    a, b = worker(s3, engine, tmp_path), worker(s3, engine, tmp_path)
    a.vend("alice", "table sales.orders", LOC, READ)
    a.vend("bob", "table sales.orders", LOC, READ)
    a.invalidate("alice")
    assert not b.vend("alice", "table sales.orders", LOC, READ)[1]
    assert b.vend("bob", "table sales.orders", LOC, READ)[1]


def test_the_key_is_made_once_by_racing_processes(tmp_path: Path) -> None:
    keys: list[bytes] = []
    start = threading.Barrier(8)

    def make() -> None:
        start.wait()
        keys.append(load_key(tmp_path))

    threads = [threading.Thread(target=make) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(keys) == 8 and len(set(keys)) == 1 and len(keys[0]) == 32
    assert sorted(os.listdir(tmp_path)) == [vendcache.KEY_FILE]  # no temporary files left


def test_a_damaged_key_file_names_the_fix(tmp_path: Path) -> None:
    (tmp_path / vendcache.KEY_FILE).write_text("abcd\n")
    with pytest.raises(ValueError, match="delete it"):
        load_key(tmp_path)
