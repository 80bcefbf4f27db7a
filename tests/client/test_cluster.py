"""Cluster mode: a Spark standalone master + worker (separate JVMs); executors read and write S3
through vended credentials and refresh them through the driver's gateway.

Runs the driver in a child process: the suite's shared SparkSession is local and a process can
hold only one SparkContext.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests._cluster import auth_file, cluster_env, standalone_cluster

pytestmark = [pytest.mark.slow, pytest.mark.spark]

DRIVER = textwrap.dedent("""
    import json, sys, time
    import lakesession
    master, data_dir = sys.argv[1], sys.argv[2]
    s = lakesession.connect(data_dir=data_dir, credential_ttl=6, master=master,
                            spark_conf={"spark.ui.enabled": "false", "spark.executor.cores": "1",
                                        "spark.cores.max": "1", "spark.sql.shuffle.partitions": "2"})
    spark = s.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.cl")
    spark.sql("CREATE TABLE lake.cl.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.cl.t SELECT id, CAST(id AS STRING) FROM range(0, 20000)")
    started = time.time()
    counts = []
    while time.time() - started < 7:  # more than one TTL
        counts.append(spark.sql("SELECT count(*) FROM lake.cl.t WHERE id % 3 = 0").collect()[0][0])
        spark.sql("INSERT INTO lake.cl.t VALUES (100000, 'late')")
    # one query longer than two TTLs: its later tasks open files with credentials the executor
    # JVM must have refreshed itself (the driver's copy from planning has expired by then)
    spark.sql("CREATE TABLE lake.cl.files (id BIGINT) USING iceberg")
    for i in range(8):
        spark.sql(f"INSERT INTO lake.cl.files SELECT id FROM range({i * 1000}, {(i + 1) * 1000})")
    spark.udf.register("sleepy", lambda x: (time.sleep(2) if x % 1000 == 0 else None) or True, "boolean")
    t0 = time.time()
    slow = spark.sql("SELECT count(*) FROM lake.cl.files WHERE sleepy(id)").collect()[0][0]
    slow_seconds = time.time() - t0
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    refreshes = [r for r in s.access_log.records() if r.action == "refresh_credentials"]
    print(json.dumps({"counts": counts, "executors": executors, "refreshes": len(refreshes), "slow": slow,
                      "slow_seconds": slow_seconds,
                      "location": s.table("cl.t").location(),
                      "rows": spark.sql("SELECT count(*) FROM lake.cl.t").collect()[0][0]}))
    s.close()
""")


def test_executors_use_and_refresh_vended_credentials(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with standalone_cluster(tmp_path) as master:
        out = subprocess.run(
            [sys.executable, "-c", DRIVER, master, str(tmp_path / "data")],
            env=cluster_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=400,
        )
    assert out.returncode == 0, out.stderr[-4000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["executors"] == 1
    assert result["location"].startswith("s3://")
    assert result["counts"] and result["counts"][0] == 6667
    assert result["counts"] == sorted(result["counts"])  # each pass saw the rows written before it
    assert result["slow"] == 8000 and result["slow_seconds"] > 2 * 6  # outlived two TTLs inside one query
    assert result["refreshes"] > 0  # executor JVMs asked the gateway for fresh credentials


def test_a_process_without_the_secret_fetches_no_block_from_the_cluster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The driver and its executor on a standalone cluster started the documented way (``tests/_cluster.py``):
    after a read whose broadcast carries vended keys, an attacker with no secret fetches nothing from either."""
    from tests import _blockthief
    from tests._victim import victim

    conf = {"spark.ui.enabled": "false", "spark.executor.cores": "1", "spark.cores.max": "1"}
    with (
        standalone_cluster(tmp_path) as master,
        victim(master, tmp_path / "driver", conf, env=cluster_env(tmp_path)) as (report, _),
    ):
        assert report["rows"] == 2 and report["authenticate"] == "true"
        driver = _blockthief.targets(report["pid"])
        executors = [
            t for pid in _java_processes_named("CoarseGrainedExecutorBackend") for t in _blockthief.targets(pid)
        ]
        assert executors, "no executor is listening: the cluster ran nothing"
        secret = next(
            line.split()[1] for line in auth_file(tmp_path).read_text().splitlines() if line.startswith(SECRET_KEY)
        )
        shown = [p.name for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_has(p, secret)]
        assert shown == []  # on no command line: not the driver's, the master's, the worker's or the executor's
        stolen = _blockthief.run(driver + executors)
    assert stolen["fetched"] == {}, sorted(stolen["fetched"])
    assert set(stolen["refused"]) == {str(p) for _, p in driver + executors}


SECRET_KEY = "spark.authenticate.secret "


def _cmdline_has(proc: Path, text: str) -> bool:
    try:
        return text.encode() in (proc / "cmdline").read_bytes()
    except OSError:
        return False


def _java_processes_named(main_class: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if main_class.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found
