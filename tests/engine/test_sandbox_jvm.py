"""``dev.lakesession.engine.SandboxExtensions``: the engine's JVM sandbox, attacked as a Spark Connect user would.

One real JVM for the module: a local Spark with the committed ``lakesession-jvm.jar``, Iceberg's extensions
and the sandbox's (last), the Spark Connect server plugin on loopback, an Iceberg Hadoop catalog ``lake``
and a view-chain catalog ``lake__chain_x`` on temporary directories. The engine's Spark conf leaves the
sandbox off; each Connect session the tests open says ``spark.lakesession.engine.sandbox=true`` for itself
(as the platform does for a user's session) or not (``open_``: the same attack without the sandbox, to show
it works there: every attack test runs it both ways, and says in a comment what happened without the rule).

The Connect client is pyspark's own (``pyspark.sql.connect``) in this process, built directly so that the
process's classic pyspark stays classic; the classic session serves the checks made outside Connect (a
Python UDF, mapInPandas, an RDD in a classic sandboxed session) and reads the JVM's state to prove an
attack had no effect.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakesession._spark import comet
from lakesession._spark.jars import detect_spark
from lakesession._spark.versions import GROUP, iceberg_for
from lakesession.engine._engine import sandbox_jar
from tests.factories import free_port

SPARK = detect_spark()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.own_jvm,  # the module's JVM carries the sandbox's extensions and jars from launch
    pytest.mark.skipif(int(SPARK.version.split(".")[0]) < 4, reason="the engine sandbox is built for Spark 4"),
]

SANDBOX = "spark.lakesession.engine.sandbox"
PREFIX = "lakesession engine refused "
SQL_KEY = b"k" * 32  # the front door's signing key (spark.lakesession.engine.sqlKey)
SECRET = "tok-SANDBOX-0001"  # the catalog's "token": it must never come back to a user
SETTABLE = "spark.sql.shuffle.partitions,spark.sql.session.timeZone"
PROTECTED = "spark.sql.catalog.,spark.hadoop.,spark.lakesession."
EXTENSIONS = (
    "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,dev.lakesession.engine.SandboxExtensions"
)


@dataclass
class Engine:
    classic: Any  # the engine's own classic SparkSession (its conf has no sandbox key)
    url: str
    tmp: Path
    secret_json: Path  # a file on the engine's disk a user must not read
    sessions: list[Any]

    def connect(self, *, sandbox: bool = True) -> Any:
        """A new Spark Connect session (its own SparkSession on the server), sandboxed unless told."""
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        session = RemoteSparkSession(connection=self.url)
        self.sessions.append(session)
        if sandbox:
            session.conf.set(SANDBOX, "true")
        return session

    def jvm_property(self, name: str) -> str | None:
        return self.classic._jvm.java.lang.System.getProperty(name)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    assert SparkContext._active_spark_context is None, "another test module left a SparkContext running"
    tmp = tmp_path_factory.mktemp("sandbox")
    runtime = comet.fetch(
        GROUP, f"iceberg-spark-runtime-{SPARK.minor}_{SPARK.scala}", iceberg_for(SPARK.minor, SPARK.scala)
    )
    secret_json = tmp / "engine-secret.json"
    secret_json.write_text(json.dumps({"aws_secret_access_key": SECRET}) + "\n")
    port = free_port()
    conf = {
        "spark.jars": f"{comet.provider_jar()},{sandbox_jar()},{runtime}",
        "spark.sql.extensions": EXTENSIONS,
        "spark.lakesession.engine.settableConfs": SETTABLE,
        "spark.lakesession.engine.protectedConfPrefixes": PROTECTED,
        "spark.lakesession.engine.internalCatalogPrefix": "lake__chain_",
        "spark.lakesession.engine.sqlKey": SQL_KEY.hex(),
        "spark.sql.catalog.lake": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake.type": "hadoop",
        "spark.sql.catalog.lake.warehouse": str(tmp / "lake"),
        "spark.sql.catalog.lake.token": SECRET,
        # Iceberg's in-memory catalog (one per session) over files on disk: unlike a Hadoop catalog it takes a LOCATION
        "spark.sql.catalog.mem": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.mem.catalog-impl": "org.apache.iceberg.inmemory.InMemoryCatalog",
        "spark.sql.catalog.mem.io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
        "spark.sql.catalog.mem.warehouse": str(tmp / "mem"),
        "spark.sql.catalog.lake__chain_x": "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.catalog.lake__chain_x.type": "hadoop",
        "spark.sql.catalog.lake__chain_x.warehouse": str(tmp / "chain"),
        "spark.sql.warehouse.dir": str(tmp / "spark-warehouse"),
        "spark.sql.shuffle.partitions": "1",
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.plugins": "org.apache.spark.sql.connect.SparkConnectPlugin",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        # as the engine runs: a client never gets the server's stack trace
        "spark.sql.connect.serverStacktrace.enabled": "false",
        "spark.sql.pyspark.jvmStacktrace.enabled": "false",
    }
    builder = SparkSession.builder.master("local[1]").appName("lakesession-sandbox-test")
    for key, value in conf.items():
        builder = builder.config(key, value)
    classic = builder.getOrCreate()
    eng = Engine(classic, f"sc://127.0.0.1:{port}", tmp, secret_json, [])
    try:
        yield eng
    finally:
        for session in eng.sessions:
            session.stop()
        classic.stop()


@pytest.fixture(scope="module")
def user(engine: Engine) -> Any:
    """A sandboxed Connect session: what a user of the engine gets."""
    return engine.connect()


@pytest.fixture(scope="module")
def open_(engine: Engine) -> Any:
    """The same server without the sandbox (no sandbox key in its conf): each attack's control run."""
    return engine.connect(sandbox=False)


