"""Spark Connect for real: a Connect server (pyspark 4's own jars + the Iceberg jars) in its own JVM,
and ``lakesession.connect(remote="sc://...").spark()`` as the user in a child process.

The child creates, writes and reads Iceberg tables on the embedded catalog's S3 emulator through its
gateway, runs one query longer than two credential TTLs, then has its grant revoked. The server's
log (Spark's default INFO logging) and the Connect session's conf must never contain the user's token.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesession._spark import jars as J
from lakesession._spark.connect_server import server_command, server_env
from tests.client.test_newcomer_mistakes_spark import SAYS, Ran, assert_one_line, mistakes_run
from tests.factories import free_port

SPARK = J.detect_spark()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.skipif(
        int(SPARK.version.split(".")[0]) < 4, reason=f"the Connect server ships with pyspark 4, not {SPARK.version}"
    ),
]
TTL = 4

CLIENT = textwrap.dedent("""
    import json, sys, time
    import lakesession
    from lakesession._spark.errors import CatalogAccessError
    from lakesession.embedded import DEMO_ROLE
    remote, data_dir, ttl = sys.argv[1], sys.argv[2], int(sys.argv[3])
    s = lakesession.connect(data_dir=data_dir, credential_ttl=ttl, remote=remote,
                            spark_conf={"spark.sql.shuffle.partitions": "2"})
    spark = s.spark()
    out = {"session": type(spark).__module__, "token": s.identity.token(), "gateway": s.gateway.uri}
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.cx")
    spark.sql("CREATE TABLE lake.cx.t (id BIGINT, v STRING) USING iceberg")
    spark.sql("INSERT INTO lake.cx.t VALUES (1, 'a'), (2, 'b')")
    spark.sql("UPDATE lake.cx.t SET v = 'bb' WHERE id = 2")
    out["rows"] = [list(r) for r in spark.sql("SELECT id, v FROM lake.cx.t ORDER BY id").collect()]
    spark.sql("CREATE TABLE lake.cx.files (id BIGINT) USING iceberg")
    for i in range(8):
        spark.sql(f"INSERT INTO lake.cx.files SELECT id FROM range({i * 1000}, {(i + 1) * 1000})")
    # one long query: its later tasks open files after the credentials the scan started with expired
    spark.udf.register("sleepy", lambda x: (time.sleep(3) if x % 1000 == 0 else None) or True, "boolean")
    t0 = time.time()
    out["slow"] = spark.sql("SELECT count(*) FROM lake.cx.files WHERE sleepy(id)").collect()[0][0]
    t1 = time.time()
    out["slow_seconds"] = t1 - t0
    records = s.access_log.records(since=t0)
    out["refreshes_during"] = len([r for r in records if r.action == "refresh_credentials" and r.time <= t1])
    out["conf"] = {k: v for k, v in spark.conf.getAll.items()}
    try:  # Spark 4.1's server hides confs that look secret from Connect clients
        out["catalog_token"] = spark.conf.get("spark.sql.catalog.lake.token")
    except Exception as exc:
        out["catalog_token"] = type(exc).__name__
    s.embedded.handle.admin.revoke(DEMO_ROLE, "CATALOG_MANAGE_CONTENT", "catalog")
    try:
        spark.sql("SELECT * FROM lake.cx.t").collect()
        out["revoked"] = None
    except CatalogAccessError as exc:
        out["revoked"] = {"kind": exc.kind, "message": str(exc)}
    except Exception as exc:
        out["revoked"] = {"other": type(exc).__name__, "message": str(exc)[:2000]}
    print("RESULT " + json.dumps(out), flush=True)
    s.close()
""")


def wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"Connect server exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise TimeoutError(f"Connect server never listened on {port}:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    tmp = tmp_path_factory.mktemp("connect")
    port = free_port()
    log = tmp / "server.log"
    # Spark's default log4j (INFO), not lakesession's quiet one: the token check must see a chatty log
    cmd = server_command(
        port,
        master="local[2]",
        conf={"spark.ui.enabled": "false", "spark.driver.extraJavaOptions": "-Dlakesession.test=connect"},
    )
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=server_env(), cwd=tmp)
    try:
        wait_port(port, proc, log)
        yield f"sc://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_connect_session_acts_as_the_user_with_refreshing_vended_credentials(connect_server, tmp_path) -> None:
    remote, log = connect_server
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(script), remote, str(tmp_path / "data"), str(TTL)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
    out = json.loads(lines[0][len("RESULT ") :])
    assert out["session"].startswith("pyspark.sql.connect")
    assert out["rows"] == [[1, "a"], [2, "bb"]]
    # the long query outlived two TTLs and the server's JVM kept fetching fresh credentials
    assert out["slow"] == 8000
    assert out["slow_seconds"] > 2 * TTL, out["slow_seconds"]
    assert out["refreshes_during"] >= 2, out
    # a revoked grant is one clean line, not a gRPC dump
    assert out["revoked"] is not None and "kind" in out["revoked"], out["revoked"]
    assert out["revoked"]["kind"] == "forbidden"
    assert "not authorized" in out["revoked"]["message"] and len(out["revoked"]["message"].splitlines()) == 1
    # the server saw the gateway and its session secret, never the user's token
    token = out["token"]
    assert len(token) > 20
    conf = out["conf"]
    assert conf["spark.sql.catalog.lake.uri"] == out["gateway"]
    assert out["catalog_token"] != token  # the gateway's session secret (or hidden by the server)
    assert token not in json.dumps(conf)
    server_log = log.read_text(errors="replace")
    assert "SparkConnect" in server_log  # the log is the server's, and it is not empty
    assert token not in server_log


@pytest.fixture(scope="module")
def connect_mistakes(connect_server: tuple[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Ran:
    """test_newcomer_mistakes_spark.py's script (one client process, all seven mistakes) with ``remote=`` here."""
    return mistakes_run(tmp_path_factory.mktemp("connect-mistakes"), remote=connect_server[0])


@pytest.mark.parametrize("mistake", list(SAYS))
def test_each_newcomer_mistake_through_connect_is_the_classic_sessions_one_line(
    connect_mistakes: Ran, mistake: str
) -> None:
    """Each of the newcomer's Spark mistakes through Spark Connect: the same one line as in a classic session.

    Before (main 70ceccd): a typo'd table and a missing grant gave the catalog's words only (no table, no fix,
    no "did you mean"); a read-only write and a wrong warehouse a traceback of pyspark's Connect client (the
    write's ending in 30 lines of Java frames)."""
    assert_one_line(connect_mistakes, mistake)
