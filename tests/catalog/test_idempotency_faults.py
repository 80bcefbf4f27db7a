"""kill -9 between saving a commit and answering it: the retry must not duplicate the batch.

Real processes on loopback: ``lakesession serve`` in a subprocess with the fault-injection hook
(``LAKESESSION_FAULT_KILL_AFTER_COMMIT=commit_table``: the server SIGKILLs itself right after the
commit's transaction committed), restarted on the same state and port. First the bug (a client
without keys sees a dropped connection; its naive retry appends the batch twice), then the fix
(pyiceberg through ``lakesession.catalog.rest_catalog``, and the gateway's own retry).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
import requests
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from lakesession.catalog import rest_catalog
from lakesession.gateway import Gateway
from lakesession.reference.idempotency import FAULT_ENV
from tests._serve import ROOT, Served

pytestmark = pytest.mark.slow

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False))
BATCH = pa.table({"id": pa.array([1, 2, 3], pa.int64())})


class Catalog:
    """``lakesession serve`` on a fixed port and data directory, restartable (with or without the fault)."""

    def __init__(self, data_dir: Path):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.data_dir = data_dir
        self.served: Served | None = None
        self.restarted: Served | None = None
        self._restarter: threading.Thread | None = None

    def start(self, fault: str = "") -> Served:
        self.served = Served(["--port", str(self.port), "--data-dir", str(self.data_dir)], env={FAULT_ENV: fault})
        return self.served

    def stop(self) -> None:
        for s in (self.served, self.restarted):
            if s is not None:
                s.stop()

    def restart_when_killed(self) -> None:
        """In the background: once the faulty server died, start it again without the fault."""
        dying = self.served
        assert dying is not None

        def run() -> None:
            dying.proc.wait(timeout=120)
            self.restarted = self.start()

        self._restarter = threading.Thread(target=run, daemon=True)
        self._restarter.start()

    def wait_restarted(self) -> Served:
        assert self._restarter is not None
        self._restarter.join(timeout=120)
        assert self.restarted is not None
        self.served, self.restarted = self.restarted, None
        return self.served


class _Static:
    def __init__(self, token: str):
        self._token = token

    def token(self) -> str:
        return self._token


@pytest.fixture(scope="module")
def _state(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One catalog state for the module (each server start costs seconds on a loaded machine)."""
    cat = Catalog(tmp_path_factory.mktemp("faults") / "state")
    served = cat.start()
    try:
        token = served.admin_token()
        setup = rest_catalog("setup", served.uri, _Static(token))
        setup.create_namespace("f")
        for name in ("naive", "keyed", "gw", "spark"):
            setup.create_table(f"f.{name}", SCHEMA)
    finally:
        cat.stop()
    return cat, token, served.uri


@pytest.fixture
def lake(_state: Any) -> Any:
    yield _state
    _state[0].stop()


def _rows(uri: str, token: str, table: str) -> int:
    return rest_catalog("count", uri, _Static(token)).load_table(table).scan().to_arrow().num_rows


def test_naive_retry_after_a_kill_duplicates_the_batch(lake: Any) -> None:
    """The bug the keys fix: the commit was saved, the client only saw a dropped connection."""
    cat, token, uri = lake
    faulty = cat.start(fault="commit_table")
    naive = RestCatalog("naive", uri=uri, token=token)  # plain pyiceberg: no key, no retry
    with pytest.raises(requests.exceptions.ConnectionError):
        naive.load_table("f.naive").append(BATCH)
    assert faulty.proc.wait(timeout=60) == -signal.SIGKILL
    cat.start()
    assert _rows(uri, token, "f.naive") == 3  # saved before the kill
    RestCatalog("naive2", uri=uri, token=token).load_table("f.naive").append(BATCH)  # the naive retry
    assert _rows(uri, token, "f.naive") == 6  # duplicated


def test_pyiceberg_retry_with_the_same_key_appends_once(lake: Any) -> None:
    cat, token, uri = lake
    faulty = cat.start(fault="commit_table")
    cat.restart_when_killed()
    catalog = rest_catalog("keyed", uri, _Static(token))
    assert catalog.key_support.supported  # the catalog advertised idempotency-key-lifetime
    table = catalog.load_table("f.keyed")
    table.append(BATCH)  # the commit dies with the server; the retry (same key) is answered by the restarted one
    assert faulty.proc.returncode == -signal.SIGKILL
    cat.wait_restarted()
    assert _rows(uri, token, "f.keyed") == 3
    reloaded = rest_catalog("check", uri, _Static(token)).load_table("f.keyed")
    assert len(reloaded.metadata.snapshots) == 1
    assert table.metadata.current_snapshot_id == reloaded.metadata.current_snapshot_id


def test_gateway_retry_with_its_own_key_commits_once(lake: Any) -> None:
    """A JVM commit without a key (Iceberg 1.10 sends none): the gateway adds one and retries with it."""
    cat, token, uri = lake
    faulty = cat.start(fault="commit_table")
    cat.restart_when_killed()
    with Gateway(uri, lambda: token) as gw, httpx.Client(base_url=gw.uri, timeout=120) as jvm:
        auth = {"Authorization": f"Bearer {gw.secret}"}
        config = jvm.get("/v1/config", headers=auth).json()
        prefix = config["overrides"]["prefix"]
        path = f"/v1/{prefix}/namespaces/f/tables/gw"
        before = jvm.get(path, headers=auth).json()["metadata"]
        body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
        r = jvm.post(path, json=body, headers=auth)
        assert r.status_code == 200, r.text
        assert faulty.proc.returncode == -signal.SIGKILL
        cat.wait_restarted()
        after = jvm.get(path, headers=auth).json()
        assert after["metadata"]["properties"]["k"] == "v"
        assert len(after["metadata"]["metadata-log"]) == len(before.get("metadata-log") or []) + 1  # once
        assert r.json()["metadata-location"] == after["metadata-location"]


SPARK_CHILD = """
import json, sys
import lakesession
uri, token, warehouse = sys.argv[1:4]
s = lakesession.connect(uri=uri, token=token, warehouse=warehouse, catalog_name="lake", master="local[1]",
                        spark_conf={"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "1"})
spark = s.spark()
spark.sql("INSERT INTO lake.f.spark VALUES (1), (2), (3)")
print(json.dumps({"rows": spark.sql("SELECT count(*) AS n FROM lake.f.spark").collect()[0]["n"]}))
s.close()
"""


@pytest.mark.spark  # Spark in a child process
@pytest.mark.soak
def test_spark_commit_through_the_gateway_lands_once(lake: Any) -> None:
    """The JVM path: Iceberg 1.10 commits without a key; the catalog dies after saving it; the gateway's
    retry (its own key) reaches the restarted catalog, which answers the stored outcome: one commit."""
    cat, token, uri = lake
    faulty = cat.start(fault="commit_table")
    cat.restart_when_killed()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYTHONPATH=str(ROOT), LAKESESSION_CONFIG="/nonexistent")
    out = subprocess.run(
        [sys.executable, "-c", SPARK_CHILD, uri, token, faulty.lines["warehouse"]],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert faulty.proc.returncode == -signal.SIGKILL  # the commit really did kill the catalog
    cat.wait_restarted()
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"rows": 3}
    table = rest_catalog("check", uri, _Static(token)).load_table("f.spark")
    assert len(table.metadata.snapshots) == 1 and table.scan().to_arrow().num_rows == 3