def refused(rule: str, action: Callable[[], Any]) -> str:
    """Run ``action`` expecting the sandbox's refusal under ``rule``; the message as the client saw it."""
    with pytest.raises(Exception) as info:
        action()
    message = str(info.value)
    assert PREFIX in message, message
    assert f"rule '{rule}'" in message, message
    assert "\n" not in message.strip(), f"not one line: {message!r}"
    assert "\tat " not in message and "JVM stacktrace" not in message, message
    assert SECRET not in message
    error = info.value
    if hasattr(error, "getCondition"):  # Spark Connect passes the error class and SQLSTATE through
        assert error.getCondition() == "LAKESESSION_ENGINE_REFUSED"
        assert error.getSqlState() == "42501"
    return message


def refused_any(rules: tuple[str, ...], action: Callable[[], Any]) -> str:
    """``refused`` under any one of ``rules``."""
    with pytest.raises(Exception) as info:
        action()
    message = str(info.value)
    assert PREFIX in message and any(f"rule '{r}'" in message for r in rules), message
    return message


def rows(session: Any, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in session.sql(sql).collect()]


# -- allowed -----------------------------------------------------------------------------------------


def test_queries_views_and_settable_keys_are_allowed(user: Any) -> None:
    assert rows(user, "SELECT upper('a'), 1 + 1, length(sha2('x', 256))") == [("A", 2, 64)]
    assert rows(user, "SELECT count(*) FROM range(10)") == [(10,)]
    assert rows(user, "WITH v(x) AS (VALUES (1), (2)) SELECT sum(x) FROM v WHERE x IN (SELECT 2)") == [(2,)]
    user.sql("CREATE OR REPLACE TEMPORARY VIEW allowed_v AS SELECT id * 2 AS d FROM range(3)")
    assert rows(user, "SELECT max(d) FROM allowed_v") == [(4,)]
    assert user.createDataFrame([(1, "a")], "id INT, s STRING").collect()[0].s == "a"
    user.sql("SET spark.sql.shuffle.partitions=3")
    assert rows(user, "SET spark.sql.shuffle.partitions") == [("spark.sql.shuffle.partitions", "3")]
    user.sql("RESET spark.sql.shuffle.partitions")
    assert rows(user, "SET spark.sql.session.timeZone")[0][0] == "spark.sql.session.timeZone"  # an unprotected key
    plan = rows(user, "EXPLAIN SELECT * FROM allowed_v")[0][0]
    assert "Range" in plan


def test_iceberg_tables_are_allowed(user: Any) -> None:
    user.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    user.sql("CREATE TABLE lake.db.allowed (id BIGINT, s STRING) USING iceberg")
    user.sql("INSERT INTO lake.db.allowed VALUES (1, 'a'), (2, 'b')")
    user.sql("UPDATE lake.db.allowed SET s = 'B' WHERE id = 2")
    user.sql(
        "MERGE INTO lake.db.allowed t USING (SELECT 3 AS id, 'c' AS s) u ON t.id = u.id WHEN NOT MATCHED THEN INSERT *"
    )
    user.sql("DELETE FROM lake.db.allowed WHERE id = 1")
    user.sql("ALTER TABLE lake.db.allowed ADD COLUMN n INT")
    assert rows(user, "SELECT id, s FROM lake.db.allowed ORDER BY id") == [(2, "B"), (3, "c")]
    assert user.table("lake.db.allowed").count() == 2
    assert user.read.format("iceberg").load("lake.db.allowed").count() == 2  # a read by name, not path
    assert ("db", "allowed", False) in rows(user, "SHOW TABLES IN lake.db")
    assert "allowed" in [t.name for t in user.catalog.listTables("lake.db")]
    assert [c.name for c in user.catalog.listColumns("lake.db.allowed")][:2] == ["id", "s"]
    user.sql("CREATE TABLE lake.db.allowed_ctas USING iceberg AS SELECT * FROM lake.db.allowed")
    assert rows(user, "SELECT count(*) FROM lake.db.allowed_ctas") == [(2,)]
    assert rows(user, "SELECT count(*) FROM lake.db.allowed.snapshots")[0][0] >= 1  # a metadata table
    user.sql("DROP TABLE lake.db.allowed_ctas")
    user.sql("USE lake.db")
    assert rows(user, "SELECT count(*) FROM allowed") == [(2,)]
    user.sql("USE spark_catalog.default")


def test_the_sandbox_is_off_when_its_key_is_absent(open_: Any) -> None:
    # the same jar in ordinary lakesession sessions: nothing is checked
    assert rows(open_, "SELECT reflect('java.lang.String', 'valueOf', 7)") == [("7",)]
    assert rows(open_, "SET spark.sql.catalog.lake.type") == [("spark.sql.catalog.lake.type", "hadoop")]


# -- reflection ------------------------------------------------------------------------------------------


