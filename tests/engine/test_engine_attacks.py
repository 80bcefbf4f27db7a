"""Attacks on the trusted engine (#29), each through the real engine process: the gRPC front door, Spark
Connect and the JVM sandbox of the package's one ``lakesession engine`` (``tests/engine/conftest.py``).

alice (VIEW_READ on bob's DEFINER view ``sales.v_eu`` only) attacks as a notebook user would: with pyspark's
own Connect client (``login(catalog, "alice", engine).engine()``), or, for what that client never sends
(another session's id, a forged ``user_id``, bad tokens), with hand-made ``pyspark.sql.connect.proto``
requests on a raw gRPC channel (``tests._engine.RawConnect``). Each test asserts the refusal (an
``EngineRefusedError`` naming its rule, or gRPC UNAUTHENTICATED / PERMISSION_DENIED with a one-line
message) and that the attack's effect did not happen (a marker file a Python function would have
written, a directory ``reflect`` would have made, a table, an object in the store, bob's session …).

Without the check
-----------------
Each test's comments say what the attack did without its check and how that was seen:

* "by hand": run (2026-11-27) with the same attack code against the same kind of catalog (seed policy,
  sales.orders, bob's view) and an engine started through a throwaway wrapper of ``lakesession.engine._cli``
  that took the front door's checks out (``check_plan``, the ``ConfPolicy`` checks and ``getAll`` filter,
  session binding, the ``user_id`` overwrite, token verification: the payload decoded, never verified;
  artifact uploads forwarded) and switched the JVM sandbox off (``spark.lakesession.engine.sandbox=false``
  in the JVM's conf). A second engine JVM only for a control run would double this module's time, so the
  open engine is not part of the suite. Where an attack failed there for another reason, the comment says so.
* "test_sandbox_jvm": the JVM rule's own control run (an unsandboxed session of that module's JVM).

The store's log: no vended key left the engine
----------------------------------------------
The S3 emulator records every request (``S3Emulator.requests``/``on_request``). For the whole module, each
request is attributed, while its socket is still open, to the local process that owns the client end of
the connection (``/proc/net/tcp*`` inode -> ``/proc/<pid>/fd``): the engine's JVM, the engine's Python
process, or this test process (where alice's and bob's clients, the catalog and the emulator run).
``test_no_vended_key_left_the_engine`` (last) then shows:

1. every request signed with an STS key the store issued (``S3Emulator.issued()``: all vended keys,
   whoever they were vended for) came from the engine's JVM, and at least one did (alice's read of the
   view): no client used a vended key;
2. no access key id, secret or session token of any issued credential appears in anything alice's and bob's
   clients received in this module: every protobuf answer and gRPC error (message and trailing metadata) on
   their Connect sessions (recorded at pyspark's stub), every raw gRPC answer and error, every exception
   message, row, ``conf.getAll`` and ``explain`` text — nor in the engine's log.

It does not show what the engine did with a key outside those channels (it could hold one and never use
it); the store's attribution covers every use of every key.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest

from lakesession.errors import EngineRefusedError
from tests._engine import (
    ENGINE_TESTS,
    EU,
    RawConnect,
    RunningEngine,
    arrow_rows,
    describe_rpc_error,
    login,
    seed_policy,
)
from tests._sockets import java_children
from tests.factories import make_catalog

pytestmark = ENGINE_TESTS


# -- what alice and bob received ----------------------------------------------------------------------


class Received:
    """Everything the engine gave alice's and bob's clients in this module, as text (the secret scan reads it)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._lock = threading.Lock()

    def add(self, *items: Any) -> None:
        with self._lock:
            self.texts.extend(i if isinstance(i, str) else repr(i) for i in items)

    def message(self, message: Any) -> None:
        self.add(message.SerializeToString().decode("latin-1"))

    def error(self, exc: BaseException) -> None:
        self.add(describe_rpc_error(exc) if isinstance(exc, grpc.RpcError) else f"{type(exc).__name__}: {exc}")

    def text(self) -> str:
        with self._lock:
            return "\n".join(self.texts)


class _RecordedStream:
    """A streaming call's answers, recorded as pyspark reads them (other attributes: the call's own)."""

    def __init__(self, call: Any, sink: Received) -> None:
        self._call, self._sink = call, sink

    def __iter__(self) -> _RecordedStream:
        return self

    def __next__(self) -> Any:
        try:
            message = next(self._call)
        except grpc.RpcError as exc:
            self._sink.error(exc)
            raise
        self._sink.message(message)
        return message

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


class RecordingStub:
    """pyspark's Connect stub (``client._stub``, settable "for testing" in pyspark) recording every answer."""

    def __init__(self, stub: Any, sink: Received) -> None:
        self._stub, self._sink = stub, sink

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._stub, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                answer = method(*args, **kwargs)
            except grpc.RpcError as exc:
                self._sink.error(exc)
                raise
            if name in ("ExecutePlan", "ReattachExecute"):
                return _RecordedStream(answer, self._sink)
            self._sink.message(answer)
            return answer

        return call


