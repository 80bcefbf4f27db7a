"""The engine's front-door sandbox: what a user's Spark Connect request may not carry.

The front door sees each request as protobuf before the Connect server does. It refuses, by
message type anywhere in the request, everything that would run a user's code beside other
users' credentials or reach storage without the catalog: user-defined functions and
``mapInPandas``-style operators, Python data sources, server extensions, artifact-backed
relations, path reads and writes, streaming, checkpoints and the shared cache. SQL text is
checked by the JVM's own rule (``dev.lakesession.engine.SandboxExtensions``, the second layer:
it sees the analyzed plan, whatever way it arrived); here SQL text is only scanned for the
ways a name can be built at run time (``IDENTIFIER(…)``, ``EXECUTE IMMEDIATE``) and for the
engine's internal view-chain catalogs, which a user may never name.

Every refusal is a ``Refused`` naming its rule; ``RULES`` is the list the docs show.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALWAYS_PROTECTED_PREFIXES",
    "DEFAULT_PROTECTED_PREFIXES",
    "DEFAULT_SETTABLE",
    "RULES",
    "ConfPolicy",
    "Refused",
    "check_analyze",
    "check_plan",
    "walk",
]

RULES: dict[str, str] = {
    "user-code": "user-defined functions (Python, Scala, Java), mapInPandas/applyInPandas/mapInArrow, foreach, "
    "Python data sources, Dataset closures, TRANSFORM scripts, ML and pipeline commands, server extensions",
    "reflection": "reflect / java_method / try_reflect",
    "artifacts": "addArtifacts (jars, files, Python modules), ADD JAR/FILE/ARCHIVE, CREATE FUNCTION, "
    "relations cached as artifacts",
    "path-access": "reads and writes by path (spark.read.parquet(path), parquet.`s3a://…`, file: URIs), "
    "LOCATION clauses, non-catalog data sources, the engine's own session catalog",
    "procedures": "CALL of stored procedures (they take paths: register_table, add_files, migrate …)",
    "shared-state": "CACHE TABLE / persist / clearCache, global temporary views, checkpoints "
    "(Spark shares them between every session of the engine)",
    "streaming": "streaming queries and their listeners",
    "settings": "setting a configuration key outside the engine's allow-list, reading a protected one",
    "internal-catalog": "naming the engine's view-chain catalogs (they hold tables granted only through a view)",
    "dynamic-sql": "IDENTIFIER(…), EXECUTE IMMEDIATE and SQL scripts (what they run is decided after the checks)",
    "session": "another user's session, cloning sessions",
    "view-chain": "a view chain that cannot be resolved (a cycle, deeper than 10 views, unparsable view SQL)",
}

#: keys a user may set (``spark.conf.set`` / ``SET k=v``): query behaviour only, nothing about catalogs,
#: storage, the JVM or the engine
DEFAULT_SETTABLE: tuple[str, ...] = (
    "spark.sql.shuffle.partitions",
    "spark.sql.session.timeZone",
    "spark.sql.ansi.enabled",
    "spark.sql.adaptive.enabled",
    "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.sql.adaptive.skewJoin.enabled",
    "spark.sql.autoBroadcastJoinThreshold",
    "spark.sql.caseSensitive",
    "spark.sql.execution.arrow.pyspark.enabled",
    "spark.sql.execution.arrow.pyspark.fallback.enabled",
    "spark.sql.execution.arrow.maxRecordsPerBatch",
    "spark.sql.execution.arrow.useLargeVarTypes",
    "spark.sql.execution.pandas.convertToArrowArraySafely",
    "spark.sql.repl.eagerEval.enabled",
    "spark.sql.repl.eagerEval.maxNumRows",
    "spark.sql.repl.eagerEval.truncate",
    "spark.sql.legacy.timeParserPolicy",
    "spark.sql.datetime.java8API.enabled",
    "spark.sql.timestampType",
    "spark.sql.maxPlanStringLength",
    "spark.sql.pivotMaxValues",
    "spark.sql.crossJoin.enabled",
)
#: keys a user may not even read: catalogs (their gateway secrets), Hadoop/S3 settings, the engine's own
DEFAULT_PROTECTED_PREFIXES: tuple[str, ...] = (
    "spark.sql.catalog.",
    "spark.sql.defaultcatalog",
    "spark.hadoop.",
    "spark.lakesession.",
    "spark.sql.extensions",
    "spark.jars",
    "spark.driver.",
    "spark.executor.",
    "spark.plugins",
    "spark.sql.warehouse.dir",
)
#: keys no user may read whatever the operator configures: where the JVM listens, how it authenticates,
#: its files (Spark's own network is sealed: ``lakesession._spark._seal``; a user needs none of it)
ALWAYS_PROTECTED_PREFIXES: tuple[str, ...] = (
    "spark.app.",
    "spark.archives",
    "spark.authenticate",
    "spark.blockmanager.",
    "spark.connect.authenticate",
    "spark.connect.grpc.",
    "spark.driver.",
    "spark.eventlog.",
    "spark.files",
    "spark.io.encryption.",
    "spark.jars",
    "spark.local.dir",
    "spark.master",
    "spark.network.",
    "spark.redaction.",
    "spark.repl.",
    "spark.submit.",
    "spark.ui.",
)
_SECRET_KEY = re.compile(r"(?i)secret|password|token|access[._-]?key|credential|signature|sqlkey")

_TYPES: dict[str, tuple[str, str]] = {  # protobuf message type -> (rule, what)
    "spark.connect.CommonInlineUserDefinedFunction": ("user-code", "a user-defined function"),
    "spark.connect.PythonUDF": ("user-code", "a Python function"),
    "spark.connect.ScalarScalaUDF": ("user-code", "a Scala function"),
    "spark.connect.JavaUDF": ("user-code", "a Java function"),
    "spark.connect.TypedAggregateExpression": ("user-code", "a typed aggregator"),
    "spark.connect.CommonInlineUserDefinedTableFunction": ("user-code", "a user-defined table function"),
    "spark.connect.PythonUDTF": ("user-code", "a Python table function"),
    "spark.connect.CommonInlineUserDefinedDataSource": ("user-code", "a Python data source"),
    "spark.connect.PythonDataSource": ("user-code", "a Python data source"),
    "spark.connect.MapPartitions": ("user-code", "mapInPandas/mapInArrow"),
    "spark.connect.GroupMap": ("user-code", "applyInPandas/applyInArrow"),
    "spark.connect.CoGroupMap": ("user-code", "cogroup applyInPandas"),
    "spark.connect.ApplyInPandasWithState": ("user-code", "applyInPandasWithState"),
    "spark.connect.ExecuteExternalCommand": ("user-code", "an external command"),
    "spark.connect.MlCommand": ("user-code", "a Spark ML command"),
    "spark.connect.MlRelation": ("user-code", "a Spark ML relation"),
    "spark.connect.PipelineCommand": ("user-code", "a declarative pipeline"),
    "google.protobuf.Any": ("user-code", "a server extension message"),
    "spark.connect.CachedLocalRelation": ("artifacts", "a relation uploaded as an artifact"),
    "spark.connect.ChunkedCachedLocalRelation": ("artifacts", "a relation uploaded as an artifact"),
    "spark.connect.Read.DataSource": ("path-access", "a read by path or data source"),
    "spark.connect.CreateExternalTable": ("path-access", "createExternalTable"),
    "spark.connect.RefreshByPath": ("path-access", "refreshByPath"),
    "spark.connect.CheckpointCommand": ("shared-state", "a checkpoint"),
    "spark.connect.CacheTable": ("shared-state", "cacheTable"),
    "spark.connect.ClearCache": ("shared-state", "clearCache"),
    "spark.connect.AnalyzePlanRequest.Persist": ("shared-state", "cache()/persist()"),
    "spark.connect.WriteStreamOperationStart": ("streaming", "a streaming write (foreach/foreachBatch included)"),
    "spark.connect.StreamingQueryCommand": ("streaming", "a streaming query"),
    "spark.connect.StreamingQueryManagerCommand": ("streaming", "the streaming query manager"),
    "spark.connect.StreamingQueryListenerBusCommand": ("streaming", "a streaming listener"),
    "spark.connect.CreateResourceProfileCommand": ("settings", "a resource profile"),
}
_REFLECTION = frozenset({"reflect", "java_method", "try_reflect"})
_DYNAMIC_SQL = re.compile(r"(?i)\bidentifier\s*\(|\bexecute\s+immediate\b")
_SQL_FIELDS = frozenset({"query", "sql", "expression"})  # SQL.query, SqlCommand.sql, ExpressionString.expression
_PATH_OPTIONS = frozenset({"path", "paths", "location"})


@dataclass
class Refused(Exception):
    """A request the engine refuses: one line naming the rule."""

    rule: str
    what: str
    hint: str = ""

    def __str__(self) -> str:
        why = RULES.get(self.rule, "")
        tail = f"; {self.hint}" if self.hint else ""
        return f"lakesession engine refused {self.what}: rule '{self.rule}' ({why}){tail}"


def _repeated(field: Any) -> bool:
    """Whether a protobuf field is repeated (``is_repeated`` in protobuf ≥ 5.28; ``label`` before)."""
    flag = getattr(field, "is_repeated", None)
    return bool(flag) if flag is not None else bool(field.label == field.LABEL_REPEATED)


def walk(message: Any) -> Iterator[Any]:
    """Every message set in ``message``, itself included, depth first (map values and repeated fields too)."""
    stack = [message]
    while stack:
        msg = stack.pop()
        yield msg
        for field, value in msg.ListFields():
            if field.message_type is None:
                continue
            if field.message_type.GetOptions().map_entry:
                values = value.values()
                if field.message_type.fields_by_name["value"].message_type is None:
                    continue
                stack.extend(values)
            elif _repeated(field):
                stack.extend(value)
            else:
                stack.append(value)


def _strings(message: Any) -> Iterator[tuple[str, str]]:
    """(field name, value) of every string field set in ``message`` (not nested), map keys and values too."""
    for field, value in message.ListFields():
        if field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                for k, v in value.items():
                    if isinstance(k, str):
                        yield field.name, k
                    if isinstance(v, str):
                        yield field.name, v
            continue
        if field.type == field.TYPE_STRING:
            for item in value if _repeated(field) else [value]:
                yield field.name, item


_USER_CONTEXT = "spark.connect.UserContext"


def check_plan(message: Any, internal_prefix: str) -> None:
    """Raise ``Refused`` for the first thing in ``message`` (a request or part of one) the engine refuses."""
    prefix = internal_prefix.lower()
    for msg in walk(message):
        name = msg.DESCRIPTOR.full_name
        if name == _USER_CONTEXT:
            continue  # replaced by the authenticated principal before forwarding
        hit = _TYPES.get(name)
        if hit is not None:
            raise Refused(*hit)
        if name == "spark.connect.Expression.UnresolvedFunction" and msg.function_name.lower() in _REFLECTION:
            raise Refused("reflection", f"the function {msg.function_name}")
        if name == "spark.connect.CallFunction" and msg.function_name.lower() in _REFLECTION:
            raise Refused("reflection", f"the function {msg.function_name}")
        if name == "spark.connect.WriteOperation" and msg.WhichOneof("save_type") == "path":
            raise Refused("path-access", "a write to a path", "save to a catalog table: df.writeTo('lake.ns.t')")
        if name == "spark.connect.CreateTable" and msg.HasField("path"):
            raise Refused("path-access", "createTable with a path")
        if name in ("spark.connect.WriteOperation", "spark.connect.WriteOperationV2", "spark.connect.CreateTable"):
            opts = {k.lower() for k in getattr(msg, "options", {})}
            if opts & _PATH_OPTIONS:
                raise Refused("path-access", "a path option")
        for field, text in _strings(msg):
            low = text.lower()
            if prefix and prefix in low:
                raise Refused("internal-catalog", "a name of the engine's view-chain catalogs")
            if field in _SQL_FIELDS and _DYNAMIC_SQL.search(text):
                raise Refused(
                    "dynamic-sql",
                    "IDENTIFIER(…) / EXECUTE IMMEDIATE",
                    "write the table or view name in the query itself",
                )


def check_analyze(request: Any, internal_prefix: str) -> None:
    """``check_plan`` for an ``AnalyzePlanRequest`` (persist is refused wherever it appears)."""
    check_plan(request, internal_prefix)


@dataclass(frozen=True)
class ConfPolicy:
    """Which configuration keys a user may set and read on the engine."""

    settable: frozenset[str]
    protected_prefixes: tuple[str, ...]

    @classmethod
    def of(cls, settable: Iterable[str], protected_prefixes: Iterable[str]) -> ConfPolicy:
        prefixes = dict.fromkeys(p.lower() for p in (*ALWAYS_PROTECTED_PREFIXES, *protected_prefixes))
        return cls(frozenset(k.lower() for k in settable), tuple(prefixes))

    def may_set(self, key: str) -> bool:
        return key.lower() in self.settable

    def protected(self, key: str) -> bool:
        low = key.lower()
        return low.startswith(self.protected_prefixes) or bool(_SECRET_KEY.search(key))

    def check_set(self, keys: Iterable[str]) -> None:
        for key in keys:
            if not self.may_set(key):
                raise Refused(
                    "settings",
                    f"setting {key!r}",
                    "the engine's administrator can add query settings to its allow-list (settable_confs)",
                )

    def check_read(self, keys: Iterable[str]) -> None:
        for key in keys:
            if self.protected(key):
                raise Refused("settings", f"reading {key!r}")
