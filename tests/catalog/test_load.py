"""Under load: 50 concurrent sessions loading, refreshing credentials and committing for 25 s (60 s with
``LAKESESSION_SOAK=1``: ``tests/_soak.py``) against `lakesession serve --workers 2` on PostgreSQL (two server
processes sharing the database and the data dir, as replicas do), clients in separate processes — the suite's
version of ``benchmarks/load.py``.

Nothing may be lost (each table's rows and snapshots exactly what the clients were acknowledged), the
only errors are 409s and each is retried to success, and every request is in the audit log.
STS: one AssumeRole per table for both workers (the shared vending cache).
Also: ``--workers`` refuses SQLite before binding anything.
"""

from __future__ import annotations

import importlib
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests._pg import new_database
from tests._serve import ROOT, run_serve
from tests._soak import sized

SECONDS = sized(25, 60)  # of load: each session cycles every ~2 s, so even 25 s is ~10 cycles each


def _benchmark() -> ModuleType:
    """``benchmarks/load.py`` as a module (the benchmarks are scripts, not a package); spawned client
    processes get this ``sys.path`` and import it by the same name."""
    bench = str(ROOT / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    return importlib.import_module("load")


@pytest.mark.slow
def test_fifty_sessions_commit_load_and_refresh_without_loss(tmp_path: Path) -> None:
    load = _benchmark()
    db = new_database("load")
    server = load.Server(tmp_path, db, 2, 900)
    try:
        assert server.served[0].lines["workers"].startswith("2 processes"), server.served[0].lines
        token = server.token()
        tables = load.setup_tables(server.uri, server.admin_token(), 5)
        since = time.time() - 1
        tally = load.run_clients(server.uri, token, tables, 5, 10, SECONDS, 2.0)  # 50 sessions, 5 processes
        problems = load.verify_rows(server.uri, server.admin_token(), tables, tally)
        audited = load.audited_ids(db, since)
        vended, sts = load.sts_calls(db, since)
    finally:
        server.stop()

    assert not tally.errors, tally.errors[:5]  # every response a 200 or a 409
    assert set(tally.statuses) <= {"loadTable 200", "credentials 200", "commit 200", "commit 409"}, tally.statuses
    assert tally.unfinished == 0  # every 409 retried to success
    assert tally.statuses.get("commit 409", 0) == tally.retries
    sessions_committed = sum(tally.commits.values())
    assert sessions_committed >= 50, tally.commits  # each session got at least one append through
    assert not problems, problems  # rows and snapshots exactly the acknowledged ones
    missing = [r for r in tally.request_ids if r not in audited]
    assert not missing, f"{len(missing)} of {len(tally.request_ids)} requests not audited"
    assert len(tally.request_ids) == sum(tally.statuses.values())
    # the vending cache is shared through the database: one AssumeRole per table for both workers (each
    # worker caching alone made two); within SECONDS of a 900 s TTL no credential needs replacing
    assert vended > 100 and sts == len(tables), (sts, vended)


def test_workers_need_postgresql(tmp_path: Path) -> None:
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--workers", "2"])
    assert r.returncode == 2
    assert "--workers 2 needs PostgreSQL" in r.stderr and "--db postgresql+psycopg://" in r.stderr, r.stderr
    assert not (tmp_path / "catalog.db").exists()  # refused before creating anything
    r = run_serve(["--port", "0", "--data-dir", str(tmp_path), "--workers", "0"])
    assert r.returncode == 2 and "--workers must be at least 1" in r.stderr, r.stderr
