"""Run a Spark Connect server with the Iceberg jars, for users whose notebooks use ``remote="sc://..."``.

pyspark 4 ships the server (``spark-connect_2.13-<v>.jar``) but not ``sbin/start-connect-server.sh``:
``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer`` starts it. The
server knows no user and no catalog: each lakesession client registers its catalog per Connect
session (runtime SQL conf), pointing at that user's own gateway with the gateway's session secret,
so the server never holds a user's token.

    python -m lakesession._spark.connect_server --port 15002 [--host 0.0.0.0] [--master local[*]]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from . import _seal, _sparklog
from .jars import JarSet, detect_spark, resolve_jars
from .versions import JarResolutionError

CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
EXTENSIONS = "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions"
DEFAULT_PORT = 15002


def spark_bin(tool: str) -> Path:
    """``bin/<tool>`` of the Spark that lakesession resolves jars for (SPARK_HOME or pyspark)."""
    return detect_spark().jars_dir.parent / "bin" / tool


def server_command(
    port: int = DEFAULT_PORT,
    *,
    host: str = "127.0.0.1",
    jars: JarSet | None = None,
    master: str = "local[*]",
    conf: Mapping[str, str] | None = None,
) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``host:port`` with the Iceberg jars."""
    spark = detect_spark()
    if not (spark.jars_dir / f"spark-connect_{spark.scala}-{spark.version}.jar").is_file():
        raise JarResolutionError(
            f"Spark {spark.version} in {spark.jars_dir} has no spark-connect jar: the Connect server ships "
            "with pyspark 4 (pip install 'pyspark>=4.1,<4.2')"
        )
    jar_set = jars if jars is not None else resolve_jars()
    settings = {
        "spark.connect.grpc.binding.address": host,
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.extensions": EXTENSIONS,
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": _sparklog.java_options(console=True),  # a server logs to stderr
        **jar_set.spark_conf(),
        **(conf or {}),
    }
    # sealed like every JVM lakesession starts (``_seal``); a cluster's secret goes in a 0600 properties file
    sealed = _seal.seal(settings, master, user_conf=conf)
    cmd = [str(spark_bin("spark-submit")), "--class", CONNECT_CLASS, "--name", "lakesession Spark Connect"]
    cmd += ["--master", master]
    if sealed.hidden:
        cmd += ["--properties-file", str(_seal.properties_file(sealed.hidden))]
    for key, value in sealed.apply(settings).items():
        cmd += ["--conf", f"{key}={value}"]
    return cmd


def server_env(base: Mapping[str, str] | None = None, *, master: str = "local[*]") -> dict[str, str]:
    """The server's environment: no ambient AWS keys (only vended credentials reach S3), this Python for UDFs,
    and in local mode its UI on loopback (``SPARK_LOCAL_IP``)."""
    env = {k: v for k, v in (base if base is not None else os.environ).items() if not k.startswith("AWS_")}
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    if _seal.is_local(master):
        env.setdefault("SPARK_LOCAL_IP", _seal.LOOPBACK)
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lakesession._spark.connect_server", description=__doc__)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1", help="gRPC bind address (0.0.0.0 for remote clients)")
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--jars", default="auto", help="jar mode: auto, maven, cache, offline")
    parser.add_argument("--print", action="store_true", help="print the command instead of running it")
    args = parser.parse_args(argv)
    cmd = server_command(args.port, host=args.host, jars=resolve_jars(args.jars), master=args.master)
    if args.print:
        print(" ".join(cmd))
        return 0
    return subprocess.call(cmd, env=server_env(master=args.master))


if __name__ == "__main__":
    sys.exit(main())
