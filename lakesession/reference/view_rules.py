"""The rules Iceberg Java applies when it reads view metadata, checked before the catalog writes a file.

pyiceberg's ``ViewMetadata`` (the model every view update here goes through) keeps Python ints unbounded
and defaults as sent, so a create or a commit could produce a view that pyiceberg and this catalog read
back while Iceberg Java 1.12's ``ViewMetadataParser`` refuses it, and with it Spark, Trino and Flink
(issue #40, V13): a ``timestamp-ms`` of 2^64, a long field whose ``initial-default`` is ``"notalong"``,
a field id of 2^40. Every view metadata file is checked here as the JSON that is written, and a
violation is a 400 naming the field (``metadata_rules.refused``). The checks mirror Java's:

- ``ViewMetadataParser``: ``format-version`` an int and 1; ``view-uuid``, ``location`` strings;
  ``properties`` a string map; ``current-version-id`` an int; ``schemas``, ``versions``, ``version-log``
  arrays (a log entry: ``version-id`` int, ``timestamp-ms`` long; Java never checks the log's order);
- ``ViewMetadata``: schema ids and version ids unique (Java indexes them in an ``ImmutableMap``), the
  current version and its schema resolvable (every engine resolves both when it loads a view); each
  version's schema known, as ``ViewMetadata.Builder.addVersion`` requires;
- ``ViewVersionParser``: ``version-id``, ``schema-id`` ints, ``timestamp-ms`` a long, ``summary`` a
  string map, ``representations`` (``type`` a string; ``sql`` ones carry ``sql`` and ``dialect``
  strings), ``default-catalog`` a string or null, ``default-namespace`` strings without a null byte
  (``Namespace.of``);
- ``SchemaParser``: ids fit an int (``metadata_rules.check_numbers``), field ids unique, defaults parse as
  their field's type (``metadata_rules.check_schema_defaults``).

A request is checked as Iceberg Java's REST parser reads it too (``check_create_request``,
``check_commit_request``): a schema id of 2^31 that the builder would renumber, or a ``timestamp-ms`` of
``1.0``, is refused there although the file written would read.
"""

from __future__ import annotations

import json
from typing import Any, TypeGuard

from .metadata_rules import Violation, check_numbers, check_schema_defaults, refused

__all__ = ["check", "check_commit_request", "check_create_request", "check_metadata"]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
SUPPORTED_FORMAT_VERSION = 1
_FIELD_IDS = ("id", "element-id", "key-id", "value-id")


def check(text: str | bytes) -> None:
    """Refuse (400 naming the field) a view metadata file Iceberg Java's parser would refuse to read."""
    try:
        check_metadata(json.loads(text))
    except Violation as v:
        raise refused("view", v) from None


def check_create_request(body: Any) -> None:
    """A ``CreateViewRequest`` whose schema or view version Iceberg Java's REST parser would refuse: 400."""
    try:
        if not isinstance(body, dict):
            return  # the request model reports the shape
        if isinstance(body.get("schema"), dict):
            _schema(body["schema"], "the schema")
        if isinstance(body.get("view-version"), dict):
            _version(body["view-version"], "the view-version", request=True)
    except Violation as v:
        raise refused("view", v) from None


def check_commit_request(body: Any) -> None:
    """A ``CommitViewRequest`` holding an update Iceberg Java's REST parser would refuse: 400."""
    try:
        updates = body.get("updates") if isinstance(body, dict) else None
        for i, update in enumerate(updates if isinstance(updates, list) else []):
            if not isinstance(update, dict):
                continue
            action, where = update.get("action"), f"update {i} ({update.get('action')})"
            if action == "add-schema" and isinstance(update.get("schema"), dict):
                _schema(update["schema"], f"the schema of {where}")
            elif action == "add-view-version" and isinstance(update.get("view-version"), dict):
                _version(update["view-version"], f"the view-version of {where}", request=True)
            elif action == "set-current-view-version":
                _int(update, "view-version-id", where)
            elif action == "upgrade-format-version":
                _int(update, "format-version", where)
    except Violation as v:
        raise refused("view", v) from None


def check_metadata(doc: Any) -> None:
    """Raise ``Violation`` where Iceberg Java's ``ViewMetadataParser`` (or loading the view) would fail."""
    if not isinstance(doc, dict):
        raise Violation("view metadata is not a JSON object")
    version = _int(doc, "format-version", "the view")
    if version != SUPPORTED_FORMAT_VERSION:
        raise Violation(f"format-version is {version}: Iceberg Java reads view format version 1 only")
    _string(doc, "view-uuid", "the view")
    _string(doc, "location", "the view")
    if "properties" in doc:
        _string_map(doc, "properties", "the view")
    schema_ids: set[int] = set()
    for schema in _list(doc, "schemas", "the view"):
        where = f"schema {schema.get('schema-id') if isinstance(schema, dict) else schema!r}"
        _schema(schema, where)
        sid = _int(schema, "schema-id", where)
        if sid in schema_ids:
            raise Violation(f"schemas holds schema-id {sid} twice")
        schema_ids.add(sid)
    current = _int(doc, "current-version-id", "the view")
    versions: dict[int, dict[str, Any]] = {}
    for v in _list(doc, "versions", "the view"):
        where = f"view version {v.get('version-id') if isinstance(v, dict) else v!r}"
        vid, sid = _version(v, where)
        if vid in versions:
            raise Violation(f"versions holds version-id {vid} twice")
        if sid not in schema_ids:
            raise Violation(f"schema-id {sid} of {where} is not among the view's schemas {sorted(schema_ids)}")
        versions[vid] = v
    if current not in versions:
        raise Violation(f"current-version-id {current} is not among the view's versions {sorted(versions)}")
    for i, entry in enumerate(_list(doc, "version-log", "the view")):
        where = f"version-log entry {i}"
        if not isinstance(entry, dict):
            raise Violation(f"{where} is not an object")
        _int(entry, "version-id", where)
        _long(entry, "timestamp-ms", where)


