"""A victim for Spark-network attacks: a ``lakesession.spark()`` process that has just read a table, waiting.

    python -m tests._victim <master> <data dir> [<spark_conf as JSON>]

On the embedded default it creates, fills and reads ``lake.net.orders`` (Iceberg's scan broadcasts the table's
FileIO, vended keys included), then prints one JSON line: its JVM's pid, the driver's BlockManager
``[host, port]`` and ``spark.authenticate``; it then waits until its standard input closes. ``victim(...)`` runs it as a context.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    import lakesession

    master, data_dir = argv[0], argv[1]
    conf = {"spark.sql.shuffle.partitions": "2", **(json.loads(argv[2]) if len(argv) > 2 else {})}
    session = lakesession.connect(data_dir=data_dir, master=master, spark_conf=conf)
    print(json.dumps(read_vended(session.spark())), flush=True)
    sys.stdin.read()
    session.close()
    return 0


def read_vended(spark: Any) -> dict[str, Any]:
    """Create, fill and read ``lake.net.orders`` in ``spark``; the report ``main`` prints (a driver on a test
    cluster serving several tests calls it too: ``tests/_cluster_driver.py``)."""
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.net")
    spark.sql("CREATE TABLE lake.net.orders (id BIGINT, region STRING) USING iceberg")
    spark.sql("INSERT INTO lake.net.orders VALUES (1, 'EU'), (2, 'US')")
    rows = spark.sql("SELECT * FROM lake.net.orders").collect()
    sc = spark.sparkContext
    bm = sc._jsc.sc().env().blockManager().blockManagerId()
    return {
        "pid": sc._gateway.proc.pid,
        "blockmanager": [bm.host(), bm.port()],
        "rows": len(rows),
        "authenticate": sc.getConf().get("spark.authenticate"),
    }


@contextmanager
def victim(
    master: str,
    data_dir: Path,
    conf: dict[str, str] | None = None,
    *,
    env: dict[str, str] | None = None,
    timeout: float = 300.0,
) -> Iterator[tuple[dict[str, Any], subprocess.Popen[str]]]:
    """The victim's report and process (its stderr in ``data_dir/victim.err``); stopped when the block ends."""
    data_dir.mkdir(parents=True, exist_ok=True)
    err = (data_dir / "victim.err").open("w")
    cmd = [sys.executable, "-m", "tests._victim", master, str(data_dir), json.dumps(conf or {})]
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line.startswith("{"):
            proc.wait(timeout=30)
            raise RuntimeError(f"the victim failed: {(data_dir / 'victim.err').read_text()[-3000:]}")
        yield json.loads(line), proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=timeout / 5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        err.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
