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

Every refusal is a ``Refused`` naming its rule. The rules, the message types refused, the settings'
allow-list and protected prefixes come from the rulebook (``lakesession/_wire/engine_rules.json``), which
the JVM's checks and the docs' rule table read too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .._wire.enginerules import BOOK, REFUSED_PREFIX

__all__ = [
    "ALWAYS_PROTECTED_PREFIXES",
    "DEFAULT_PROTECTED_PREFIXES",
    "DEFAULT_SETTABLE",
    "DYNAMIC_SQL",
    "RULES",
    "ConfPolicy",
    "Refused",
    "check_analyze",
    "check_plan",
    "walk",
]

_BOOK = BOOK  # lakesession/_wire/engine_rules.json: the JVM's checks and the docs read the same file

#: rule id -> what it refuses (the docs' table renders the rulebook's longer columns)
RULES: dict[str, str] = {r["id"]: r["summary"] for r in _BOOK["rules"]}
#: keys a user may set (``spark.conf.set`` / ``SET k=v``): query behaviour only, nothing about catalogs,
#: storage, the JVM or the engine
DEFAULT_SETTABLE: tuple[str, ...] = tuple(_BOOK["settable_confs"])
#: keys a user may not even read: catalogs (their gateway secrets), Hadoop/S3 settings, the engine's own
DEFAULT_PROTECTED_PREFIXES: tuple[str, ...] = tuple(_BOOK["protected_conf_prefixes"])
#: keys no user may read whatever the operator configures: where the JVM listens, how it authenticates,
#: its files (Spark's own network is sealed: ``lakesession._spark._seal``; a user needs none of it), and
#: the engine's own ``spark.lakesession.*`` (the session's user, the signing key)
ALWAYS_PROTECTED_PREFIXES: tuple[str, ...] = tuple(_BOOK["always_protected_conf_prefixes"])
_INTERNAL_CONF = str(_BOOK["internal_conf_prefix"])
_SECRET_KEY = re.compile(_BOOK["secret_key_pattern"])

_TYPES: dict[str, tuple[str, str]] = {  # protobuf message type -> (rule, what)
    name: (v["rule"], v["what"]) for name, v in _BOOK["connect_messages"].items()
}
_REFLECTION = frozenset(_BOOK["reflection_functions"])
#: SQL comments and whitespace between two tokens (``IDENTIFIER/**/(`` is still a call): the front door's first net;
#: the JVM checks what a built name resolved to
_GAP = r"(?:\s|/\*.*?\*/|--[^\n]*(?:\n|$))*"
DYNAMIC_SQL = re.compile(rf"(?is)\bidentifier{_GAP}\(|\bexecute{_GAP}immediate\b")
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
        return f"{REFUSED_PREFIX}{self.what}: rule '{self.rule}' ({why}){tail}"


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
            if field in _SQL_FIELDS and DYNAMIC_SQL.search(text):
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
        low = key.lower()
        return low in self.settable and not low.startswith(_INTERNAL_CONF)

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