@dataclass
class User:
    """A logged-in user and their Connect session on the engine (every answer recorded)."""

    session: Any
    spark: Any
    received: Received

    def token(self) -> str:
        return str(self.session.identity.token())

    @property
    def session_id(self) -> str:
        return str(self.spark.client._session_id)

    def refused(self, rule: str, action: Callable[[], Any]) -> EngineRefusedError:
        """Run ``action`` expecting the engine's refusal under ``rule`` (one line, recorded)."""
        with pytest.raises(EngineRefusedError) as info:
            action()
        self.received.error(info.value)
        assert info.value.rule == rule, str(info.value)
        assert "\n" not in str(info.value)
        return info.value


def _user(catalog: Any, engine: RunningEngine, who: str, received: Received) -> Iterator[User]:
    session = login(catalog, who, engine)
    spark = session.engine()
    spark.client._stub = RecordingStub(spark.client._stub, received)
    try:
        yield User(session, spark, received)
    finally:
        session.close()


@pytest.fixture(scope="module")
def received() -> Received:
    return Received()


@pytest.fixture(scope="module")
def alice(catalog: Any, engine: RunningEngine, view: str, received: Received) -> Iterator[User]:
    yield from _user(catalog, engine, "alice", received)


@pytest.fixture(scope="module")
def bob(catalog: Any, engine: RunningEngine, view: str, received: Received) -> Iterator[User]:
    yield from _user(catalog, engine, "bob", received)


@pytest.fixture(scope="module")
def raw(engine: RunningEngine, received: Received) -> Iterator[RawConnect]:
    channel = RawConnect(engine)
    try:
        yield channel
    finally:
        received.add(*channel.received)
        channel.close()


# -- the store's log -----------------------------------------------------------------------------------


def _socket_inode(port: int, server_port: int) -> int | None:
    """The inode of the local TCP socket ``127.0.0.1:port -> :server_port`` (IPv4 or IPv4-mapped IPv6)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            cols = line.split()
            local, remote = int(cols[1].rsplit(":", 1)[1], 16), int(cols[2].rsplit(":", 1)[1], 16)
            if (local, remote) == (port, server_port) and cols[9] != "0":
                return int(cols[9])
    return None


def _has_socket(pid: int, inode: int) -> bool:
    target = f"socket:[{inode}]"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False


@dataclass
class StoreWatch:
    """Each store request of the module with the local process that sent it (``engine JVM``, ``engine``,
    ``tests``, or ``unattributed``), found while the request's socket is open."""

    server_port: int
    processes: dict[str, int]
    seen: list[tuple[Any, str]] = field(default_factory=list)

    def observe(self, request: Any) -> None:
        inode = _socket_inode(request.peer[1], self.server_port)
        owner = next((n for n, pid in self.processes.items() if inode and _has_socket(pid, inode)), "unattributed")
        self.seen.append((request, owner))

    def since(self, t0: float) -> list[Any]:
        return [r for r, _ in self.seen if r.time >= t0]


@pytest.fixture(scope="module", autouse=True)
def store(catalog: Any, engine: RunningEngine) -> Iterator[StoreWatch]:
    emulator = catalog.s3_emulator
    jvm = java_children(engine.process.pid)
    assert len(jvm) == 1, jvm
    processes = {"engine JVM": jvm[0], "engine": engine.process.pid, "tests": os.getpid()}
    watch = StoreWatch(int(emulator.endpoint.rsplit(":", 1)[1]), processes)
    emulator.on_request = watch.observe
    try:
        yield watch
    finally:
        emulator.on_request = None


def orders_files(catalog: Any) -> list[str]:
    """``s3://…`` URLs of sales.orders' data files, listed with the emulator's admin key (not a vended one)."""
    s3 = catalog.s3_emulator.client()
    found = []
    for bucket in s3.list_buckets()["Buckets"]:
        listed = s3.list_objects_v2(Bucket=bucket["Name"]).get("Contents", [])
        found += [f"s3://{bucket['Name']}/{o['Key']}" for o in listed if "/sales/orders/data/" in o["Key"]]
    assert found
    return found


# -- user code -------------------------------------------------------------------------------------------


def stealer(marker: str, *, probe: bool = True) -> Callable[[Any], Any]:
    """A function that, wherever it runs, loots its process and its ancestors (and, with ``probe``, the
    host's loopback HTTP services) and writes ``marker``."""

    def steal(value: Any) -> Any:
        import json as _json
        import os as _os
        import socket as _socket

        loot: dict[str, Any] = {"environ": dict(_os.environ)}
        pid = _os.getpid()
        for _ in range(4):  # the worker, pyspark's daemon, the JVM, the engine's Python process
            for what in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{what}", "rb") as f:
                        loot[f"{pid}/{what}"] = f.read().decode("latin-1")
                except OSError as exc:
                    loot[f"{pid}/{what}"] = repr(exc)
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
            if pid <= 1:  # a shallow process tree (a test run detached from its shell): no ancestor left
                break
        listening = []  # the engine's loopback services (its gateways, Spark Connect, the JVM's own ports)
        with open("/proc/net/tcp") as f:
            for line in f.read().splitlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[1].startswith("0100007F"):
                    listening.append(int(cols[1].rsplit(":", 1)[1], 16))
        for port in listening[:50] if probe else []:
            try:
                with _socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                    s.sendall(b"GET /v1/config HTTP/1.0\r\n\r\n")
                    loot[f"port {port}"] = s.recv(4096).decode("latin-1")
            except OSError as exc:
                loot[f"port {port}"] = repr(exc)
        with open(marker, "w") as f:
            _json.dump(loot, f)
        return value

    return steal


