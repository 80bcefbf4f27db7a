"""The engine's Spark network, attacked: its JVM holds the keys vended for DEFINER chains, so nobody may reach it.

Before ``lakesession._spark._seal``, a process with no token and no engine session fetched 26 broadcast blocks
from the engine's BlockManager (on the host's routable address, no authentication) and read the keys vended
for alice's DEFINER chain — then all of ``sales.orders`` from the store. Now the engine's JVM listens on
loopback only and authenticates every connection; its front door is the only port ``--host`` opens; and what
a user can ask over Connect (``conf.getAll``) names no driver address, port, jar or secret.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests import _blockthief, _sockets
from tests._engine import ENGINE_TESTS, EU, RunningEngine, login

pytestmark = ENGINE_TESTS


def _jvm(engine: RunningEngine) -> int:
    pids = _sockets.java_children(engine.process.pid)
    assert len(pids) == 1, pids
    return pids[0]


def _front_port(engine: RunningEngine) -> int:
    return int(engine.address.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def test_no_process_without_the_secret_fetches_the_engines_blocks(
    catalog: Any, engine: RunningEngine, view: str
) -> None:
    alice = login(catalog, "alice", engine)
    try:  # a DEFINER chain: the engine's JVM now holds keys vended for bob's view over etl's table
        rows = sorted((r["id"], r["amount"]) for r in alice.sql(f"SELECT * FROM lake.{view}").collect())
    finally:
        alice.close()
    assert rows == EU
    where = _blockthief.targets(_jvm(engine))
    assert where
    stolen = _blockthief.run(where)
    assert stolen["fetched"] == {}, sorted(stolen["fetched"])
    assert set(stolen["refused"]) == {str(p) for _, p in where}


def test_only_the_front_door_is_where_host_says_and_the_jvm_is_on_loopback(engine: RunningEngine) -> None:
    jvm = _jvm(engine)
    assert _sockets.exposed(jvm) == []
    cmdline = Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
    assert b"spark.authenticate=true" in cmdline
    assert b"spark.ui.enabled=false" in cmdline  # no UI showing every user's queries
    front = _front_port(engine)
    own = _sockets.listening(engine.process.pid)
    assert ("127.0.0.1", front) in own  # the tests' engine runs with the default --host 127.0.0.1
    assert _sockets.exposed(engine.process.pid) == []


def test_connect_users_learn_no_address_port_jar_or_secret(catalog: Any, engine: RunningEngine, view: str) -> None:
    alice = login(catalog, "alice", engine)
    try:
        settings = alice.engine().conf.getAll
    finally:
        alice.close()
    assert settings, "getAll answered nothing: the check would prove nothing"
    ports = {str(port) for _, port in _sockets.listening(_jvm(engine))}
    leaks = {
        key: value
        for key, value in settings.items()
        if "spark://" in value
        or ".jar" in value
        or "lakesession-spark-" in value
        or any(f":{port}" in value or value == port for port in ports)
        or key.startswith(("spark.driver.", "spark.authenticate", "spark.app.", "spark.repl.", "spark.local"))
    }
    assert leaks == {}


def test_the_engine_leaves_no_spark_warehouse_in_its_working_directory(engine: RunningEngine) -> None:
    cwd = Path(f"/proc/{engine.process.pid}/cwd").resolve()
    assert cwd != Path(__file__).resolve().parents[2]  # the tests start it in a folder of its own
    assert not (cwd / "spark-warehouse").exists()
    assert list(cwd.iterdir()) == [] or all(p.suffix == ".log" for p in cwd.iterdir()), list(cwd.iterdir())