def test_reflect_java_method_and_try_reflect_are_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: reflect('java.lang.System', 'setProperty', …) ran in the engine's JVM and set the property.
    open_.sql("SELECT reflect('java.lang.System', 'setProperty', 'lakesession.sandbox.open', 'set')").collect()
    assert engine.jvm_property("lakesession.sandbox.open") == "set"
    attack = "{}('java.lang.System', 'setProperty', 'lakesession.sandbox.pwned', 'yes')"
    for fn in ("reflect", "java_method", "try_reflect"):
        message = refused("reflection", lambda fn=fn: user.sql(f"SELECT {attack.format(fn)}").collect())
        assert "the function " + ("reflect" if fn == "try_reflect" else fn) in message  # try_reflect wraps reflect
    # hidden in a subquery, a CTE, a temporary view's body, a DataFrame expression
    call = attack.format("reflect")
    refused("reflection", lambda: user.sql(f"SELECT 1 WHERE EXISTS (SELECT {call})").collect())
    refused("reflection", lambda: user.sql(f"WITH c AS (SELECT {call} AS r) SELECT * FROM c").collect())
    refused("reflection", lambda: user.sql(f"CREATE TEMPORARY VIEW refl_v AS SELECT {call} AS r").collect())
    from pyspark.sql.connect import functions as CF

    refused("reflection", lambda: user.range(1).select(CF.expr(call)).collect())
    assert engine.jvm_property("lakesession.sandbox.pwned") is None


def test_a_catalog_view_body_is_checked_when_the_view_is_read(engine: Engine) -> None:
    # a view someone else defined (here: the same session before the sandbox was switched on for it)
    session = engine.connect(sandbox=False)
    session.sql("CREATE NAMESPACE mem.db")
    session.sql("CREATE TABLE mem.db.t (id INT) USING iceberg")
    session.sql("INSERT INTO mem.db.t VALUES (1)")
    session.sql("CREATE VIEW mem.db.fine AS SELECT id * 10 AS x FROM mem.db.t")
    call = "reflect('java.lang.System', 'setProperty', 'lakesession.sandbox.view', 'yes')"
    session.sql(f"CREATE VIEW mem.db.calls_java AS SELECT {call} AS r FROM mem.db.t")
    session.conf.set(SANDBOX, "true")
    assert rows(session, "SELECT * FROM mem.db.fine") == [(10,)]
    refused("reflection", lambda: session.sql("SELECT * FROM mem.db.calls_java").collect())
    refused("reflection", lambda: session.sql("SELECT count(*) FROM mem.db.fine JOIN mem.db.calls_java").collect())
    assert engine.jvm_property("lakesession.sandbox.view") is None


def test_explain_of_a_refused_statement_shows_the_refusal(user: Any) -> None:
    # EXPLAIN runs nothing; Spark analyses the explained statement with the same checks
    text = "\n".join(r[0] for r in rows(user, "EXPLAIN SELECT reflect('java.lang.System', 'getenv', 'HOME')"))
    assert "Error occurred during query planning" in text
    assert PREFIX + "the function reflect: rule 'reflection'" in text


# -- user code -----------------------------------------------------------------------------------------


def test_script_transformation_is_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: SELECT TRANSFORM … USING ran the shell command on the engine's host (the file appeared).
    done = engine.tmp / "transform-open"
    open_.sql(f"SELECT TRANSFORM(id) USING 'touch {done}; cat' AS (x) FROM range(1)").collect()
    assert done.exists()
    pwned = engine.tmp / "transform-pwned"
    message = refused(
        "user-code", lambda: user.sql(f"SELECT TRANSFORM(id) USING 'touch {pwned}; cat' AS (x) FROM range(1)").collect()
    )
    assert "SELECT TRANSFORM" in message
    assert not pwned.exists()


def test_python_udfs_are_refused_in_connect_and_classic_sessions(engine: Engine, user: Any) -> None:
    from pyspark.sql.connect import functions as CF

    # a Python UDF travels inside the plan (the front door refuses it too; this is the JVM's own check)
    plus_one = CF.udf(lambda x: x + 1, "long")
    refused("user-code", lambda: user.range(3).select(plus_one("id")).collect())
    # a classic session of the same JVM: Without the rule the UDF ran in a Python worker and returned 2.
    open_classic = engine.classic.newSession()
    open_classic.udf.register("plus_one", lambda x: x + 1, "int")
    assert open_classic.sql("SELECT plus_one(1)").collect()[0][0] == 2
    sandboxed = engine.classic.newSession()
    sandboxed.conf.set(SANDBOX, "true")
    sandboxed.udf.register("plus_one", lambda x: x + 1, "int")
    with pytest.raises(Exception) as info:
        sandboxed.sql("SELECT plus_one(1)").collect()
    assert PREFIX + "the user-defined function plus_one: rule 'user-code'" in str(info.value)

    def per_batch(batches: Iterator[Any]) -> Iterator[Any]:
        yield from batches

    with pytest.raises(Exception) as info:
        sandboxed.range(2).mapInPandas(per_batch, "id long").collect()
    assert "rule 'user-code'" in str(info.value)
    rdd = engine.classic.sparkContext.parallelize([(1,)]).map(lambda row: row)  # a Python function per row
    with pytest.raises(Exception) as info:
        sandboxed.createDataFrame(rdd, "x int").collect()
    assert PREFIX + "a DataFrame over an RDD" in str(info.value)


# -- path access ----------------------------------------------------------------------------------------