def test_python_functions_never_run_on_the_engine(alice: User, tmp_path: Path) -> None:
    """UDFs, mapInPandas/mapInArrow, applyInPandas and Python data sources: refused before anything runs.

    Without the check (by hand): every one ran the function (in a Python worker the engine's JVM started;
    the data source's ``reader`` too) and its marker file appeared. The UDF's held the worker's environment,
    the command lines and environments of its ancestors up to the engine's Python process (whose
    environment has ``LAKESESSION_ENGINE_CLIENT_SECRET``: the engine hides it from the JVM, not from the
    JVM's children reading ``/proc``), and the answers of the host's loopback HTTP services (the catalog,
    the per-user gateways: 401 without credentials).
    """
    from pyspark.sql.connect import functions as CF
    from pyspark.sql.datasource import DataSource, DataSourceReader
    from pyspark.sql.types import LongType, StructField, StructType

    marker = tmp_path / "user-code-ran.json"
    steal = stealer(str(marker))
    spark = alice.spark
    schema = StructType([StructField("id", LongType())])

    def batches(it: Iterator[Any]) -> Iterator[Any]:
        for batch in it:
            yield steal(batch)

    class Looting(DataSource):
        @classmethod
        def name(cls) -> str:
            return "looting"

        def schema(self) -> str:
            return "id long"

        def reader(self, schema: Any) -> DataSourceReader:
            steal(None)
            raise AssertionError("unreachable")

    attacks: dict[str, Callable[[], Any]] = {
        "udf": lambda: spark.range(1).select(CF.udf(steal, LongType())("id")).collect(),
        "udf.register": lambda: spark.udf.register("steal", steal, LongType()),
        "mapInPandas": lambda: spark.range(1).mapInPandas(batches, schema).collect(),
        "mapInArrow": lambda: spark.range(1).mapInArrow(batches, schema).collect(),
        "applyInPandas": lambda: spark.range(2).groupBy("id").applyInPandas(steal, schema).collect(),
        "dataSource.register": lambda: spark.dataSource.register(Looting),
    }
    with warnings.catch_warnings():  # pyspark cannot infer a pandas UDF type from ``steal``'s hints: not the point
        warnings.filterwarnings("ignore", "Cannot infer the eval type", UserWarning)
        for name, attack in attacks.items():
            error = alice.refused("user-code", attack)
            assert "lakesession engine refused" in str(error), name
    assert not marker.exists()
    # the same function, run here (without its loopback probe): it works, it is no dud
    stealer(str(marker), probe=False)(1)
    assert json.loads(marker.read_text())["environ"]


def test_reflection_is_refused(alice: User, tmp_path: Path) -> None:
    """reflect / java_method / try_reflect calling a static Java method that makes a directory.

    Without the check (by hand): ``reflect('org.apache.spark.util.Utils', 'createDirectory', <dir>, 'pwned')``
    returned the new directory's path and it existed on the engine's disk.
    """
    for fn in ("reflect", "java_method", "try_reflect"):
        query = f"SELECT {fn}('org.apache.spark.util.Utils', 'createDirectory', '{tmp_path}', 'pwned')"
        alice.refused("reflection", lambda q=query: alice.spark.sql(q).collect())
    from pyspark.sql.connect import functions as CF

    call = f"reflect('org.apache.spark.util.Utils', 'createDirectory', '{tmp_path}', 'pwned')"
    alice.refused("reflection", lambda: alice.spark.range(1).select(CF.expr(call)).collect())
    assert not list(tmp_path.glob("pwned*"))


def test_uploads_are_refused(alice: User, tmp_path: Path) -> None:
    """addArtifacts (a jar, a Python module, a file, an archive) and copyFromLocalToFs.

    Without the check (by hand): AddArtifacts accepted the jar, the module, the file and the archive.
    copyFromLocalToFs was refused by Spark itself there (a local-file-system destination needs
    ``spark.connect.copyFromLocalToFs.allowDestLocal``), so on this engine only the front door's refusal shows.
    """
    jar = tmp_path / "evil.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    marker = tmp_path / "module-imported"
    module = tmp_path / "evil_module.py"
    module.write_text(f"open({str(marker)!r}, 'w').write('imported')\n")
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("evil_module.py", module.read_text())
    spark = alice.spark
    alice.refused("artifacts", lambda: spark.addArtifacts(str(jar)))
    alice.refused("artifacts", lambda: spark.addArtifacts(str(module), pyfile=True))
    alice.refused("artifacts", lambda: spark.addArtifacts(str(module), file=True))
    alice.refused("artifacts", lambda: spark.addArtifacts(str(archive), archive=True))
    copied = tmp_path / "copied.py"
    with pytest.raises(grpc.RpcError) as info:  # pyspark passes this call's error on as gRPC's own
        spark.copyFromLocalToFs(str(module), str(copied))
    alice.received.error(info.value)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "rule 'artifacts'" in str(info.value.details())
    assert not marker.exists() and not copied.exists()


