"""One driver on the test cluster for all of a module's tests: a ``lakesession.connect(master=…)`` process
that runs named workloads when asked.

    python -m tests._cluster_driver <master> <data dir> <credential ttl>

Why: a driver JVM, and the executor JVM the standalone cluster (``tests/_cluster.py``) starts for it, take
tens of seconds on CI's two cores, and ``tests/client/test_cluster.py``'s tests need the same configuration;
so they share one (in a child process: the suite's shared SparkContext is local, and a process holds one).
It prints ``READY`` once its session is up, then reads one workload name a line on standard input and prints
one ``RESULT <json>`` line for each (``{"error": …}`` when it raised); at the end of its input it closes its
session. ``cluster_driver(...)`` runs it as a context; ``Driver.ask(name)`` is a workload's result.

- ``refresh``: executors use and refresh vended credentials (``refresh``);
- ``victim``: a read whose broadcast carries vended keys (``tests._victim.read_vended``), for the block thief.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests._cluster import Cluster, cluster_env

CONF = {
    "spark.ui.enabled": "false",
    "spark.executor.cores": "1",
    "spark.cores.max": "1",
    "spark.sql.shuffle.partitions": "2",
}
FILES = 8  # data files the slow query opens one after another


def refresh(session: Any, ttl: int) -> dict[str, Any]:
    """Reads and writes across more than one credential lifetime, then one query across more than two."""
    spark = session.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.cl")
    spark.sql("CREATE TABLE lake.cl.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.cl.t SELECT id, CAST(id AS STRING) FROM range(0, 20000)")
    started = time.time()
    counts = []
    while time.time() - started < ttl + 1:  # more than one TTL
        counts.append(spark.sql("SELECT count(*) FROM lake.cl.t WHERE id % 3 = 0").collect()[0][0])
        spark.sql("INSERT INTO lake.cl.t VALUES (100000, 'late')")
    # one query longer than two TTLs: it opens its files one after another, pausing at each file's first row,
    # so its later files are opened with credentials the executor JVM must have refreshed itself (the
    # driver's copy from planning has expired by then). One commit writes the FILES files of 1,000 ids each
    # (range's slices: contiguous, no shuffle on an unpartitioned table).
    spark.sql("CREATE TABLE lake.cl.files (id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO lake.cl.files SELECT id FROM range(0, {FILES * 1000}, 1, {FILES})")
    pause = ttl / 3  # FILES pauses: 8/3 of a TTL
    spark.udf.register("sleepy", lambda x: (time.sleep(pause) if x % 1000 == 0 else None) or True, "boolean")
    t0 = time.time()
    slow = spark.sql("SELECT count(*) FROM lake.cl.files WHERE sleepy(id)").collect()[0][0]
    slow_seconds = time.time() - t0
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    refreshes = [r for r in session.access_log.records() if r.action == "refresh_credentials"]
    return {
        "counts": counts,
        "executors": executors,
        "refreshes": len(refreshes),
        "files": spark.sql("SELECT count(*) FROM lake.cl.files.files").collect()[0][0],
        "slow": slow,
        "slow_seconds": slow_seconds,
        "location": session.table("cl.t").location(),
        "rows": spark.sql("SELECT count(*) FROM lake.cl.t").collect()[0][0],
    }


def victim(session: Any, ttl: int) -> dict[str, Any]:
    from tests._victim import read_vended

    return read_vended(session.spark())


WORKLOADS: dict[str, Callable[[Any, int], dict[str, Any]]] = {"refresh": refresh, "victim": victim}


def main(argv: list[str]) -> int:
    import lakesession

    master, data_dir, ttl = argv[0], argv[1], int(argv[2])
    session = lakesession.connect(data_dir=data_dir, credential_ttl=ttl, master=master, spark_conf=CONF)
    session.spark()
    print("READY", flush=True)
    for line in sys.stdin:
        try:
            result = WORKLOADS[line.strip()](session, ttl)
        except Exception:  # the test reports it
            result = {"error": traceback.format_exc()[-4000:]}
        print("RESULT " + json.dumps(result), flush=True)
    session.close()
    return 0


class Driver:
    """The driver process seen from a test: ``ask`` runs a workload there and returns its result."""

    def __init__(self, proc: subprocess.Popen[str], err: Path) -> None:
        self.proc, self.err = proc, err
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float) -> str:
        """The rest of the next stdout line starting with ``prefix`` (others, like Ivy's, are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the driver said no {prefix!r} in {timeout} s: {self.tail()}") from None
            if line is None:
                raise RuntimeError(f"the driver exited ({self.proc.wait()}): {self.tail()}")
            if line.startswith(prefix):
                return line[len(prefix) :].strip()

    def ask(self, workload: str, timeout: float = 400) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(workload + "\n")
        self.proc.stdin.flush()
        result: dict[str, Any] = json.loads(self.expect("RESULT ", timeout))
        if "error" in result:
            raise RuntimeError(f"{workload} failed in the driver:\n{result['error']}")
        return result

    def tail(self) -> str:
        return self.err.read_text(errors="replace")[-4000:] if self.err.exists() else ""


@contextmanager
def cluster_driver(cluster: Cluster, data_dir: Path, ttl: int, timeout: float = 300) -> Iterator[Driver]:
    """The driver on ``cluster`` with its embedded catalog in ``data_dir`` (vending ``ttl``-second credentials),
    its stderr in ``data_dir/driver.err``; its session closed and the process ended when the block ends."""
    data_dir.mkdir(parents=True, exist_ok=True)
    err_path = data_dir / "driver.err"
    cmd = [sys.executable, "-m", "tests._cluster_driver", cluster.url, str(data_dir), str(ttl)]
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=cluster_env(cluster.tmp),
            cwd=str(Path(__file__).resolve().parent.parent),
        )
    driver = Driver(proc, err_path)
    try:
        driver.expect("READY", timeout)
        yield driver
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