def test_reading_files_by_path_is_refused(engine: Engine, user: Any, open_: Any) -> None:
    path = f"file:{engine.secret_json}"
    # Without the rule: json.`file:…` returned the file's secret; and an unknown column's error listed its fields.
    assert rows(open_, f"SELECT aws_secret_access_key FROM json.`{path}`") == [(SECRET,)]
    assert open_.read.json(path).collect()[0][0] == SECRET
    with pytest.raises(Exception, match="aws_secret_access_key"):
        open_.sql(f"SELECT nope FROM json.`{path}`").collect()
    # refused before Spark lists or samples the file ("reading …", the early check), not after (a relation)
    early = "reading files by path (json."
    assert early in refused("path-access", lambda: user.sql(f"SELECT * FROM json.`{path}`").collect())
    assert early in refused("path-access", lambda: user.sql(f"SELECT nope FROM json.`{path}`").collect())
    assert early in refused("path-access", lambda: user.sql(f"SELECT * FROM IDENTIFIER('json.`{path}`')").collect())
    assert early in refused("path-access", lambda: user.table(f"json.`{path}`").collect())
    refused("path-access", lambda: user.sql(f"SELECT 1 WHERE EXISTS (SELECT * FROM text.`{path}`)").collect())
    assert early in refused(
        "path-access", lambda: user.sql(f"WITH s AS (SELECT * FROM json.`{path}`) SELECT * FROM s").collect()
    )
    refused("path-access", lambda: user.sql(f"CREATE TEMPORARY VIEW by_path AS SELECT * FROM json.`{path}`").collect())
    assert "reading the data source json" in refused("path-access", lambda: user.read.json(path).collect())
    refused("path-access", lambda: user.read.format("text").load(path).collect())
    assert "a streaming read" in refused("path-access", lambda: user.readStream.format("rate").load().collect())
    refused(
        "path-access",
        lambda: user.sql(f"CREATE TEMPORARY VIEW by_path USING json OPTIONS (path '{engine.secret_json}')").collect(),
    )
    refused("path-access", lambda: user.sql(f"REFRESH '{engine.tmp}'").collect())


def test_writing_by_path_is_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: INSERT OVERWRITE DIRECTORY and df.write.parquet wrote files where the user said.
    open_dir = engine.tmp / "written-open"
    open_.sql(f"INSERT OVERWRITE DIRECTORY '{open_dir}' USING parquet SELECT 1 AS x").collect()
    assert any(open_dir.glob("*.parquet"))
    target = engine.tmp / "written-by-user"
    refused("path-access", lambda: user.sql(f"INSERT OVERWRITE DIRECTORY '{target}' USING parquet SELECT 1").collect())
    refused("path-access", lambda: user.range(1).write.parquet(str(target)))
    refused("path-access", lambda: user.range(1).write.format("json").save(str(target)))
    assert not target.exists()


def test_locations_and_the_session_catalog_are_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: CREATE TABLE … LOCATION gave an Iceberg table the user's path as its location.
    elsewhere_open = engine.tmp / "located-open"
    open_.sql("CREATE NAMESPACE IF NOT EXISTS mem.db")
    open_.sql(f"CREATE TABLE mem.db.located_open (id INT) USING iceberg LOCATION '{elsewhere_open}'")
    described = dict((r[0], r[1]) for r in rows(open_, "DESCRIBE TABLE EXTENDED mem.db.located_open"))
    assert described["Location"].endswith(str(elsewhere_open))
    elsewhere = engine.tmp / "located"
    user.sql("CREATE NAMESPACE IF NOT EXISTS mem.db")
    refused(
        "path-access", lambda: user.sql(f"CREATE TABLE mem.db.located (id INT) USING iceberg LOCATION '{elsewhere}'")
    )
    refused(
        "path-access",
        lambda: user.sql(f"CREATE TABLE mem.db.located USING iceberg OPTIONS (path '{elsewhere}') AS SELECT 1 AS id"),
    )
    refused(
        "path-access",
        lambda: user.sql(
            f"CREATE TABLE mem.db.located TBLPROPERTIES ('write.data.path'='{elsewhere}') AS SELECT 1 AS id"
        ),
    )
    user.sql("CREATE NAMESPACE IF NOT EXISTS lake.db")
    refused("path-access", lambda: user.sql(f"CREATE NAMESPACE lake.elsewhere LOCATION '{elsewhere}'"))
    user.sql("CREATE TABLE IF NOT EXISTS lake.db.moved (id INT) USING iceberg")
    refused("path-access", lambda: user.sql(f"ALTER TABLE lake.db.moved SET LOCATION '{elsewhere}'"))
    refused(
        "path-access",
        lambda: user.sql(f"ALTER TABLE lake.db.moved SET TBLPROPERTIES ('write.data.path'='{elsewhere}')"),
    )
    assert not elsewhere.exists()
    # an Iceberg table read by its path instead of through the catalog
    table_dir = engine.tmp / "lake" / "db" / "moved"
    refused("path-access", lambda: user.read.format("iceberg").load(str(table_dir)).collect())
    # the session catalog is shared by all users and on the engine's disk. Without the rule: a table appeared there.
    open_.sql("CREATE TABLE spark_catalog.default.shared_open (id INT) USING parquet")
    assert (engine.tmp / "spark-warehouse" / "shared_open").is_dir()
    refused("path-access", lambda: user.sql("CREATE TABLE spark_catalog.default.shared (id INT) USING parquet"))
    refused("path-access", lambda: user.sql("CREATE DATABASE spark_catalog.mine"))
    refused("shared-state", lambda: user.sql("CREATE VIEW spark_catalog.default.shared_v AS SELECT 1 AS x"))
    assert not (engine.tmp / "spark-warehouse" / "shared").exists()


# -- artifacts ----------------------------------------------------------------------------------------