# -- storage by path -------------------------------------------------------------------------------------


def test_orders_data_files_cannot_be_read_by_path(alice: User, catalog: Any, store: StoreWatch, tmp_path: Path) -> None:
    """sales.orders' own data files (and a file of the engine's host), named by path: refused before the
    store (or the disk) is asked for anything.

    Without the check (by hand): the S3 paths failed for another reason — this engine's JVM has no S3 file
    system (hadoop-aws is not among its jars: "No FileSystem for scheme s3", S3AFileSystem not found, and for
    an Iceberg table by path "Failed to get file system"), and ``parquet.`s3a://…``` / ``binaryFile.`…```
    were looked up as tables of the Iceberg catalog (Not Found). The local file was read:
    ``spark.read.text("file://…")`` returned a file of the engine's host (the catalog's admin-credentials
    file in that run). The rule keeps both shut whatever jars an operator adds.
    """
    files = orders_files(catalog)
    one = files[0]
    folder = one.rsplit("/", 1)[0]
    host_file = tmp_path / "engine-host-secret.txt"  # a file on the engine's host (this host)
    host_file.write_text("host-secret-0003\n")
    s3a = one.replace("s3://", "s3a://", 1)
    spark = alice.spark
    t0 = time.time()
    attacks: list[Callable[[], Any]] = [
        lambda: spark.read.parquet(s3a).collect(),
        lambda: spark.read.parquet(one).collect(),
        lambda: spark.read.format("parquet").load(folder).collect(),
        lambda: spark.read.format("iceberg").load(folder.rsplit("/", 1)[0]).collect(),
        lambda: spark.sql(f"SELECT * FROM parquet.`{s3a}`").collect(),
        lambda: spark.sql(f"SELECT * FROM parquet.`{folder}`").collect(),
        lambda: spark.sql(f"SELECT count(*) FROM binaryFile.`{folder}`").collect(),
        lambda: spark.sql(f"CREATE TEMPORARY VIEW raw_orders USING parquet OPTIONS (path '{folder}')").collect(),
        lambda: spark.read.text(f"file://{host_file}").collect(),
        lambda: spark.sql(f"SELECT * FROM text.`file://{host_file}`").collect(),
    ]
    for attack in attacks:
        alice.refused("path-access", attack)
    touched = [r for r in store.since(t0) if "/sales/orders" in r.path]
    assert touched == []
    assert "host-secret-0003" not in alice.received.text()
    # the same data through the view: only the EU rows
    assert sorted((r["id"], r["amount"]) for r in spark.sql("SELECT * FROM lake.sales.v_eu").collect()) == EU


def test_no_table_can_be_placed_over_orders_storage(alice: User, bob: User, catalog: Any, store: StoreWatch) -> None:
    """CREATE TABLE … LOCATION (and its variants) over sales.orders' prefix; moving sales.orders itself.

    Without the check (by hand): each reached the catalog, which refused it: CREATE TABLE … LOCATION from
    alice (Forbidden), bob (TABLE_CREATE required) and etl, who may create tables ("storage owned by another
    table"); bob's ALTER TABLE … SET LOCATION / write.data.path (TABLE_WRITE_PROPERTIES required) and
    REPLACE TABLE (Forbidden). The catalog is the second lock; the engine refuses before it is asked.
    """
    prefix = orders_files(catalog)[0].split("/data/", 1)[0]
    spark = alice.spark
    t0 = time.time()
    cols = "(id BIGINT, region STRING, amount DOUBLE)"
    statements = [
        f"CREATE TABLE lake.sales.t {cols} USING iceberg LOCATION '{prefix}'",
        f"CREATE TABLE lake.sales.t USING iceberg LOCATION '{prefix}' AS SELECT 1 AS id",
        f"CREATE TABLE lake.sales.t {cols} USING iceberg TBLPROPERTIES ('write.data.path' = '{prefix}/data')",
        f"CREATE TABLE lake.sales.t {cols} USING iceberg OPTIONS (path '{prefix}')",
        f"CREATE NAMESPACE lake.stolen LOCATION '{prefix}'",
    ]
    for sql in statements:
        alice.refused("path-access", lambda sql=sql: spark.sql(sql).collect())
    # bob may load sales.orders (alice may not: the catalog refuses her first): he may not move it either
    for sql in (
        f"ALTER TABLE lake.sales.orders SET LOCATION '{prefix}/elsewhere'",
        f"ALTER TABLE lake.sales.orders SET TBLPROPERTIES ('write.data.path' = '{prefix}/elsewhere')",
        f"REPLACE TABLE lake.sales.orders {cols} USING iceberg LOCATION '{prefix}/elsewhere'",
    ):
        bob.refused("path-access", lambda sql=sql: bob.spark.sql(sql).collect())
    df = spark.range(1)
    alice.refused("path-access", lambda: df.writeTo("lake.sales.t").tableProperty("location", prefix).create())
    alice.refused("path-access", lambda: df.writeTo("lake.sales.t").option("location", prefix).create())
    alice.refused("path-access", lambda: df.write.option("path", prefix).saveAsTable("lake.sales.t"))
    alice.refused("path-access", lambda: spark.catalog.createTable("lake.sales.t", path=prefix))
    etl = {"Authorization": f"Bearer {catalog.admin.token_for('etl')}"}
    orders = httpx.get(f"{catalog.uri}/v1/lakesession/namespaces/sales/tables/orders", headers=etl).json()
    assert orders["metadata"]["location"] == prefix
    assert "write.data.path" not in orders["metadata"].get("properties", {})
    assert httpx.head(f"{catalog.uri}/v1/lakesession/namespaces/sales/tables/t", headers=etl).status_code == 404
    assert httpx.head(f"{catalog.uri}/v1/lakesession/namespaces/stolen", headers=etl).status_code == 404
    assert [r for r in store.since(t0) if r.method in ("PUT", "POST", "DELETE")] == []


