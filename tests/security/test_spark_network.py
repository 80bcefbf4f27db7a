"""Spark's own network, attacked: a second process with no secret tries to fetch the notebook Spark's blocks.

Iceberg's Spark scans broadcast the table and its FileIO properties, vended ``s3.*`` keys included. Before
``lakesession._spark._seal``, every JVM lakesession started listened on the host's routable address with no
authentication: a process with no token, using Spark's own block-transfer client (``tests/_blockthief.py``),
fetched those broadcasts and read the keys (the control test below shows it still does when a user turns
``spark.authenticate`` off). Now the JVM listens on loopback only, and its BlockManager refuses a client
without the secret Spark made for this start, which is nowhere but in the JVM's memory.

The suite's shared SparkSession (``lake``) is the victim of the sealed tests; the control runs a victim of its
own (``tests/_victim.py``) in a child process. The engine's JVM: ``tests/engine/test_engine_network.py``; a
standalone cluster: ``tests/client/test_cluster.py``.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests import _blockthief, _sockets
from tests._victim import victim

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def spark(lake: Any) -> Any:
    """The shared session after a read of a vended table (its broadcasts carry the keys)."""
    spark = lake.spark()
    spark.sql("CREATE NAMESPACE IF NOT EXISTS lake.netseal")
    spark.sql("CREATE TABLE IF NOT EXISTS lake.netseal.orders (id BIGINT, region STRING) USING iceberg")
    spark.sql("INSERT INTO lake.netseal.orders VALUES (1, 'EU'), (2, 'US')")
    assert len(spark.sql("SELECT * FROM lake.netseal.orders").collect()) >= 2
    return spark


def _jvm_pid(spark: Any) -> int:
    return int(spark.sparkContext._gateway.proc.pid)


def _secret(spark: Any) -> str:
    return str(spark.sparkContext._jsc.sc().env().securityManager().getSecretKey())


def test_the_attack_works_on_an_unsealed_jvm(tmp_path: Path) -> None:
    """The control: a user who turns ``spark.authenticate`` off is warned, and the attacker reads the keys."""
    with victim("local[2]", tmp_path / "victim", {"spark.authenticate": "false"}) as (report, _):
        host, port = report["blockmanager"]
        stolen = _blockthief.run([(host, port)])
        err = (tmp_path / "victim" / "victim.err").read_text()
    assert report["authenticate"] == "false"
    assert "spark.authenticate=false" in err  # one warning line naming the risk
    found = [p for p in _blockthief.payloads(stolen) if b"s3.secret-access-key" in p and b"s3.session-token" in p]
    assert found, f"the attacker fetched {sorted(stolen['fetched'])} without any key: the control proves nothing"


def test_a_process_without_the_secret_fetches_no_block(spark: Any) -> None:
    where = _blockthief.targets(_jvm_pid(spark))
    bm = spark.sparkContext._jsc.sc().env().blockManager().blockManagerId()
    assert bm.port() in [port for _, port in where]
    stolen = _blockthief.run(where)
    assert stolen["fetched"] == {}, sorted(stolen["fetched"])
    assert set(stolen["refused"]) == {str(p) for _, p in where}


def test_every_socket_of_the_jvm_is_on_loopback(spark: Any) -> None:
    pid = _jvm_pid(spark)
    assert _sockets.listening(pid), "the JVM listens on nothing: the check would prove nothing"
    assert _sockets.exposed(pid) == []
    conf = dict(spark.sparkContext.getConf().getAll())
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"


def _everything_readable(pid: int) -> dict[str, bytes]:
    """What an account of this host, or the user's own logs, could show: every command line, the JVM's
    environment, lakesession's Spark logs."""
    from lakesession._spark import _sparklog

    seen = {"environ": Path(f"/proc/{pid}/environ").read_bytes()}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                seen[f"cmdline {proc.name}"] = (proc / "cmdline").read_bytes()
            except OSError:
                continue
    for log in _sparklog.log_dir().glob("spark-*.log"):
        seen[str(log)] = log.read_bytes()
    return seen


def test_authentication_is_on_and_its_secret_is_nowhere_but_the_jvm(spark: Any) -> None:
    security = spark.sparkContext._jsc.sc().env().securityManager()
    assert security.isAuthenticationEnabled()
    secret = _secret(spark)
    assert len(secret) >= 32
    leaks = [where for where, data in _everything_readable(_jvm_pid(spark)).items() if secret.encode() in data]
    assert leaks == []
    settings = [tuple(r) for r in spark.sql("SET").collect()] + list(spark.sparkContext.getConf().getAll())
    assert [k for k, v in settings if secret in str(v)] == []
    plan = "\n".join(r[0] for r in spark.sql("EXPLAIN EXTENDED SELECT * FROM lake.netseal.orders").collect())
    assert secret not in plan and "s3.secret-access-key" not in plan


def test_sparks_files_are_private_and_never_in_the_working_directory(spark: Any) -> None:
    conf = dict(spark.sparkContext.getConf().getAll())
    root = Path(conf["spark.local.dir"]).parent
    assert stat.S_IMODE(root.stat().st_mode) == 0o700 and root.stat().st_uid == os.getuid()
    blockmgrs = list(Path(conf["spark.local.dir"]).glob("blockmgr-*"))
    assert blockmgrs
    for path in [Path(conf["spark.local.dir"]), *blockmgrs]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    warehouse = Path(conf["spark.sql.warehouse.dir"].removeprefix("file:"))
    assert warehouse.parent == root and not warehouse.is_relative_to(Path.cwd())
    from lakesession._spark import _sparklog

    assert stat.S_IMODE(_sparklog.log_dir().stat().st_mode) == 0o700
