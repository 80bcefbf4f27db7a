"""A Spark standalone cluster for the tests: one master and one worker (1 core, 1 GB), separate JVMs."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.factories import free_port, stop_process

SPARK_CLASS = Path(__import__("pyspark").__file__).parent / "bin" / "spark-class"


def auth_file(tmp: Path) -> Path:
    """The cluster's properties file, written the way docs/explanation/security.md tells operators to:
    ``spark.authenticate`` with a fresh shared secret and AES-encrypted RPC, readable by its owner only. The
    master and the worker start with ``--properties-file``; drivers name it in ``LAKESESSION_SPARK_SECRET_FILE``."""
    path = tmp / "spark-auth.conf"
    if not path.exists():
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(
                "spark.authenticate true\n"
                f"spark.authenticate.secret {secrets.token_hex(32)}\n"
                "spark.network.crypto.enabled true\n"
            )
    return path


def cluster_env(tmp: Path) -> dict[str, str]:
    """The environment of the cluster's JVMs and its drivers: loopback only, no ambient AWS keys, the secret's file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(SPARK_LOCAL_IP="127.0.0.1", SPARK_WORKER_DIR=str(tmp / "work"), PYSPARK_PYTHON=sys.executable)
    env["LAKESESSION_SPARK_SECRET_FILE"] = str(auth_file(tmp))
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


@dataclass
class Cluster:
    """A running master and worker: ``url`` for drivers, the worker's process (its children are the executors)."""

    url: str
    worker: subprocess.Popen[bytes]
    tmp: Path

    def executors(self) -> list[int]:
        """The pids of the executor JVMs this cluster's worker runs now (no other cluster's on the host)."""
        from tests._sockets import java_children

        return java_children(self.worker.pid)


def wait_worker(webui: int, worker: subprocess.Popen[bytes], timeout: float = 90) -> None:
    """Until the master at ``webui`` lists an ALIVE worker: polled on its JSON page, not a fixed sleep, so a
    fast start costs no more than it takes and a slow one (a loaded machine) fails with a reason."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if worker.poll() is not None:
            raise RuntimeError(f"the worker exited with code {worker.returncode} before registering")
        try:
            state = httpx.get(f"http://127.0.0.1:{webui}/json/", timeout=5).json()
        except (httpx.HTTPError, ValueError):
            state = {}
        if any(w.get("state") == "ALIVE" for w in state.get("workers", [])):
            return
        time.sleep(0.2)
    raise TimeoutError(f"no worker registered with the master within {timeout} s")


@contextmanager
def standalone_cluster(tmp: Path) -> Iterator[Cluster]:
    """A running master with one registered worker, both authenticating with the secret of ``auth_file(tmp)``
    (``cluster_env(tmp)`` gives it to drivers); both stopped at the end."""
    env = cluster_env(tmp)
    port, webui = free_port(), free_port()
    props = ["--properties-file", str(auth_file(tmp))]
    master_cmd = [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", *props]
    master = _quiet([*master_cmd, "--port", str(port), "--webui-port", str(webui)], env)
    worker = None
    try:
        wait_port(port)
        url = f"spark://127.0.0.1:{port}"
        worker_cmd = [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", url, "--cores", "1"]
        worker_cmd += ["--memory", "1g", "--webui-port", str(free_port()), "--host", "127.0.0.1", *props]
        worker = _quiet(worker_cmd, env)
        wait_worker(webui, worker)
        yield Cluster(url, worker, tmp)
    finally:
        for proc in (worker, master):
            if proc is not None:
                stop_process(proc, timeout=20)