# -- settings ----------------------------------------------------------------------------------------------


def test_catalog_and_storage_settings_cannot_be_set_or_read(alice: User) -> None:
    """SET / conf.set / conf.get of catalog, Hadoop and engine keys; getAll lists none of them.

    Without the check (by hand): Spark itself kept the gateway's secret (``conf.get`` of
    ``spark.sql.catalog.lake.token`` answered SQL_CONF_NOT_FOUND, ``SET`` showed it redacted), but ``getAll``
    listed ``spark.lakesession.engine.sqlKey`` — the key whose signature lets SQL name the view-chain
    catalogs — with every catalog key; ``conf.set`` of ``spark.sql.catalog.lake.uri`` and
    ``spark.hadoop.fs.s3a.access.key`` was accepted.
    """
    spark = alice.spark
    before = dict(spark.conf.getAll)
    alice.received.add(before)
    for key in before:
        low = key.lower()
        assert not low.startswith(("spark.sql.catalog.", "spark.hadoop.", "spark.lakesession.")), key
        assert not any(word in low for word in ("token", "secret", "password", "access.key")), key
    for sql in (
        "SET spark.sql.catalog.lake.token=x",
        "SET spark.sql.catalog.lake.uri=http://127.0.0.1:9/evil",
        "SET spark.hadoop.fs.s3a.access.key=AKIAEVIL",
        "SET spark.sql.catalog.lake.token",
        "SET spark.hadoop.fs.s3a.secret.key",
        "SET",
        "SET -v",
        "RESET",
    ):
        alice.refused("settings", lambda sql=sql: spark.sql(sql).collect())
    conf = spark.conf
    for key, value in (
        ("spark.hadoop.fs.s3a.access.key", "AKIAEVIL"),
        ("spark.hadoop.fs.s3a.aws.credentials.provider", "org.apache.hadoop.fs.s3a.AnonymousAWSCredentialsProvider"),
        ("spark.sql.catalog.lake.uri", "http://127.0.0.1:9/evil"),
        ("spark.sql.catalog.lake.token", "x"),
        ("spark.lakesession.engine.sandbox", "false"),
        ("spark.lakesession.engine.settableConfs", "spark.sql.catalog.lake.uri"),
    ):
        alice.refused("settings", lambda k=key, v=value: conf.set(k, v))
    alice.refused("settings", lambda: conf.unset("spark.sql.catalog.lake.uri"))
    for key in (
        "spark.sql.catalog.lake.token",
        "spark.sql.catalog.lake.uri",
        "spark.hadoop.fs.s3a.secret.key",
        "spark.lakesession.engine.sqlKey",
        "spark.connect.authenticate.token",
    ):
        alice.refused("settings", lambda k=key: conf.get(k))
        alice.refused("settings", lambda k=key: conf.get(k, "fallback"))
    # nothing changed: the same listing, the catalog still the gateway's, the sandbox still on
    assert dict(spark.conf.getAll) == before
    assert sorted((r["id"], r["amount"]) for r in spark.sql("SELECT * FROM lake.sales.v_eu").collect()) == EU
    alice.refused("reflection", lambda: spark.sql("SELECT reflect('java.lang.String', 'valueOf', 1)").collect())


# -- shared state ----------------------------------------------------------------------------------------


