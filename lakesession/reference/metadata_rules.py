"""The rules Iceberg Java applies when it reads table metadata, checked before the catalog writes a file.

pyiceberg (which applies every update here) keeps Python ints unbounded and a default value as sent, so
a commit could produce a file that pyiceberg and this catalog read back but Iceberg Java 1.12's
``TableMetadataParser`` refuses, and with it Spark, Trino and Flink (issue #32): a ``next-row-id`` past a
long, a long field whose ``initial-default`` is ``"notalong"``, a ``last-updated-ms`` behind the metadata
log. Every metadata file the catalog writes is checked here as JSON, exactly as written, and a violation
is a 400 naming the field. The checks mirror Java's:

- numbers: ``JsonUtil.getInt``/``getLong`` — ids, counts and timestamps fit a signed 32/64-bit int;
- defaults: ``SingleValueParser.fromJson`` — ``initial-default``/``write-default`` parse as the field's type;
- timestamps: ``TableMetadata``'s constructor — snapshot log and metadata log sorted with one minute of
  clock skew, and ``last-updated-ms`` no more than a minute behind the last entry of either;
- row lineage: ``first-row-id + added-rows`` (the table's next ``next-row-id``) stays a long, never negative;
- specs, sort orders, schemas and references: ``metadata_specs`` (transforms and their arguments, partition
  names and field ids, bindings to the current schema, refs to snapshots);
- the future (``check_adopted``, and each new snapshot in ``formatversion``): no timestamp beyond now plus
  ``FUTURE_SKEW`` (Java's own one minute of clock skew). Java reads a snapshot dated year 9999, but every later
  commit then fails "snapshot-log is out of order": one writer could freeze a table (issue #40, B5). Within a
  minute, the next honest commit is never refused.
"""

from __future__ import annotations

import json
import math
import re
from datetime import date, time
from typing import Any, TypeGuard

from .errors import BadRequest
from .metadata_specs import SpecViolation, check_structure