def _jar(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
    return path


def test_add_jar_and_create_function_are_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: ADD JAR added the jar to the engine's SparkContext (every user's class path).
    added = _jar(engine.tmp / "added-open.jar")
    open_.sql(f"ADD JAR '{added}'")
    assert any("added-open.jar" in r[0] for r in rows(open_, "LIST JARS"))
    evil = _jar(engine.tmp / "evil.jar")
    refused("artifacts", lambda: user.sql(f"ADD JAR '{evil}'"))
    refused("artifacts", lambda: user.sql(f"ADD FILE '{engine.secret_json}'"))
    refused("artifacts", lambda: user.sql("LIST JARS").collect())
    assert not any("evil.jar" in r[0] for r in rows(open_, "LIST JARS"))
    # Without the rule: CREATE FUNCTION … USING JAR registered a function in the shared session catalog.
    open_.sql(f"CREATE FUNCTION default.open_fn AS 'dev.lakesession.engine.SandboxExtensions' USING JAR '{added}'")
    assert rows(open_, "SHOW USER FUNCTIONS LIKE 'open_fn'") == [("spark_catalog.default.open_fn",)]
    refused("artifacts", lambda: user.sql(f"CREATE FUNCTION default.fn AS 'x.Y' USING JAR '{evil}'"))
    refused("artifacts", lambda: user.sql("CREATE TEMPORARY FUNCTION tfn AS 'org.apache.spark.sql.Row'"))
    refused("artifacts", lambda: user.sql("CREATE TEMPORARY FUNCTION plus(x INT) RETURNS INT RETURN x + 1"))
    assert rows(open_, "SHOW USER FUNCTIONS LIKE 'fn'") == []


# -- procedures -------------------------------------------------------------------------------------


def test_call_is_refused_before_it_runs(engine: Engine, user: Any, open_: Any) -> None:
    stash = engine.tmp / "stash"
    stash.mkdir()
    pq.write_table(pa.table({"id": [7], "s": [SECRET]}), stash / "part-0.parquet")
    for name in ("add_open", "add_user"):
        open_.sql(f"CREATE TABLE IF NOT EXISTS lake.db.{name} (id BIGINT, s STRING) USING iceberg")
    # Without the rule: add_files read the parquet files at the user's path into the table.
    open_.sql(f"CALL lake.system.add_files(table => 'db.add_open', source_table => '`parquet`.`{stash}`')").collect()
    assert rows(open_, "SELECT s FROM lake.db.add_open") == [(SECRET,)]
    call = f"CALL lake.system.add_files(table => 'db.add_user', source_table => '`parquet`.`{stash}`')"
    refused("procedures", lambda: user.sql(call).collect())
    refused(
        "procedures", lambda: user.sql("CALL lake.system.remove_orphan_files(table => 'db.add_user', dry_run => true)")
    )
    assert rows(open_, "SELECT count(*) FROM lake.db.add_user") == [(0,)]


# -- shared state -----------------------------------------------------------------------------------


def test_cache_and_global_views_are_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: CACHE TABLE put the view's rows into the cache every session of the engine shares.
    open_.sql("CREATE OR REPLACE TEMPORARY VIEW cached_open AS SELECT 1 AS x")
    open_.sql("CACHE TABLE cached_open")
    assert open_.catalog.isCached("cached_open")
    open_.sql("UNCACHE TABLE cached_open")
    user.sql("CREATE OR REPLACE TEMPORARY VIEW cached_v AS SELECT 1 AS x")
    refused("shared-state", lambda: user.sql("CACHE TABLE cached_v"))
    refused("shared-state", lambda: user.sql("CACHE TABLE cached_as AS SELECT 2 AS y"))
    refused("shared-state", lambda: user.sql("UNCACHE TABLE IF EXISTS cached_v"))
    refused("shared-state", lambda: user.sql("CLEAR CACHE"))
    assert engine.classic._jsparkSession.sharedState().cacheManager().isEmpty()  # nothing was cached
    # Without the rule: a global temporary view one session created was readable from every other session.
    open_.sql("CREATE OR REPLACE GLOBAL TEMPORARY VIEW gv_open AS SELECT 42 AS answer")
    assert engine.classic.sql("SELECT answer FROM global_temp.gv_open").collect()[0][0] == 42
    refused("shared-state", lambda: user.sql("CREATE GLOBAL TEMPORARY VIEW gv_user AS SELECT 1 AS x"))
    refused("shared-state", lambda: user.sql("SELECT * FROM global_temp.gv_open").collect())
    with pytest.raises(Exception, match="gv_user"):
        engine.classic.sql("SELECT * FROM global_temp.gv_user").collect()


# -- settings ---------------------------------------------------------------------------------------


def test_settings_outside_the_allow_list_are_refused(engine: Engine, user: Any, open_: Any) -> None:
    warehouse = str(engine.tmp / "lake")
    # Without the rule: SET changed a catalog's setting, SET <key> read it, SET listed every key and value.
    open_.sql("SET spark.sql.catalog.lake.warehouse=/elsewhere")
    assert open_.conf.get("spark.sql.catalog.lake.warehouse") == "/elsewhere"
    assert rows(open_, "SET spark.sql.catalog.lake.warehouse") == [("spark.sql.catalog.lake.warehouse", "/elsewhere")]
    listed = dict(rows(open_, "SET"))
    assert listed["spark.sql.catalog.lake.warehouse"] == "/elsewhere"
    message = refused("settings", lambda: user.sql("SET spark.sql.catalog.lake.token=x"))
    assert "SET spark.sql.catalog.lake.token" in message
    refused("settings", lambda: user.sql("SET spark.sql.catalog.lake.warehouse=/elsewhere"))
    assert user.conf.get("spark.sql.catalog.lake.warehouse") == warehouse
    refused("settings", lambda: user.sql("SET spark.sql.catalog.lake.token").collect())
    refused("settings", lambda: user.sql("SET spark.sql.catalog.lake.warehouse").collect())
    refused("settings", lambda: user.sql("SET spark.hadoop.fs.s3a.secret.key").collect())
    refused("settings", lambda: user.sql("SET some.password").collect())  # Spark's redaction pattern
    refused("settings", lambda: user.sql("SET").collect())
    refused("settings", lambda: user.sql("SET -v").collect())
    refused("settings", lambda: user.sql("RESET"))
    refused("settings", lambda: user.sql("RESET spark.sql.catalog.lake.warehouse"))
    refused("settings", lambda: user.sql("SET spark.sql.ansi.enabled=false"))  # not in settableConfs
    # the sandbox's own settings: never from SQL
    refused("settings", lambda: user.sql(f"SET {SANDBOX}=false"))
    refused("settings", lambda: user.sql("SET spark.lakesession.engine.settableConfs=spark.sql.catalog.lake.token"))
    refused("reflection", lambda: user.sql("SELECT reflect('java.lang.String', 'valueOf', 1)").collect())


