"""Two users at once on the package's one engine: bob never sees alice's temporary views, settings or results.

alice and bob each open a Connect session on the same engine JVM (``login(catalog, who, engine).engine()``,
pyspark's own client) and work at the same time from two threads; what pyspark never sends (alice's session
id and operation id under bob's token) goes by hand on a raw gRPC channel (``tests._engine.RawConnect``).

Temporary views and settings are Spark Connect's per-session state: the engine's part is that a session
belongs to the principal who opened it (the front door binds the session id to the token's principal and
overwrites ``user_id``). Without that binding (by hand, 2026-11-27, the engine started with the binding,
the ``user_id`` overwrite and token verification taken out — see test_engine_attacks' docstring): bob,
claiming ``user_id="alice"`` with alice's session id and operation id, reattached to her operation and
received her rows; alice, claiming ``user_id="bob"`` with bob's session id, read bob's temporary view and
closed his session with ReleaseSession. A long query holds no lock in the front door or the server: that is
a property, not a check, so it has no "without" run.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from lakesession.errors import CatalogAccessError, EngineRefusedError
from tests._engine import ENGINE_TESTS, EU, RawConnect, RunningEngine, arrow_rows, describe_rpc_error, login

pytestmark = ENGINE_TESTS


@dataclass
class User:
    session: Any
    spark: Any

    def token(self) -> str:
        return str(self.session.identity.token())

    @property
    def session_id(self) -> str:
        return str(self.spark.client._session_id)


def _user(catalog: Any, engine: RunningEngine, who: str) -> Iterator[User]:
    session = login(catalog, who, engine)
    try:
        yield User(session, session.engine())
    finally:
        session.close()


@pytest.fixture(scope="module")
def alice(catalog: Any, engine: RunningEngine, view: str) -> Iterator[User]:
    yield from _user(catalog, engine, "alice")


@pytest.fixture(scope="module")
def bob(catalog: Any, engine: RunningEngine, view: str) -> Iterator[User]:
    yield from _user(catalog, engine, "bob")


@pytest.fixture(scope="module")
def raw(engine: RunningEngine) -> Iterator[RawConnect]:
    channel = RawConnect(engine)
    try:
        yield channel
    finally:
        channel.close()


def _at_once(work: dict[str, Any]) -> dict[str, Any]:
    """Run each callable in its own thread, started together; their results (an exception fails the test)."""
    barrier = threading.Barrier(len(work), timeout=60)
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        try:
            barrier.wait()
            results[name] = work[name](barrier)
        except BaseException as exc:  # re-raised below, in the test's thread
            results[name] = exc
            barrier.abort()  # the other thread stops waiting for this one

    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in work]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    for value in results.values():
        if isinstance(value, BaseException) and not isinstance(value, threading.BrokenBarrierError):
            raise value
    assert set(results) == set(work)
    return results


def test_temporary_views_settings_and_catalogs_stay_in_their_session(alice: User, bob: User) -> None:
    reads = {"alice": "SELECT id, amount FROM lake.sales.v_eu", "bob": "SELECT id, amount FROM lake.sales.orders"}

    def work(user: User, name: str, partitions: str) -> Any:
        def steps(barrier: threading.Barrier) -> dict[str, Any]:
            spark = user.spark
            spark.sql(f"SELECT '{name}' AS owner").createOrReplaceTempView("mine")  # the same name in both sessions
            spark.sql(f"SELECT '{name}' AS owner").createOrReplaceTempView(f"only_{name}")
            spark.conf.set("spark.sql.shuffle.partitions", partitions)
            spark.sql(f"SET spark.sql.session.timeZone=Etc/GMT-{partitions}")
            rows = spark.sql(reads[name]).collect()  # alice through bob's view, bob his own table
            barrier.wait()  # both have written before either reads
            other = "bob" if name == "alice" else "alice"
            return {
                "mine": spark.sql("SELECT owner FROM mine").collect()[0][0],
                "partitions": spark.conf.get("spark.sql.shuffle.partitions"),
                "zone": spark.sql("SELECT current_timezone()").collect()[0][0],
                "sees other's view": spark.catalog.tableExists(f"only_{other}"),
                "has own views": spark.catalog.tableExists("mine") and spark.catalog.tableExists(f"only_{name}"),
                "catalogs": {c.name for c in spark.catalog.listCatalogs()},
                "rows": sorted((r["id"], r["amount"]) for r in rows),
            }

        return steps

    seen = _at_once({"alice": work(alice, "alice", "3"), "bob": work(bob, "bob", "7")})
    a, b = seen["alice"], seen["bob"]
    assert (a["mine"], a["partitions"], a["zone"], a["sees other's view"]) == ("alice", "3", "Etc/GMT-3", False)
    assert (b["mine"], b["partitions"], b["zone"], b["sees other's view"]) == ("bob", "7", "Etc/GMT-7", False)
    assert a["has own views"] and b["has own views"]
    assert a["rows"] == EU and len(b["rows"]) == 5
    # alice's view-chain catalogs (configured by the front door in her session, for her gateway) are listed to
    # nobody, not even to her (the JVM's UserFacing rule)
    assert not {c for c in a["catalogs"] | b["catalogs"] if "__chain_" in c}
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        bob.spark.sql("SELECT * FROM only_alice").collect()
    with pytest.raises(EngineRefusedError) as info:  # and bob may not name a chain catalog at all
        bob.spark.sql("SELECT * FROM lake__chain_0123456789abcdef.sales.orders").collect()
    assert info.value.rule == "internal-catalog"


def _reattachable(raw: RawConnect, query: str, session_id: str, operation_id: str) -> Any:
    request = raw.sql(query, session_id, operation_id=operation_id)
    request.request_options.add().reattach_options.reattachable = True
    return request


def test_bob_cannot_reattach_release_or_interrupt_alices_operation(alice: User, bob: User, raw: RawConnect) -> None:
    """Without the check (by hand): ReattachExecute with alice's session and operation ids returned her rows to bob."""
    sid, op, pb = alice.session_id, str(uuid.uuid4()), raw.pb
    first = raw.call(_reattachable(raw, "SELECT id, amount FROM lake.sales.v_eu ORDER BY id", sid, op), alice.token())
    assert [(r["id"], r["amount"]) for r in arrow_rows(first)] == EU
    as_alice = pb.UserContext(user_id="alice", user_name="alice")
    attempts = [
        pb.ReattachExecuteRequest(session_id=sid, operation_id=op),
        pb.ReattachExecuteRequest(session_id=sid, operation_id=op, user_context=as_alice),
        pb.ReleaseExecuteRequest(session_id=sid, operation_id=op, release_all=pb.ReleaseExecuteRequest.ReleaseAll()),
        pb.InterruptRequest(
            session_id=sid, operation_id=op, interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID
        ),
        pb.FetchErrorDetailsRequest(session_id=sid, error_id=str(uuid.uuid4())),
        pb.ReleaseSessionRequest(session_id=sid, user_context=as_alice),
    ]
    for request in attempts:
        with pytest.raises(grpc.RpcError) as info:
            raw.call(request, bob.token())
        assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED, describe_rpc_error(info.value)
        assert "rule 'session'" in str(info.value.details())
    # from his own session, alice's operation id names nothing
    with pytest.raises(grpc.RpcError) as info:
        raw.call(pb.ReattachExecuteRequest(session_id=bob.session_id, operation_id=op), bob.token())
    assert "OPERATION_NOT_FOUND" in describe_rpc_error(info.value) or "INVALID_HANDLE" in describe_rpc_error(info.value)
    # the results were there for the taking: alice reattaches and gets them, her session open
    again = raw.call(pb.ReattachExecuteRequest(session_id=sid, operation_id=op), alice.token())
    assert [(r["id"], r["amount"]) for r in arrow_rows(again)] == EU
    assert alice.spark.sql("SELECT 1 AS x").collect()[0][0] == 1