__all__ = [
    "FUTURE_SKEW",
    "Violation",
    "check",
    "check_adopted",
    "check_numbers",
    "check_schema_defaults",
    "future_problem",
    "refused",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1
ONE_MINUTE = 60_000  # TableMetadata.ONE_MINUTE: the clock skew Java tolerates between commits
FUTURE_SKEW = ONE_MINUTE  # how far past the catalog's clock a timestamp may be (see the module docstring)

# keys Java reads with getInt (everything else numeric is a long)
_INT_KEYS = frozenset(
    {
        "format-version",
        "last-column-id",
        "current-schema-id",
        "schema-id",
        "id",
        "element-id",
        "key-id",
        "value-id",
        "identifier-field-ids",
        "last-partition-id",
        "default-spec-id",
        "spec-id",
        "field-id",
        "source-id",
        "source-ids",
        "default-sort-order-id",
        "order-id",
        "min-snapshots-to-keep",
        "fields",  # a statistics blob's field ids
    }
)
_DEFAULTS = ("initial-default", "write-default")
_TYPE_KEYS = frozenset({"type", "element", "key", "value"})  # where a schema names a primitive type
_STRING_MAPS = frozenset({"properties", "summary"})  # string → string: no numbers to check

_DECIMAL_TYPE = re.compile(r"decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_FIXED_TYPE = re.compile(r"fixed\[\s*(\d+)\s*\]")
_DECIMAL = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_UUID = re.compile(r"[0-9a-fA-F]{1,8}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,4}-[0-9a-fA-F]{1,12}")
_HEX = re.compile(r"([0-9a-fA-F]{2})*")
_DATE = r"\d{4}-\d{2}-\d{2}"
_TIME = r"\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?"
_RE_DATE = re.compile(_DATE)
_RE_TIME = re.compile(_TIME)
_RE_TIMESTAMP = re.compile(rf"({_DATE})T({_TIME})")
_RE_TIMESTAMPTZ = re.compile(rf"({_DATE})T({_TIME})\+00:00")  # as Java and pyiceberg write them


class Violation(ValueError):
    """One rule Iceberg Java's parser enforces, broken; ``refused`` turns it into the client's 400."""


def refused(kind: str, violation: Violation) -> BadRequest:
    """The 400 for a ``kind`` ("table", "view") metadata file Iceberg Java would refuse to read."""
    return BadRequest(
        f"Invalid {kind} metadata: {violation}. The catalog refuses metadata that Iceberg Java (Spark, Trino, "
        "Flink) cannot read"
    )


def check(raw: bytes) -> None:
    """Refuse (BadRequest naming the field) metadata that Iceberg Java's parser would refuse to read."""
    doc = json.loads(raw)
    try:
        _check(doc)
    except Violation as v:
        raise refused("table", v) from None


def check_adopted(raw: bytes, now_ms: int) -> None:
    """``check``, and no timestamp beyond ``now_ms`` + ``FUTURE_SKEW``: a file the catalog adopts as it is."""
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise _fail("the file is not a JSON object")
        _check(doc)
        stamps = [("last-updated-ms", doc.get("last-updated-ms"))]
        stamps += [
            (f"timestamp-ms of snapshot {s.get('snapshot-id')}", s.get("timestamp-ms"))
            for s in _dicts(doc, "snapshots")
        ]
        stamps += [(f"{log} entry timestamp-ms", e.get("timestamp-ms")) for log in _LOGS for e in _dicts(doc, log)]
        for what, ts in stamps:
            if (problem := future_problem(ts, now_ms)) is not None:
                raise _fail(f"{what} {problem}")
    except (Violation, SpecViolation) as v:
        raise refused("table", Violation(str(v))) from None
    except ValueError as e:  # not JSON
        raise refused("table", Violation(f"the file is not JSON ({e})")) from None


def future_problem(ts: Any, now_ms: int) -> str | None:
    """Why timestamp ``ts`` (ms) is too far in the future for the catalog's clock ``now_ms``, else None."""
    if _is_int(ts) and ts > now_ms + FUTURE_SKEW:
        return (
            f"{ts} is in the future (the catalog's clock reads {now_ms}; at most {FUTURE_SKEW // 1000} s of clock "
            "skew): a later snapshot could never be committed after it"
        )
    return None


_LOGS = ("snapshot-log", "metadata-log")


def _dicts(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.get(key)
    return [x for x in value if isinstance(x, dict)] if isinstance(value, list) else []


def _check(doc: dict[str, Any]) -> None:
    _row_lineage(doc)
    check_numbers(doc)
    _unique(doc)
    for schema in doc.get("schemas") or []:
        check_schema_defaults(schema, f"schema {schema.get('schema-id')}")
    _timestamps(doc)
    _sequence_numbers(doc)
    try:
        check_structure(doc)
    except SpecViolation as v:
        raise _fail(str(v)) from None


def check_numbers(doc: Any) -> None:
    """Every integer in ``doc`` fits the Java int or long its key is read as; type strings are valid."""
    _numbers(doc, "")


def check_schema_defaults(schema: Any, where: str) -> None:
    """Every field's ``initial-default``/``write-default`` in ``schema`` parses as the field's type."""
    _defaults(schema, where)


def _fail(message: str) -> Violation:
    return Violation(message)


def _row_lineage(doc: dict[str, Any]) -> None:
    for snap in doc.get("snapshots") or []:
        first, added = snap.get("first-row-id"), snap.get("added-rows")
        for key, value in (("first-row-id", first), ("added-rows", added)):
            if _is_int(value) and value < 0:  # SnapshotParser: "Invalid first-row-id (cannot be negative)"
                raise _fail(f"{key} of snapshot {snap.get('snapshot-id')} is {value}: it cannot be negative")
        if _is_int(first) and _is_int(added) and first + added > LONG_MAX:
            raise _fail(
                f"next-row-id would be {first + added}, beyond a long "
                f"(first-row-id {first} + added-rows {added} of snapshot {snap.get('snapshot-id')})"
            )
    next_row_id = doc.get("next-row-id")
    if _is_int(next_row_id) and next_row_id < 0:
        raise _fail(f"next-row-id is {next_row_id}: row ids are never negative")


def _numbers(node: Any, key: str) -> None:
    """Every integer fits the Java int or long its key is read as (``JsonUtil.getInt``/``getLong``)."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _DEFAULTS or k in _STRING_MAPS:
                continue  # defaults are checked against their field's type
            _numbers(v, k)
    elif isinstance(node, list):
        for v in node:
            _numbers(v, key)
    elif isinstance(node, float) and not math.isfinite(node):
        raise _fail(f"{key} is {node}, not a JSON number")
    elif _is_int(node):
        low, high, kind = (INT_MIN, INT_MAX, "an int") if key in _INT_KEYS else (LONG_MIN, LONG_MAX, "a long")
        if not low <= node <= high:
            raise _fail(f"{key} is {node}, beyond {kind}")
    elif isinstance(node, str) and key in _TYPE_KEYS:
        _type(node)


def _type(text: str) -> None:
    """Primitive type strings Java's ``Types.fromPrimitiveString`` accepts (fixed length, decimal precision)."""
    if m := _FIXED_TYPE.fullmatch(text):
        if int(m.group(1)) > INT_MAX:
            raise _fail(f"type {text}: the length is beyond an int")
    elif m := _DECIMAL_TYPE.fullmatch(text):
        precision, scale = int(m.group(1)), int(m.group(2))
        if precision > 38 or abs(scale) > INT_MAX:
            raise _fail(f"type {text}: decimals hold at most 38 digits")


_IDS = (
    ("schemas", "schema-id"),
    ("partition-specs", "spec-id"),
    ("sort-orders", "order-id"),
    ("snapshots", "snapshot-id"),
)


def _unique(doc: dict[str, Any]) -> None:
    """Java indexes schemas, specs, sort orders and snapshots by id (``ImmutableMap``): ids are unique."""
    for items, key in _IDS:
        seen: set[Any] = set()
        for item in doc.get(items) or []:
            ident = item.get(key) if isinstance(item, dict) else None
            if ident in seen:
                raise _fail(f"{items} holds {key} {ident} twice")
            seen.add(ident)


def _sequence_numbers(doc: dict[str, Any]) -> None:
    """``TableMetadata.indexAndValidateSnapshots``: no snapshot's sequence number is past the table's last."""
    last = doc.get("last-sequence-number", 0)
    for snap in _dicts(doc, "snapshots"):
        seq = snap.get("sequence-number", 0)
        if _is_int(seq) and _is_int(last) and seq > last:
            raise _fail(
                f"snapshot {snap.get('snapshot-id')} has sequence-number {seq}, past the table's last-sequence-number "
                f"{last}: a new snapshot's sequence-number must be above the last one"
            )


def _java_long(value: int) -> int:
    """``value`` as Java's long arithmetic has it (wrapping past 2^63): Java subtracts timestamps in longs, so
    ``now - Long.MIN_VALUE`` is negative there and the entry "out of order"."""
    return (value - LONG_MIN) % 2**64 + LONG_MIN


def _timestamps(doc: dict[str, Any]) -> None:
    """``TableMetadata``'s constructor: logs sorted and ``last-updated-ms`` not behind them (1 min skew)."""
    updated = doc.get("last-updated-ms")
    for log, what in (("snapshot-log", "snapshot log entry"), ("metadata-log", "metadata log entry")):
        last = None
        for entry in doc.get(log) or []:
            ts = entry.get("timestamp-ms")
            if not _is_int(ts):
                continue
            if last is not None and _java_long(ts - last) < -ONE_MINUTE:
                raise _fail(f"{log} is out of order: timestamp-ms {ts} comes after {last}")
            last = ts
        if last is not None and _is_int(updated) and _java_long(updated - last) < -ONE_MINUTE:
            raise _fail(
                f"last-updated-ms {updated} is before the latest {what} at {last} (more than a minute of clock "
                "skew): a snapshot's timestamp-ms may not be older than the table's last update"
            )


def _defaults(node: Any, where: str) -> None:
    """Every struct field's defaults parse as its type, nested fields included."""
    if not isinstance(node, dict):
        return
    for field in node.get("fields") or []:
        if not isinstance(field, dict):
            continue
        _optional_if_unknown(field.get("type"), field.get("required") is True, f"field {field.get('name')!r}", where)
        for key in _DEFAULTS:
            value = field.get(key)
            if key in field and value is None:  # SchemaParser: Expressions.lit(null) is a NullPointerException
                raise _fail(
                    f"{key} of field {field.get('name')!r} (id {field.get('id')}, {where}) is null: leave it out instead"
                )
            if value is not None and not _parses(field.get("type"), value):
                raise _fail(
                    f"{key} of field {field.get('name')!r} (id {field.get('id')}, {where}) is {value!r}, "
                    f"not a {_type_name(field.get('type'))} value"
                )
        _nested(field.get("type"), where)


def _nested(t: Any, where: str) -> None:
    if not isinstance(t, dict):
        return
    if t.get("type") == "struct":
        _defaults(t, where)
    elif t.get("type") == "list":
        _optional_if_unknown(t.get("element"), t.get("element-required") is True, "list element", where)
        _nested(t.get("element"), where)
    elif t.get("type") == "map":
        _optional_if_unknown(t.get("key"), True, "map key", where)  # a map's keys are always required
        _optional_if_unknown(t.get("value"), t.get("value-required") is True, "map value", where)
        _nested(t.get("key"), where)
        _nested(t.get("value"), where)


def _optional_if_unknown(t: Any, required: bool, what: str, where: str) -> None:
    """Java's ``NestedField``: "Cannot create required field with unknown type" (any format version)."""
    if required and t == "unknown":
        raise _fail(f"{what} ({where}) is required but of type unknown: a field of type unknown must be optional")


def _type_name(t: Any) -> str:
    return t if isinstance(t, str) else str(t.get("type")) if isinstance(t, dict) else repr(t)


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _parses(t: Any, v: Any) -> bool:
    """``SingleValueParser.fromJson(type, v)`` would succeed (null is always fine)."""
    if v is None:
        return True
    if isinstance(t, dict):
        return _parses_nested(t, v)
    if not isinstance(t, str):
        return False
    if t == "boolean":
        return isinstance(v, bool)
    if t == "int":
        return _is_int(v) and INT_MIN <= v <= INT_MAX
    if t == "long":
        return _is_int(v) and LONG_MIN <= v <= LONG_MAX
    if t in ("float", "double"):  # a JSON floating-point number: Java refuses 0 where it wants 0.0
        return isinstance(v, float) and v == v and abs(v) != float("inf")
    if not isinstance(v, str):
        return False  # every other primitive's JSON form is a string
    if t == "string":
        return True
    if m := _DECIMAL_TYPE.fullmatch(t):
        d = _DECIMAL.fullmatch(v)
        return d is not None and _decimal_scale(v) == int(m.group(2))
    if m := _FIXED_TYPE.fullmatch(t):
        return len(v) == 2 * int(m.group(1)) and _HEX.fullmatch(v) is not None
    if t == "binary":
        return _HEX.fullmatch(v) is not None
    if t == "uuid":
        return len(v) == 36 and _UUID.fullmatch(v) is not None
    if t == "date":
        return _RE_DATE.fullmatch(v) is not None and _valid(date.fromisoformat, v)
    if t == "time":
        return _RE_TIME.fullmatch(v) is not None and _valid_time(v)
    if t in ("timestamp", "timestamp_ns"):
        m2 = _RE_TIMESTAMP.fullmatch(v)
        return m2 is not None and _valid(date.fromisoformat, m2.group(1)) and _valid_time(m2.group(2))
    if t in ("timestamptz", "timestamptz_ns"):
        m3 = _RE_TIMESTAMPTZ.fullmatch(v)
        return m3 is not None and _valid(date.fromisoformat, m3.group(1)) and _valid_time(m3.group(2))
    return False  # unknown, variant, geometry, geography: Java parses no default for them


def _parses_nested(t: dict[str, Any], v: Any) -> bool:
    kind = t.get("type")
    if kind == "struct":
        if not isinstance(v, dict):
            return False
        return all(_parses(f.get("type"), v[str(f.get("id"))]) for f in t.get("fields") or [] if str(f.get("id")) in v)
    if kind == "list":
        return isinstance(v, list) and all(_parses(t.get("element"), e) for e in v)
    if kind == "map":
        if not isinstance(v, dict) or not isinstance(v.get("keys"), list) or not isinstance(v.get("values"), list):
            return False
        keys, values = v["keys"], v["values"]
        return (
            len(keys) == len(values)
            and all(_parses(t.get("key"), k) for k in keys)
            and all(_parses(t.get("value"), x) for x in values)
        )
    return False


def _decimal_scale(text: str) -> int:
    """Java ``BigDecimal``'s scale of a decimal string: digits after the point minus the exponent."""
    mantissa, _, exponent = text.lower().partition("e")
    fraction = mantissa.partition(".")[2]
    return len(fraction) - (int(exponent) if exponent else 0)


def _valid_time(text: str) -> bool:
    head, _, fraction = text.partition(".")
    return _valid(time.fromisoformat, head + ("." + fraction[:6].ljust(6, "0") if fraction else ""))


def _valid(parse: Any, text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True