def test_substitution_of_settings_and_environment_is_refused(engine: Engine, user: Any, open_: Any) -> None:
    # Without the rule: ${…} put the engine's environment and a protected setting's value into the query.
    assert rows(open_, "SELECT '${env:HOME}'") == [(os.environ["HOME"],)]
    assert rows(open_, "SELECT '${spark.sql.catalog.lake.warehouse}'") == [
        (open_.conf.get("spark.sql.catalog.lake.warehouse"),)
    ]
    refused("settings", lambda: user.sql("SELECT '${env:HOME}'").collect())
    refused("settings", lambda: user.sql("SELECT '${spark.sql.catalog.lake.warehouse}'").collect())
    from pyspark.sql.connect import functions as CF

    refused("settings", lambda: user.range(1).select(CF.expr("'${system:user.home}'")).collect())


def test_a_session_cannot_switch_off_what_the_engine_switched_on(engine: Engine, open_: Any) -> None:
    # the engine's own conf says sandbox=true: a session's false (e.g. through the config RPC) does not count
    conf = engine.classic._jsc.sc().conf()
    conf.set(SANDBOX, "true")
    try:
        open_.conf.set(SANDBOX, "false")
        refused("reflection", lambda: open_.sql("SELECT reflect('java.lang.String', 'valueOf', 1)").collect())
    finally:
        conf.remove(SANDBOX)
        open_.conf.unset(SANDBOX)
    assert rows(open_, "SELECT reflect('java.lang.String', 'valueOf', 1)") == [("1",)]


def test_the_single_pass_analyzer_fails_closed(engine: Engine) -> None:
    # the early checks run in Spark's fixed-point analyzer: with the single-pass one on, nothing runs
    session = engine.connect()
    session.conf.set("spark.sql.analyzer.singlePassResolver.enabled", "true")
    refused("settings", lambda: session.sql("SELECT 1").collect())


# -- internal catalogs ------------------------------------------------------------------------------------


def test_internal_catalogs_cannot_be_used_or_listed(engine: Engine, open_: Any) -> None:
    session = engine.connect()
    open_.sql("CREATE NAMESPACE IF NOT EXISTS lake__chain_x.granted")
    # Without the rule: USE / SHOW … IN the chain catalog listed what only a DEFINER view may reach.
    open_.sql("USE lake__chain_x")
    assert ("granted",) in rows(open_, "SHOW NAMESPACES")
    open_.sql("USE spark_catalog.default")
    for sql in (
        "USE lake__chain_x",
        "USE lake__chain_x.granted",
        "SET CATALOG lake__chain_x",
        "SHOW NAMESPACES IN lake__chain_x",
        "SHOW TABLES IN lake__chain_x.granted",
        "DESCRIBE NAMESPACE lake__chain_x.granted",
    ):
        message = refused("internal-catalog", lambda sql=sql: session.sql(sql).collect())
        assert "internal catalog" in message or "view-chain catalogs" in message
    assert session.catalog.currentCatalog() == "spark_catalog"
    # the catalog API's setCurrentCatalog is an RPC (the front door refuses it) that switches the catalog
    # before any plan exists; its own (empty) result and everything after are refused while it is current
    refused("internal-catalog", lambda: session.catalog.setCurrentCatalog("lake__chain_x"))
    refused("internal-catalog", lambda: session.sql("SHOW NAMESPACES").collect())
    session.sql("USE lake")
    assert rows(session, "SELECT 1") == [(1,)]


def test_only_signed_statements_may_name_internal_catalogs(engine: Engine, open_: Any) -> None:
    """The front door signs what it expanded (``lakesession.engine._rewrite.sign``); nothing else may name a
    view-chain catalog: not a user's text, not an edited signed text, not a fragment (``expr``, a table name)."""
    from lakesession.engine._rewrite import sign

    open_.sql("CREATE NAMESPACE IF NOT EXISTS lake__chain_x.granted")
    open_.sql("CREATE TABLE IF NOT EXISTS lake__chain_x.granted.t (id INT, region STRING) USING iceberg")
    open_.sql("INSERT INTO lake__chain_x.granted.t VALUES (1, 'EU'), (2, 'US')")
    session = engine.connect()
    query = "SELECT id FROM lake__chain_x.granted.t WHERE region = 'EU'"
    # Without the rule (the open session): the chain catalog answered whatever the text asked, every row
    assert sorted(rows(open_, "SELECT id FROM lake__chain_x.granted.t")) == [(1,), (2,)]
    assert rows(session, sign(query, SQL_KEY)) == [(1,)]
    refused("internal-catalog", lambda: session.sql(query).collect())
    edited = sign(query, SQL_KEY).replace(" WHERE region = 'EU'", "")
    refused("internal-catalog", lambda: session.sql(edited).collect())
    refused("internal-catalog", lambda: session.sql(sign(query, b"x" * 32)).collect())
    refused("internal-catalog", lambda: session.table("lake__chain_x.granted.t").collect())
    refused("internal-catalog", lambda: session.range(1).selectExpr("'lake__chain_x' AS c").collect())


