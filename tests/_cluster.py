"""A Spark standalone cluster for the tests: one master and one worker (1 core, 1 GB), separate JVMs."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.factories import free_port, stop_process

SPARK_CLASS = Path(__import__("pyspark").__file__).parent / "bin" / "spark-class"


def cluster_env(tmp: Path) -> dict[str, str]:
    """The environment of the cluster's JVMs and its drivers: loopback only, no ambient AWS keys."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp / "work"), PYSPARK_PYTHON=sys.executable)
    return env


def wait_port(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"port {port} never opened")


def _quiet(cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def standalone_cluster(tmp: Path) -> Iterator[str]:
    """``spark://127.0.0.1:<port>`` of a running master with one registered worker; both stopped at the end."""
    env = cluster_env(tmp)
    port = free_port()
    master_cmd = [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1"]
    master = _quiet([*master_cmd, "--port", str(port), "--webui-port", str(free_port())], env)
    worker = None
    try:
        wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        worker_cmd = [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1"]
        worker_cmd += ["--memory", "1g", "--webui-port", str(free_port()), "--host", "127.0.0.1"]
        worker = _quiet(worker_cmd, env)
        time.sleep(3)
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None:
                stop_process(proc, timeout=20)