def test_cache_checkpoints_and_global_views_are_refused(alice: User, bob: User) -> None:
    """cache()/persist, cacheTable, CACHE TABLE, checkpoints; a global temporary view bob would share.

    Without the check (by hand): bob's ``createOrReplaceGlobalTempView`` over sales.orders was read from
    alice's session (all five rows); alice's ``cache()`` and ``cacheTable`` ran (``isCached``: true), into
    the cache every session shares. ``checkpoint``/``localCheckpoint`` failed there on their own (no
    checkpoint directory; an internal error). (The JVM rules' control run: test_sandbox_jvm's
    test_cache_and_global_views_are_refused.)
    """
    df = alice.spark.sql("SELECT * FROM lake.sales.v_eu")
    alice.refused("shared-state", lambda: df.cache().count())
    alice.refused("shared-state", lambda: df.persist().count())
    alice.refused("shared-state", lambda: df.checkpoint())
    alice.refused("shared-state", lambda: df.localCheckpoint())
    df.createOrReplaceTempView("eu")
    alice.refused("shared-state", lambda: alice.spark.catalog.cacheTable("eu"))
    alice.refused("shared-state", lambda: alice.spark.sql("CACHE TABLE eu").collect())
    alice.refused("shared-state", lambda: alice.spark.catalog.clearCache())
    assert alice.spark.catalog.isCached("eu") is False
    bobs = bob.spark.sql("SELECT * FROM lake.sales.orders")
    bob.refused("shared-state", lambda: bobs.createOrReplaceGlobalTempView("bobs"))
    bob.refused("shared-state", lambda: bob.spark.sql("CREATE GLOBAL TEMPORARY VIEW bobs AS SELECT 1 AS x").collect())
    with pytest.raises(Exception, match="TABLE_OR_VIEW_NOT_FOUND") as info:
        alice.spark.sql("SELECT * FROM global_temp.bobs").collect()
    alice.received.error(info.value)


# -- view-chain catalogs (#39) -----------------------------------------------------------------------------


def test_view_chain_catalogs_are_invisible_and_built_names_refused(alice: User) -> None:
    """Once alice has read bob's view, her session holds a view-chain catalog (``lake__chain_<id>``): it is
    not listed, and a name built to reach it is refused.

    Without the check (reported in #39): ``SHOW CATALOGS`` and ``listCatalogs()`` named ``lake__chain_<id>``;
    ``IDENTIFIER/**/(concat('lake__', 'chain_<id>.sales.orders'))`` passed the front door (its regex wanted
    ``identifier`` and ``(`` with only spaces between) and the JVM (it read only literal mentions), and Spark
    resolved the name in the chain catalog. (The JVM's own refusal with the front door out of the way, and its
    control run: test_sandbox_jvm's test_a_chain_catalog_named_through_a_built_name_is_refused.)
    """
    assert len(alice.spark.sql("SELECT * FROM lake.sales.v_eu").collect()) == len(EU)
    shown = [r[0] for r in alice.spark.sql("SHOW CATALOGS").collect()]
    assert "lake" in shown and not [c for c in shown if "__chain_" in c], shown
    listed = [c.name for c in alice.spark.catalog.listCatalogs()]
    assert "lake" in listed and not [c for c in listed if "__chain_" in c], listed
    built = "SELECT * FROM IDENTIFIER/**/(concat('lake__', 'chain_0.sales.orders'))"
    alice.refused("dynamic-sql", lambda: alice.spark.sql(built).collect())
    alice.refused("dynamic-sql", lambda: alice.spark.sql("SELECT * FROM identifier -- x\n ('lake.sales.orders')"))
    assert [tuple(r) for r in alice.spark.sql("SELECT current_catalog(), current_user()").collect()] == [
        ("lake", "alice")
    ]


# -- sessions, user ids, tokens ----------------------------------------------------------------------------


def _denied(raw: RawConnect, request: Any, token: str | None, code: grpc.StatusCode, **kw: Any) -> str:
    with pytest.raises(grpc.RpcError) as info:
        raw.call(request, token, **kw)
    assert info.value.code() == code, describe_rpc_error(info.value)
    details = str(info.value.details())
    assert "\n" not in details, details
    return details


def test_another_users_session_is_refused(alice: User, bob: User, raw: RawConnect) -> None:
    """alice's token with the session id bob's Connect session uses, on every method that takes one.

    Without the check (by hand, session binding and the user_id overwrite taken out): an ExecutePlan with
    bob's session id and ``user_id="bob"`` ran in bob's Spark session: it read bob's temporary view and, through
    bob's gateway, every row of sales.orders; ReleaseSession closed bob's session under him.
    """
    bob.spark.sql("SELECT 'bob-only' AS secret").createOrReplaceTempView("bobs_view")
    bob.spark.conf.set("spark.sql.shuffle.partitions", "5")
    sid, pb, token = bob.session_id, raw.pb, alice.token()
    config = pb.ConfigRequest(session_id=sid)
    config.operation.get_all.SetInParent()
    analyze = pb.AnalyzePlanRequest(session_id=sid)
    analyze.schema.plan.root.sql.query = "SELECT * FROM bobs_view"
    interrupt = pb.InterruptRequest(session_id=sid, interrupt_type=pb.InterruptRequest.INTERRUPT_TYPE_ALL)
    requests = [
        raw.sql("SELECT * FROM bobs_view", sid),
        raw.sql("SELECT * FROM lake.sales.orders", sid, user_context={"user_id": "bob"}),
        config,
        analyze,
        interrupt,
        pb.ReattachExecuteRequest(session_id=sid, operation_id=str(uuid.uuid4())),
        pb.ReleaseExecuteRequest(session_id=sid, operation_id=str(uuid.uuid4())),
        pb.FetchErrorDetailsRequest(session_id=sid, error_id=str(uuid.uuid4())),
        pb.ReleaseSessionRequest(session_id=sid),
    ]
    for request in requests:
        details = _denied(raw, request, token, grpc.StatusCode.PERMISSION_DENIED)
        assert "rule 'session'" in details and "another user" in details, details
    # pyspark's own client, told to use bob's session id
    from pyspark.sql.connect.client import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    from lakesession._engineclient import _bearer_interceptor

    builder = DefaultChannelBuilder(f"{alice.session._engine_url}/;session_id={sid}")
    builder.add_interceptor(_bearer_interceptor(alice.token))
    thief = ConnectSession.builder.channelBuilder(builder).create()
    thief.client._stub = RecordingStub(thief.client._stub, alice.received)
    alice.refused("session", lambda: thief.sql("SELECT * FROM bobs_view").collect())
    alice.refused("session", lambda: thief.conf.get("spark.sql.shuffle.partitions"))
    # bob's session is whole: his view, his setting, still open
    assert [tuple(r) for r in bob.spark.sql("SELECT * FROM bobs_view").collect()] == [("bob-only",)]
    assert bob.spark.conf.get("spark.sql.shuffle.partitions") == "5"