# -- dynamic SQL --------------------------------------------------------------------------------------


def test_execute_immediate_scripts_and_time_travel_subqueries_are_refused(user: Any, open_: Any) -> None:
    # Without the rule: each ran (EXECUTE IMMEDIATE's own statement is analysed and checked again, but the
    # front door and the audit see only the outer text; a time-travel subquery runs during analysis).
    assert rows(open_, "EXECUTE IMMEDIATE 'SELECT 40 + 2'") == [(42,)]
    assert rows(open_, "BEGIN SELECT 42; END") == [(42,)]
    open_.sql("CREATE TABLE IF NOT EXISTS lake.db.travel (id INT) USING iceberg")
    open_.sql("INSERT INTO lake.db.travel VALUES (1)")
    travel = "SELECT * FROM lake.db.travel TIMESTAMP AS OF (SELECT current_timestamp())"
    assert rows(open_, travel) == [(1,)]
    refused("dynamic-sql", lambda: user.sql("EXECUTE IMMEDIATE 'SELECT 40 + 2'").collect())
    refused(
        "dynamic-sql",
        lambda: user.sql("EXECUTE IMMEDIATE 'SELECT reflect(''java.lang.String'', ''valueOf'', 1)'").collect(),
    )
    refused("dynamic-sql", lambda: user.sql("BEGIN SELECT 42; END").collect())
    refused("dynamic-sql", lambda: user.sql(travel).collect())
    assert rows(user, "SELECT count(*) FROM lake.db.travel TIMESTAMP AS OF current_timestamp()") == [(1,)]


# -- chain catalogs reached through a built name (#39) -------------------------------------------------------

#: ways to name ``lake__chain_x.granted.t`` without the prefix appearing in the statement's text
BUILT_NAMES = (
    "SELECT * FROM IDENTIFIER/**/(concat('lake__', 'chain_x.granted.t'))",
    "SELECT * FROM identifier\n(\n'lake_' || '_chain_x' || '.granted.t')",
    "WITH c AS (SELECT * FROM IDENTIFIER(concat('lake__', 'chain_x.granted.t'))) SELECT * FROM c",
    "SELECT * FROM range(1) WHERE EXISTS (SELECT * FROM IDENTIFIER(concat('lake__', 'chain_x.granted.t')))",
    "SELECT count(*) FROM IDENTIFIER(replace('lake~~chain_x.granted.t', '~', '_'))",
)


def _granted(open_: Any) -> None:
    open_.sql("CREATE NAMESPACE IF NOT EXISTS lake__chain_x.granted")
    open_.sql("CREATE TABLE IF NOT EXISTS lake__chain_x.granted.t (id INT, region STRING) USING iceberg")
    if not rows(open_, "SELECT * FROM lake__chain_x.granted.t"):
        open_.sql("INSERT INTO lake__chain_x.granted.t VALUES (1, 'EU'), (2, 'US')")


def test_a_chain_catalog_named_through_a_built_name_is_refused(engine: Engine, open_: Any) -> None:
    """The JVM refuses, after analysis, every relation resolved from a view-chain catalog in a statement the
    front door did not sign, however the name was built (the front door's regex is not involved here).

    Without the rule (today's parser, which checks only literal mentions of the prefix): each built name
    read the chain catalog's table, both rows, in a sandboxed session."""
    _granted(open_)
    session = engine.connect()
    for sql in BUILT_NAMES:
        refused("internal-catalog", lambda sql=sql: session.sql(sql).collect())
    # a query parameter, a session variable (DECLARE VARIABLE), a SQL script's statement
    refused(
        "internal-catalog",
        lambda: session.sql("SELECT * FROM IDENTIFIER(:t)", args={"t": "lake__chain_x.granted.t"}).collect(),
    )
    refused(
        "internal-catalog",
        lambda: session.sql("SELECT * FROM IDENTIFIER(?)", args=["lake__chain_x.granted.t"]).collect(),
    )
    session.sql("DECLARE OR REPLACE VARIABLE chain_name STRING DEFAULT concat('lake__', 'chain_x.granted.t')")
    refused("internal-catalog", lambda: session.sql("SELECT * FROM IDENTIFIER(chain_name)").collect())
    message = refused_any(
        ("internal-catalog", "dynamic-sql"),
        lambda: session.sql(
            "BEGIN DECLARE n STRING DEFAULT concat('lake__', 'chain_x.granted.t'); SELECT * FROM IDENTIFIER(n); END"
        ).collect(),
    )
    assert "lake__chain_x" not in message or "internal-catalog" in message
    # writes through a built name: nothing was inserted
    refused(
        "internal-catalog",
        lambda: session.sql("INSERT INTO IDENTIFIER(concat('lake__', 'chain_x.granted.t')) VALUES (9, 'X')").collect(),
    )
    assert sorted(rows(open_, "SELECT id FROM lake__chain_x.granted.t")) == [(1,), (2,)]