# ------------------------------------------------------------------ parts
def _schema(schema: Any, where: str) -> None:
    """``SchemaParser.fromJson``: ids fit an int, field ids unique, defaults of their field's type."""
    if not isinstance(schema, dict):
        raise Violation(f"{where} is not an object")
    check_numbers(schema)
    check_schema_defaults(schema, where)
    seen: set[int] = set()
    for key, value in _ids(schema):
        if not _is_int(value):
            raise Violation(f"{key} {value!r} in {where} is not an int")
        if value in seen:
            raise Violation(f"{where} holds field id {value} twice: field ids are unique within a schema")
        seen.add(value)
    if "schema-id" in schema and schema["schema-id"] is not None:
        _int(schema, "schema-id", where)


def _ids(node: Any) -> list[tuple[str, Any]]:
    """Every field id in a schema (struct fields, list elements, map keys and values), nested included."""
    out: list[tuple[str, Any]] = []
    if isinstance(node, dict):
        if node.get("type") == "struct":
            for f in node.get("fields") or []:
                if isinstance(f, dict):
                    out.append(("id", f.get("id")))
                    out += _ids(f.get("type"))
        elif node.get("type") == "list":
            out.append(("element-id", node.get("element-id")))
            out += _ids(node.get("element"))
        elif node.get("type") == "map":
            out += [("key-id", node.get("key-id")), ("value-id", node.get("value-id"))]
            out += _ids(node.get("key")) + _ids(node.get("value"))
    return out


def _version(v: Any, where: str, *, request: bool = False) -> tuple[int, int]:
    """``ViewVersionParser.fromJson`` (a request may leave out what pyiceberg's client fills in)."""
    if not isinstance(v, dict):
        raise Violation(f"{where} is not an object")
    vid = _int(v, "version-id", where) if not request or "version-id" in v else 1
    sid = _int(v, "schema-id", where)
    if not request or "timestamp-ms" in v:
        _long(v, "timestamp-ms", where)
    if not request or "summary" in v:
        _string_map(v, "summary", where)
    for i, r in enumerate(_list(v, "representations", where)):
        rwhere = f"representation {i} of {where}"
        if not isinstance(r, dict):
            raise Violation(f"{rwhere} is not an object")
        if _string(r, "type", rwhere).lower() == "sql":
            _string(r, "sql", rwhere)
            _string(r, "dialect", rwhere)
    if v.get("default-catalog") is not None:
        _string(v, "default-catalog", where)
    for level in _list(v, "default-namespace", where):
        if not isinstance(level, str):
            raise Violation(f"default-namespace of {where} holds {level!r}, not a string")
        if "\x00" in level:
            raise Violation(f"default-namespace of {where} holds a null byte: Iceberg Java refuses the namespace")
    return vid, sid


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(doc: dict[str, Any], key: str, where: str, low: int, high: int, kind: str) -> int:
    if key not in doc or doc[key] is None:
        raise Violation(f"{key} of {where} is missing")
    value = doc[key]
    if not _is_int(value):
        raise Violation(f"{key} of {where} is {value!r}, not {kind}")
    if not low <= value <= high:
        raise Violation(f"{key} of {where} is {value}, beyond {kind}")
    return value


def _int(doc: dict[str, Any], key: str, where: str) -> int:
    """``JsonUtil.getInt``: an integral JSON number that fits a signed 32-bit int."""
    return _number(doc, key, where, INT_MIN, INT_MAX, "an int")


def _long(doc: dict[str, Any], key: str, where: str) -> int:
    """``JsonUtil.getLong``: an integral JSON number that fits a signed 64-bit long."""
    return _number(doc, key, where, LONG_MIN, LONG_MAX, "a long")


def _string(doc: dict[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str):
        raise Violation(f"{key} of {where} is {value!r}, not a string")
    return value


def _string_map(doc: dict[str, Any], key: str, where: str) -> None:
    value = doc.get(key)
    if not isinstance(value, dict):
        raise Violation(f"{key} of {where} is {value!r}, not a string map")
    for k, v in value.items():
        if not isinstance(v, str):
            raise Violation(f"{key} of {where} maps {k!r} to {v!r}, not a string")


def _list(doc: dict[str, Any], key: str, where: str) -> list[Any]:
    value = doc.get(key)
    if not isinstance(value, list):
        raise Violation(f"{key} of {where} is {value!r}, not an array")
    return value
