"""The pieces that keep the catalog fast under contention, each against a real SQLite file and real threads:
the process-wide SQLite write lock, the audit log's group commit, and commits that lose a race."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy.exc import OperationalError

from lakesession.reference import ReferenceCatalog, store
from lakesession.reference.audit import AuditLog
from lakesession.reference.sqlitelock import serialize_writes

THREADS, WRITES = 8, 15


def _writers(engine_url: str, lock: bool, tmp: Path) -> list[BaseException]:
    """THREADS threads each making WRITES write transactions that read first (deferred BEGIN, then a write)."""
    engine = create_engine(engine_url, connect_args={"check_same_thread": False, "timeout": 0.001}, pool_size=THREADS)
    with engine.begin() as conn:
        conn.execute(text("PRAGMA journal_mode=WAL"))
        conn.execute(text("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v TEXT)"))
    if lock:
        serialize_writes(engine)
    errors: list[BaseException] = []
    barrier = threading.Barrier(THREADS)

    def work() -> None:
        barrier.wait()
        for _ in range(WRITES):
            try:
                with engine.begin() as conn:
                    conn.execute(text("INSERT INTO t (v) VALUES (:v)"), {"v": "x" * 200})
                    conn.execute(text("UPDATE t SET v = v WHERE id % 7 = 0"))
            except OperationalError as e:
                errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with engine.connect() as conn:
        n = conn.execute(text("SELECT count(*) FROM t")).scalar_one()
    engine.dispose()
    assert n == THREADS * WRITES - len(errors)
    return errors


def test_sqlite_writers_queue_on_the_process_lock_not_on_sqlite_busy(tmp_path: Path) -> None:
    # without the lock, writers with a (tiny) busy timeout collide: "database is locked"
    assert _writers(store.sqlite_url(tmp_path / "a.db"), False, tmp_path)
    # with it, they take turns: no collision at all
    assert _writers(store.sqlite_url(tmp_path / "b.db"), True, tmp_path) == []


def test_the_write_lock_is_released_by_rollback_and_by_a_dropped_connection(tmp_path: Path) -> None:
    engine = create_engine(store.sqlite_url(tmp_path / "c.db"), connect_args={"check_same_thread": False})
    lock = serialize_writes(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
    assert not lock.locked()
    with pytest.raises(RuntimeError), engine.begin() as conn:
        conn.execute(text("INSERT INTO t (id) VALUES (1)"))
        assert lock.locked()  # held from the first write statement...
        raise RuntimeError("boom")
    assert not lock.locked()  # ...and given back by the rollback
    conn2 = engine.connect()
    conn2.execute(text("INSERT INTO t (id) VALUES (2)"))
    assert lock.locked()
    conn2.invalidate()  # the connection is dropped mid-transaction
    conn2.close()
    assert not lock.locked()
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM t")).scalar_one() == 0
    engine.dispose()


def test_audit_group_commit_shares_transactions_and_answers_only_after_commit(tmp_path: Path) -> None:
    engine = store.make_engine(store.sqlite_url(tmp_path / "audit.db"))
    log = AuditLog(engine)
    commits = []
    event.listen(engine, "commit", lambda conn: commits.append(1))
    slow = threading.Event()

    @event.listens_for(engine, "before_cursor_execute")
    def _slow_inserts(*_: object) -> None:  # a slow disk: batches fill while one is written
        if slow.is_set():
            slow.wait(0.02)

    slow.set()
    requests, barrier = 24, threading.Barrier(24)
    unseen: list[str] = []

    def request(i: int) -> None:
        rid = uuid.uuid4().hex
        record = {"principal": "p", "action": "load_table", "securable": f"table ns.t{i}", "decision": "allow"}
        barrier.wait()
        log.record_many([{**record, "request_id": rid, "detail": {"n": i}}, {**record, "request_id": rid}])
        with engine.connect() as conn:  # returned: its own records are committed and visible
            if conn.execute(select(func.count()).where(store.audit.c.request_id == rid)).scalar_one() != 2:
                unseen.append(rid)

    threads = [threading.Thread(target=request, args=(i,)) for i in range(requests)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not unseen
    assert len(log.query(limit=1000)) == 2 * requests
    assert len(commits) < requests  # requests shared transactions
    engine.dispose()


def test_audit_group_commit_failure_reaches_every_request_of_the_batch(tmp_path: Path) -> None:
    engine = store.make_engine(store.sqlite_url(tmp_path / "audit.db"))
    log = AuditLog(engine)
    bad = {"principal": "p", "action": "a", "securable": "s", "decision": "allow", "request_id": None}
    with pytest.raises(Exception, match="NOT NULL"):
        log.record_many([bad])  # request_id is NOT NULL
    log.record_many([{**bad, "request_id": "r1"}])  # the next batch is unaffected
    assert [r.request_id for r in log.query()] == ["r1"]
    with engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(store.audit)).scalar_one() == 1
    engine.dispose()


def test_losing_commits_answer_409_and_write_no_metadata(catalog: ReferenceCatalog, tmp_path: Path) -> None:
    """Sixteen commits from the same base: one lands, fifteen get 409 CommitFailedException, and only the
    winner's metadata file is written (the losers fail on their requirements, never racing the write)."""
    token = catalog.admin.token_for("etl")
    h = {"Authorization": f"Bearer {token}"}
    base = f"{catalog.uri}/v1/{catalog.warehouse}/namespaces"
    name = f"race_{uuid.uuid4().hex[:8]}"
    assert httpx.post(base, json={"namespace": [name]}, headers=h).status_code == 200
    schema = {"type": "struct", "schema-id": 0, "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
    r = httpx.post(f"{base}/{name}/tables", json={"name": "t", "schema": schema}, headers=h)
    assert r.status_code == 200, r.text
    meta = r.json()["metadata"]
    metadata_dir = Path(meta["location"].removeprefix("file://")) / "metadata"
    before = set(metadata_dir.iterdir())
    statuses: list[int] = []
    barrier = threading.Barrier(16)

    def commit(i: int) -> None:
        body = {
            "requirements": [
                {"type": "assert-table-uuid", "uuid": meta["table-uuid"]},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": None},
            ],
            "updates": [
                {
                    "action": "add-snapshot",
                    "snapshot": {
                        "snapshot-id": 1000 + i,
                        "sequence-number": 1,
                        "timestamp-ms": meta["last-updated-ms"] + 1,
                        "manifest-list": f"{meta['location']}/metadata/snap-{1000 + i}.avro",
                        "summary": {"operation": "append"},
                        "schema-id": 0,
                    },
                },
                {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": 1000 + i},
            ],
        }
        barrier.wait()
        statuses.append(httpx.post(f"{base}/{name}/tables/t", json=body, headers=h, timeout=60).status_code)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200] + [409] * 15
    assert len(set(metadata_dir.iterdir()) - before) == 1
