"""The engine on a Spark standalone cluster, stopped cleanly and restarted without losing committed data.

A master and a worker (separate JVMs, ``tests._cluster``) run the engine's executors; they read
``sales.orders`` through bob's DEFINER view for alice, with the credentials the engine's per-user gateway
vends (reached on loopback: ``--gateway-host`` would be the engine's routable address on a real cluster).
etl commits a table through the engine; SIGTERM stops it (exit 0); a new engine serves the same data.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests._cluster import auth_file, standalone_cluster
from tests._engine import ENGINE_TESTS, EU, login, start_engine

pytestmark = ENGINE_TESTS


def test_the_engine_runs_on_a_cluster_and_a_restart_keeps_committed_data(
    catalog: Any, view: str, tmp_path: Path
) -> None:
    cluster_conf = [
        "--conf",
        "spark.cores.max=1",
        "--conf",
        "spark.executor.cores=1",
        "--conf",
        "spark.executor.memory=1g",
        "--conf",  # the cluster's secret, as docs/how-to/engine.md tells operators to give it
        f"spark.authenticate.secret.file={auth_file(tmp_path)}",
    ]
    with (
        standalone_cluster(tmp_path) as cluster,
        start_engine(catalog, tmp_path, master=cluster.url, extra_args=cluster_conf) as engine,
    ):
        alice, etl = login(catalog, "alice", engine), login(catalog, "etl", engine)
        try:
            rows = sorted((r["id"], r["amount"]) for r in alice.sql("SELECT * FROM lake.sales.v_eu").collect())
            spark = etl.engine()
            spark.sql("CREATE TABLE lake.sales.daily (day STRING, total DOUBLE) USING iceberg").collect()
            spark.sql("INSERT INTO lake.sales.daily VALUES ('d1', 1.0), ('d2', 2.0)").collect()
        finally:
            alice.close()
            etl.close()
        engine.process.send_signal(signal.SIGTERM)
        assert engine.process.wait(timeout=60) == 0, engine.log_text()[-3000:]
    assert rows == EU
    apps = list((tmp_path / "work").glob("app-*"))
    assert apps, "no executor ran on the cluster's worker"
    with start_engine(catalog, tmp_path) as again:
        etl = login(catalog, "etl", again)
        try:
            daily = sorted(tuple(r) for r in etl.engine().sql("SELECT * FROM lake.sales.daily").collect())
        finally:
            etl.close()
    assert daily == [("d1", 1.0), ("d2", 2.0)]