def test_a_long_query_of_alice_does_not_block_bob(alice: User, bob: User, raw: RawConnect) -> None:
    # one partition: alice's query holds one of the engine's two task slots (local[2]) until interrupted
    endless = "SELECT count(*) FROM range(0, 1000000000000000, 1, 1) WHERE hash(id) = 42"
    sid, op, pb = alice.session_id, str(uuid.uuid4()), raw.pb
    running = raw.stream(raw.sql(endless, sid, operation_id=op), alice.token())

    def progress() -> Any:  # the next progress report of alice's operation (Spark sends one every ~2 s)
        for response in running:
            if response.HasField("execution_progress"):
                return response.execution_progress
        raise AssertionError("alice's operation ended")

    try:
        deadline = time.monotonic() + 60
        while progress().num_inflight_tasks == 0:  # until its task runs on the engine
            assert time.monotonic() < deadline
        t0 = time.monotonic()
        assert bob.spark.sql("SELECT count(*) FROM lake.sales.orders").collect()[0][0] == 5
        eu = bob.spark.sql("SELECT max(amount) FROM lake.sales.orders WHERE region = 'EU'").collect()[0][0]
        assert eu == 50.0
        elapsed = time.monotonic() - t0
        # bob may not stop it either
        for interrupt in (
            pb.InterruptRequest(session_id=sid, interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_ALL),
            pb.InterruptRequest(
                session_id=sid, operation_id=op, interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID
            ),
        ):
            with pytest.raises(grpc.RpcError) as info:
                raw.call(interrupt, bob.token())
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
        # bob is done, and alice's operation still runs: it reports progress, its task still in flight
        assert progress().num_inflight_tasks > 0
        assert elapsed < 60, elapsed
    finally:
        stop = pb.InterruptRequest(
            session_id=sid, operation_id=op, interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_OPERATION_ID
        )
        interrupted = raw.call(stop, alice.token()).interrupted_ids
    assert list(interrupted) == [op]
    with pytest.raises(grpc.RpcError, match="OPERATION_CANCELED"):
        for _ in running:
            pass


def test_shared_state_is_refused_to_both(alice: User, bob: User) -> None:
    """Without the check (by hand): bob's createOrReplaceGlobalTempView over sales.orders was read from alice's
    session (all five rows), and ``cache()`` ran (into the one cache every session of the engine shares)."""
    orders = bob.spark.sql("SELECT * FROM lake.sales.orders")
    for action in (
        lambda: orders.cache().count(),
        lambda: orders.persist().count(),
        lambda: orders.createOrReplaceGlobalTempView("orders_for_all"),
        lambda: orders.localCheckpoint(),
    ):
        with pytest.raises(EngineRefusedError) as info:
            action()
        assert info.value.rule == "shared-state"
    orders.createOrReplaceTempView("bobs_orders")
    with pytest.raises(EngineRefusedError, match="rule 'shared-state'"):
        bob.spark.catalog.cacheTable("bobs_orders")
    with pytest.raises(EngineRefusedError, match="rule 'shared-state'"):
        bob.spark.sql("CACHE TABLE bobs_orders").collect()
    # nothing of bob's reached alice: no global view, no temporary view, and the table itself stays refused
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        alice.spark.sql("SELECT * FROM global_temp.orders_for_all").collect()
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND"):
        alice.spark.sql("SELECT * FROM bobs_orders").collect()
    with pytest.raises(CatalogAccessError, match="alice"):
        alice.spark.sql("SELECT * FROM lake.sales.orders").collect()