def test_a_forged_user_id_is_replaced_by_the_tokens_principal(alice: User, bob: User, raw: RawConnect) -> None:
    """``user_context.user_id = "bob"`` with alice's token, in a session of alice's own: it runs as alice.

    Without the check (by hand, the overwrite taken out): the claimed ``user_id`` picked the server-side
    session (Spark Connect keys sessions by user id and session id): the call landed in another session, not
    configured by the front door (her temporary view was not there); with bob's session id too, alice ran in
    bob's session (see test_another_users_session_is_refused).
    """
    sid, token = str(uuid.uuid4()), alice.token()
    raw.call(raw.sql("CREATE TEMPORARY VIEW mine AS SELECT 'alice-view' AS v", sid), token)
    forged = {"user_id": "bob", "user_name": "bob"}
    # her own temporary view is there: the call ran in (alice, sid), not in a session of "bob"
    assert arrow_rows(raw.call(raw.sql("SELECT * FROM mine", sid, user_context=forged), token)) == [{"v": "alice-view"}]
    eu = arrow_rows(
        raw.call(raw.sql("SELECT id, amount FROM lake.sales.v_eu ORDER BY id", sid, user_context=forged), token)
    )
    assert [(r["id"], r["amount"]) for r in eu] == EU
    # bob may read sales.orders; a call claiming to be bob may not: the catalog was asked as alice
    with pytest.raises(grpc.RpcError) as info:
        raw.call(raw.sql("SELECT * FROM lake.sales.orders", sid, user_context=forged), token)
    assert "alice" in describe_rpc_error(info.value) and "not authorized" in describe_rpc_error(info.value).lower()
    # and bob, with his own token, finds the session id taken
    _denied(raw, raw.sql("SELECT 1", sid, user_context=forged), bob.token(), grpc.StatusCode.PERMISSION_DENIED)


def _resign(token: str, key: Any, alg: str, kid: str, **claims: Any) -> str:
    from joserfc import jwt

    payload = jwt.decode(token, key).claims
    payload.update(claims)
    return jwt.encode({"alg": alg, "kid": kid, "typ": "at+jwt"}, payload, key)