def test_a_function_of_a_chain_catalog_named_through_a_built_name_is_refused(engine: Engine, open_: Any) -> None:
    """Functions resolve from a catalog too: a built name reaching a view-chain catalog's is refused while Spark
    resolves it (after resolution a function no longer says which catalog it came from).

    Without the rule: the chain catalog's ``system.bucket`` answered in a sandboxed session."""
    call = "SELECT IDENTIFIER(concat('lake__', 'chain_x.system.bucket'))(4, 7)"
    expected = rows(open_, call)
    assert expected == rows(open_, "SELECT lake.system.bucket(4, 7)")
    session = engine.connect()
    assert rows(session, "SELECT lake.system.bucket(4, 7)") == expected  # the ordinary catalog's: allowed
    refused("internal-catalog", lambda: session.sql(call).collect())
    session.sql("DECLARE OR REPLACE VARIABLE fn STRING DEFAULT 'lake_' || '_chain_x.system.bucket'")
    refused("internal-catalog", lambda: session.sql("SELECT IDENTIFIER(fn)(4, 7)").collect())


def test_a_view_body_naming_a_chain_catalog_through_identifier_is_refused(engine: Engine, open_: Any) -> None:
    """A view someone else defined (here: the same session before the sandbox was switched on for it), whose
    body builds the chain catalog's name: refused when read.

    Without the rule: reading the view from the sandboxed session returned the chain table's rows."""
    _granted(open_)
    session = engine.connect(sandbox=False)
    session.sql("CREATE NAMESPACE IF NOT EXISTS mem.db")
    session.sql(
        "CREATE OR REPLACE VIEW mem.db.via_chain AS SELECT * FROM IDENTIFIER(concat('lake__', 'chain_x.granted.t'))"
    )
    assert sorted(rows(session, "SELECT id FROM mem.db.via_chain")) == [(1,), (2,)]
    session.conf.set(SANDBOX, "true")
    refused("internal-catalog", lambda: session.sql("SELECT * FROM mem.db.via_chain").collect())
    refused("internal-catalog", lambda: session.table("mem.db.via_chain").collect())


def test_dataframe_reads_and_the_catalog_api_cannot_reach_a_chain_catalog(engine: Engine, open_: Any) -> None:
    """``spark.table()`` with a built name and ``setCurrentCatalog``: refused by the JVM alone.

    Without the rule (the open session): both read the chain catalog's rows."""
    _granted(open_)
    name = "_".join(["lake", "", "chain", "x"]) + ".granted.t"
    assert len(open_.table(name).collect()) == 2
    session = engine.connect()
    refused("internal-catalog", lambda: session.table(name).collect())
    refused("internal-catalog", lambda: session.catalog.setCurrentCatalog(name.split(".")[0]))
    refused("internal-catalog", lambda: session.table("granted.t").collect())
    refused("internal-catalog", lambda: session.sql("SELECT current_catalog()").collect())
    session.sql("USE lake")


def test_chain_catalogs_are_not_listed(engine: Engine, open_: Any) -> None:
    """SHOW CATALOGS and ``listCatalogs`` never name a view-chain catalog, even once the session loaded one.

    Without the rule (the open session): both listed ``lake__chain_x``."""
    _granted(open_)
    assert ("lake__chain_x",) in rows(open_, "SHOW CATALOGS")
    assert "lake__chain_x" in [c.name for c in open_.catalog.listCatalogs()]
    session = engine.connect()
    with pytest.raises(Exception):  # loads the chain catalog into the session before it is refused
        session.sql(BUILT_NAMES[0]).collect()
    assert ("lake",) in rows(session, "SHOW CATALOGS") or ("spark_catalog",) in rows(session, "SHOW CATALOGS")
    assert not [r for r in rows(session, "SHOW CATALOGS") if "chain" in r[0]]
    assert not [r for r in rows(session, "SHOW CATALOGS LIKE 'lake*'") if "chain" in r[0]]
    assert not [c for c in session.catalog.listCatalogs() if "chain" in c.name]


def test_signed_statements_still_read_chain_catalogs(engine: Engine, open_: Any) -> None:
    """The engine's own signed expansion keeps working: as SQL, under DataFrame operators, as a temporary view."""
    from lakesession.engine._rewrite import sign

    _granted(open_)
    session = engine.connect()
    signed = sign("SELECT id FROM lake__chain_x.granted.t WHERE region = 'EU'", SQL_KEY)
    assert rows(session, signed) == [(1,)]
    assert session.sql(signed).filter("id > 0").count() == 1
    session.sql(signed).createOrReplaceTempView("eu_only")
    assert rows(session, "SELECT * FROM eu_only") == [(1,)]
    # a signed text never builds a name at run time (the front door never signs one; the JVM holds it anyway)
    for text in ("SELECT * FROM IDENTIFIER(:t)", "SELECT * FROM IDENTIFIER(:t) -- lake__chain_x"):
        built = sign(text, SQL_KEY)
        refused("dynamic-sql", lambda b=built: session.sql(b, args={"t": "lake__chain_x.granted.t"}).collect())


def test_current_user_is_the_sessions_user(engine: Engine, open_: Any) -> None:
    """``current_user()``/``session_user()``/``user()`` answer the user the platform named for the session.

    Without the rule: Spark answered the engine's OS account."""
    import getpass

    assert rows(open_, "SELECT current_user()") == [(getpass.getuser(),)]
    session = engine.connect()
    session.conf.set("spark.lakesession.engine.user", "alice")
    assert rows(session, "SELECT current_user(), session_user(), user()") == [("alice", "alice", "alice")]
    assert rows(session, "SELECT * FROM range(1) WHERE current_user() = 'alice'") == [(0,)]
    assert rows(session, "SELECT (SELECT current_user())") == [("alice",)]
    from pyspark.sql.connect import functions as CF

    assert session.range(1).select(CF.current_user()).collect()[0][0] == "alice"
    refused("settings", lambda: session.sql("SET spark.lakesession.engine.user").collect())
    refused("settings", lambda: session.sql("SET spark.lakesession.engine.user=bob"))