def _b64(data: dict[str, Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _tampered(token: str, **claims: Any) -> str:
    """``token`` with its payload edited and its signature kept."""
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return f"{header}.{_b64({**body, **claims})}.{signature}"


def _unsigned(token: str, **claims: Any) -> str:
    """``token``'s claims (edited) under ``alg: none``, without a signature."""
    payload = _tampered(token, **claims).split(".")[1]
    return f"{_b64({'alg': 'none', 'typ': 'at+jwt'})}.{payload}."


def test_bad_tokens_are_refused(
    alice: User, bob: User, catalog: Any, engine: RunningEngine, raw: RawConnect, tmp_path: Path
) -> None:
    """None, malformed, expired, wrong audience, a foreign issuer's, tampered: UNAUTHENTICATED, and nothing
    happened (the session id stays free: bob can claim it afterwards).

    Without the check (by hand, the payload decoded and never verified): a foreign issuer's token naming
    ``sub: bob`` was taken as bob: ``SELECT count(*) FROM lake.sales.orders`` answered 5, bob's whole table.
    """
    good = alice.token()
    issuer = catalog.admin._issuer  # the catalog's embedded issuer (its signing key: to mint the wrong audience)
    with make_catalog(seed_policy(), data_dir=tmp_path / "foreign") as foreign:
        foreign_bob = foreign.admin.token_for("bob")
        foreign_key = foreign.admin._issuer
        claiming_ours = _resign(foreign_bob, foreign_key.key, foreign_key.alg, foreign_key.kid, iss=issuer.issuer_url)
    tokens: dict[str, tuple[str | None, str | None]] = {  # name -> (token, authorization header)
        "none": (None, None),
        "empty bearer": (None, "Bearer "),
        "basic": (None, f"Basic {base64.b64encode(b'alice:alice-secret-0003').decode()}"),
        "not a jwt": ("not-a-jwt", None),
        "expired": (catalog.admin.token_for("alice", ttl=-120), None),
        "wrong audience": (_resign(good, issuer.key, issuer.alg, issuer.kid, aud="another-service"), None),
        "foreign issuer": (foreign_bob, None),
        "foreign key, our iss": (claiming_ours, None),
        "tampered": (_tampered(good, sub="bob"), None),
        "alg none": (_unsigned(good, sub="bob"), None),
    }
    expected = {
        "none": "needs your access token",
        "empty bearer": "needs your access token",
        "basic": "needs your access token",
        "not a jwt": "Malformed",
        "expired": "expired",
        "wrong audience": "audience",
        "foreign issuer": "unknown key",
        "foreign key, our iss": "unknown key",
        "tampered": "invalid signature",
        "alg none": "algorithm not accepted",
    }
    log_before = len(engine.log_text())
    for name, (token, header) in tokens.items():
        sid = str(uuid.uuid4())
        details = _denied(
            raw,
            raw.sql("SELECT * FROM lake.sales.orders", sid),
            token,
            grpc.StatusCode.UNAUTHENTICATED,
            authorization=header,
        )
        assert details.startswith("lakesession engine: "), (name, details)
        assert expected[name] in details, (name, details)
        assert not token or token not in details
        # nothing was bound to whoever the token named: bob can open this very session id
        config = raw.pb.ConfigRequest(session_id=sid)
        config.operation.get.keys.append("spark.sql.shuffle.partitions")
        assert raw.call(config, bob.token()).pairs[0].value == "2", name
    log = engine.log_text()[log_before:]
    for token, _ in tokens.values():
        assert not token or token not in log
    # pyspark's client with an expired token: the same refusal, one line
    from lakesession._engineclient import connect_engine

    expired = connect_engine(engine.address, lambda: str(tokens["expired"][0]))
    with pytest.raises(Exception, match="access token refused: Token rejected: expired") as info:
        expired.sql("SELECT 1").collect()
    alice.received.error(info.value)


# -- the engine's own secrets ---------------------------------------------------------------------------------


def test_the_engines_command_line_holds_no_secret(engine: RunningEngine) -> None:
    """Any account on the engine's host reads every process's command line (``ps``, ``/proc/<pid>/cmdline``).

    Before this module's fix (seen in this test's first run): the JVM's command line carried Spark
    Connect's pre-shared token (``--conf spark.connect.authenticate.token=…``) and the SQL signing key, so a
    local account could call the Connect server behind the front door directly. Now the token reaches the
    JVM in its environment (readable only by the engine's own account) and the key after it started; the
    server behind the front door still wants the token.
    """
    jvm = java_children(engine.process.pid)[0]
    args = Path(f"/proc/{jvm}/cmdline").read_bytes().decode().split("\0")
    confs = dict(a.split("=", 1) for a in args if a.startswith("spark.") and "=" in a)
    named = sorted(confs)  # keys only: a failure must not print a secret
    assert "spark.connect.authenticate.token" not in named and "spark.lakesession.engine.sqlKey" not in named
    assert not [k for k in named if any(w in k.lower() for w in ("token", "secret", "password", "key"))]
    backend = f"127.0.0.1:{confs['spark.connect.grpc.binding.port']}"
    from pyspark.sql.connect.proto import base_pb2

    channel = grpc.insecure_channel(backend)
    try:
        request = base_pb2.ConfigRequest(session_id=str(uuid.uuid4()))
        request.user_context.user_id = "mallory"
        request.operation.get_all.SetInParent()
        get_all = channel.unary_unary(
            "/spark.connect.SparkConnectService/Config",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=base_pb2.ConfigResponse.FromString,
        )
        for metadata in ([], [("authorization", "Bearer guess")]):
            with pytest.raises(grpc.RpcError) as info:
                get_all(request, metadata=metadata)
            assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        channel.close()


# -- last: the store's log --------------------------------------------------------------------------------


def test_no_vended_key_left_the_engine(
    alice: User, catalog: Any, engine: RunningEngine, store: StoreWatch, received: Received, raw: RawConnect
) -> None:
    """See the module docstring: every use of a vended key came from the engine's JVM; no key reached a client."""
    rows = alice.spark.sql("SELECT * FROM lake.sales.v_eu").collect()  # the engine reads sales.orders for alice
    received.add(
        *map(repr, rows), *map(repr, alice.spark.sql("EXPLAIN EXTENDED SELECT * FROM lake.sales.v_eu").collect())
    )
    received.add(*raw.received)
    issued = catalog.s3_emulator.issued()
    assert issued
    vended = {c.access_key_id for c in issued}
    signed = [(r, owner) for r, owner in store.seen if r.access_key_id in vended]
    assert any("/sales/orders/data/" in r.path for r, _ in signed), [r.path for r, _ in signed]
    assert {owner for _, owner in signed} == {"engine JVM"}, [(r.method, r.path, o) for r, o in signed]
    # the scan finds what it looks for: a received text would show a key
    assert len(received.texts) > 100
    haystack = received.text() + "\n" + engine.log_text()
    for credential in issued:
        for part in credential:
            assert part and part not in haystack, f"a vended {type(part).__name__} reached a client or the log"
