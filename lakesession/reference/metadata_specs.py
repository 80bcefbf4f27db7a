"""Partition specs, sort orders, schemas and the ids that tie them together, as Iceberg Java 1.12 reads them.

``metadata_rules.check`` runs these over every table metadata file the catalog writes or adopts (issue #40,
V12/V14): pyiceberg keeps a ``bucket[0]``, a duplicate partition name or a sort order by ``hour`` of a
``long`` as sent, and Iceberg Java then cannot load the table. The rules mirror Java's:

- transforms: ``Transforms.fromString`` (``bucket[N]``/``truncate[W]`` with 0 < N, W ≤ 2^31-1) and the
  type-aware ``Transforms.fromString(type, …)`` every spec field whose source is in the current schema goes
  through (``Bucket.get``, ``Truncate.get``, ``Years…Hours.toEnum``, ``Identity.get``); names Java would
  keep as an ``UnknownTransform`` are refused too: no engine can write or prune by them;
- partition fields: ``PartitionSpec.Builder.checkAndAddPartitionName`` (non-empty, unique, never the name of
  another schema column), unique field ids, and one source and transform per field id across specs
  (``Partitioning.partitionType``, which Spark computes on every load); the default spec is bound checked (``checkCompatibility``:
  source present, primitive, nested only in structs, transform applicable);
- sort orders: ``SortOrderParser`` and ``SortOrder.Builder`` (id 0 is exactly the unsorted order, known
  direction and null order), the default order bound checked;
- schemas: ``Schema``'s id and name indexes (a field id or full name appears once);
- references: current schema, default spec, default sort order, current snapshot and refs resolve.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["SpecViolation", "check_structure", "transform_problem"]

INT_MAX = 2**31 - 1
_WIDTH = re.compile(r"(\w+)\[(\d+)\]")  # Transforms.HAS_WIDTH
_TIME_UNITS = ("year", "month", "day")
_TIMESTAMPS = ("timestamp", "timestamptz", "timestamp_ns", "timestamptz_ns")
_BUCKETABLE = ("int", "long", "date", "time", *_TIMESTAMPS, "string", "uuid", "binary")
_TRUNCATABLE = ("int", "long", "string", "binary")
_NO_IDENTITY = ("variant", "geometry", "geography")
_DIRECTIONS = ("asc", "desc")
_NULL_ORDERS = ("nulls-first", "nulls-last")


class SpecViolation(ValueError):
    """A spec, sort order, schema or reference Iceberg Java refuses (``metadata_rules`` turns it into a 400)."""


def _base(t: Any) -> str:
    """The type's family: ``decimal(9,2)`` → decimal, ``fixed[4]`` → fixed, nested → struct/list/map."""
    if isinstance(t, dict):
        return str(t.get("type"))
    text = str(t)
    for family in ("decimal", "fixed", "geometry", "geography"):
        if text.startswith(family):
            return family
    return text


def transform_problem(transform: Any, source_type: Any = None) -> str | None:
    """Why Java cannot parse ``transform`` (for ``source_type``, when given), or None when it can."""
    if not isinstance(transform, str):
        return f"transform {transform!r} is not a string"
    if m := _WIDTH.fullmatch(transform):
        name, arg = m.group(1), int(m.group(2))
        if name not in ("bucket", "truncate"):
            return f"unknown transform {transform!r}"
        if not 0 < arg <= INT_MAX:
            what = "number of buckets" if name == "bucket" else "truncate width"
            return f"transform {transform!r}: the {what} must be between 1 and {INT_MAX}"
    elif transform not in ("identity", "void", "hour", *_TIME_UNITS):
        return f"unknown transform {transform!r} (identity, bucket[N], truncate[W], year, month, day, hour, void)"
    if source_type is None or transform == "void":
        return None
    kind = _base(source_type)
    name = transform.split("[")[0]
    allowed = {
        "bucket": (*_BUCKETABLE, "decimal", "fixed"),
        "truncate": (*_TRUNCATABLE, "decimal"),
        "hour": _TIMESTAMPS,
    }.get(name, ("date", *_TIMESTAMPS) if name in _TIME_UNITS else None)
    if allowed is not None and kind not in allowed:
        return f"transform {transform!r} cannot apply to a {kind} column"
    if name == "identity" and kind in _NO_IDENTITY:
        return f"transform 'identity' cannot apply to a {kind} column"
    return None


class _Schema:
    """A schema's id → (type, parent kinds) and full name → id indexes, as Java's ``TypeUtil`` builds them."""

    def __init__(self, schema: dict[str, Any]) -> None:
        self.sid = schema.get("schema-id")
        self.types: dict[int, tuple[Any, tuple[str, ...]]] = {}
        self.names: dict[str, int] = {}
        self._struct(schema, (), ())

    def _add(self, ident: Any, name: str, t: Any, parents: tuple[str, ...]) -> None:
        if ident in self.types:
            raise SpecViolation(f"schema {self.sid} holds field id {ident} twice")
        if name in self.names:
            raise SpecViolation(f"schema {self.sid} holds the field name {name!r} twice")
        self.types[ident] = (t, parents)
        self.names[name] = ident
        self._nested(t, name, parents)

    def _struct(self, node: dict[str, Any], path: tuple[str, ...], parents: tuple[str, ...]) -> None:
        for field in node.get("fields") or []:
            if isinstance(field, dict):
                self._add(field.get("id"), ".".join((*path, str(field.get("name")))), field.get("type"), parents)

    def _nested(self, t: Any, name: str, parents: tuple[str, ...]) -> None:
        if not isinstance(t, dict):
            return
        kind = t.get("type")
        if kind == "struct":
            self._struct(t, tuple(name.split(".")), (*parents, "struct"))
        elif kind == "list":
            self._add(t.get("element-id"), f"{name}.element", t.get("element"), (*parents, "list"))
        elif kind == "map":
            self._add(t.get("key-id"), f"{name}.key", t.get("key"), (*parents, "map"))
            self._add(t.get("value-id"), f"{name}.value", t.get("value"), (*parents, "map"))


def check_structure(doc: dict[str, Any]) -> None:
    """Every spec, sort order and schema in ``doc`` as Java's parser binds them; SpecViolation otherwise."""
    schemas = [s for s in (doc.get("schemas") or ([doc["schema"]] if isinstance(doc.get("schema"), dict) else []))]
    indexed = [_Schema(s) for s in schemas if isinstance(s, dict)]
    current_id = doc.get("current-schema-id", indexed[0].sid if indexed else None)
    current = next((s for s in indexed if s.sid == current_id), None)
    if current is None:
        raise SpecViolation(f"current-schema-id {current_id} names no schema")
    specs = doc.get("partition-specs")
    if specs is None and isinstance(doc.get("partition-spec"), list):
        specs = [{"spec-id": 0, "fields": doc["partition-spec"]}]
    specs = specs or []
    default_spec = doc.get("default-spec-id", 0)
    if specs and all(s.get("spec-id") != default_spec for s in specs if isinstance(s, dict)):
        raise SpecViolation(f"default-spec-id {default_spec} names no partition spec")
    for spec in specs:
        if isinstance(spec, dict):
            _spec(spec, current, checked=spec.get("spec-id") == default_spec)
    _partition_field_ids(specs, current)
    orders = doc.get("sort-orders") or []
    default_order = doc.get("default-sort-order-id", 0)
    if orders and all(o.get("order-id") != default_order for o in orders if isinstance(o, dict)):
        raise SpecViolation(f"default-sort-order-id {default_order} names no sort order")
    for order in orders:
        if isinstance(order, dict):
            _order(order, current, checked=order.get("order-id") == default_order)
    _snapshot_refs(doc)


def _spec(spec: dict[str, Any], schema: _Schema, checked: bool) -> None:
    """``UnboundPartitionSpec.bind`` (default spec) or ``bindUnchecked`` (the others) against the current schema."""
    where = f"partition spec {spec.get('spec-id')}"
    names: set[str] = set()
    ids: set[Any] = set()
    for field in spec.get("fields") or []:
        name, source, transform = field.get("name"), field.get("source-id"), field.get("transform")
        source_type, parents = schema.types.get(source, (None, ()))
        problem = transform_problem(transform, source_type)
        if problem is None and checked and transform != "void":
            problem = _bound_problem(source, source_type, parents, transform, "partition")
        if problem is not None:
            raise SpecViolation(f"{where}, field {name!r}: {problem}")
        if not isinstance(name, str) or not name:
            raise SpecViolation(f"{where}: a partition field has an empty name")
        if name in names:
            raise SpecViolation(f"{where}: the partition name {name!r} is used more than once")
        names.add(name)
        named = schema.names.get(name)
        if source_type is not None and named is not None and named != source:
            raise SpecViolation(
                f"{where}, field {name!r}: the partition name is the schema column {name!r} (id {named}), not "
                f"its source column (id {source}); name it otherwise, e.g. {name}_{str(transform).split('[')[0]}"
            )
        fid = field.get("field-id")
        if fid is not None and fid in ids:
            raise SpecViolation(f"{where}: partition field-id {fid} is used more than once")
        ids.add(fid)


def _partition_field_ids(specs: list[Any], schema: _Schema) -> None:
    """``Partitioning.partitionType(table)`` (Spark's ``_partition`` column, the partitions table): a partition
    field id whose source is still a column means one source and one transform (or void) in every spec."""
    fields = [f for s in specs if isinstance(s, dict) for f in s.get("fields") or [] if isinstance(f, dict)]
    active = {f.get("field-id") for f in fields if f.get("source-id") in schema.types}
    first: dict[Any, dict[str, Any]] = {}
    for field in fields:
        fid = field.get("field-id")
        if fid not in active:
            continue
        seen = first.setdefault(fid, field)
        transforms = {seen.get("transform"), field.get("transform")}
        if seen.get("source-id") != field.get("source-id") or (len(transforms) > 1 and "void" not in transforms):
            raise SpecViolation(
                f"partition field-id {fid} is {seen.get('transform')}({seen.get('source-id')}) in one spec and "
                f"{field.get('transform')}({field.get('source-id')}) in another: a field id keeps its source and "
                "transform across specs"
            )


def _order(order: dict[str, Any], schema: _Schema, checked: bool) -> None:
    """``SortOrderParser`` and ``UnboundSortOrder.bind`` (default order) or ``bindUnchecked``."""
    where = f"sort order {order.get('order-id')}"
    fields = order.get("fields") or []
    if not fields and order.get("order-id") != 0:
        raise SpecViolation(f"{where}: an unsorted order (no fields) must have order-id 0")
    if fields and order.get("order-id") == 0:
        raise SpecViolation(f"{where}: order-id 0 is reserved for the unsorted order")
    for field in fields:
        source, transform = field.get("source-id"), field.get("transform")
        source_type, _ = schema.types.get(source, (None, ()))
        problem = transform_problem(transform, source_type if checked else None)
        if problem is None and checked:
            problem = _bound_problem(source, source_type, (), transform, "sort")
        if problem is None and str(field.get("direction")).lower() not in _DIRECTIONS:
            problem = f"direction {field.get('direction')!r} is not asc or desc"
        if problem is None and str(field.get("null-order")).lower() not in _NULL_ORDERS:
            problem = f"null-order {field.get('null-order')!r} is not nulls-first or nulls-last"
        if problem is not None:
            raise SpecViolation(f"{where}, field on source-id {source}: {problem}")


def _bound_problem(source: Any, source_type: Any, parents: tuple[str, ...], transform: Any, what: str) -> str | None:
    """``PartitionSpec``/``SortOrder.checkCompatibility``: what a checked bind refuses beyond the transform."""
    if source_type is None:
        return f"source-id {source} is not a column of the current schema"
    if isinstance(source_type, dict):
        return f"cannot {what} by the non-primitive column {source} ({source_type.get('type')})"
    if what == "partition" and any(p != "struct" for p in parents):
        return f"source-id {source} is inside a list or map: a partition source may be nested in structs only"
    return None


def _snapshot_refs(doc: dict[str, Any]) -> None:
    """``TableMetadata.validateRefs`` and the parser's current snapshot: every ref names a known snapshot."""
    ids = {s.get("snapshot-id") for s in doc.get("snapshots") or [] if isinstance(s, dict)}
    current = doc.get("current-snapshot-id")
    if current is not None and current != -1 and current not in ids:
        raise SpecViolation(f"current-snapshot-id {current} names no snapshot")
    for name, ref in (doc.get("refs") or {}).items():
        sid = ref.get("snapshot-id") if isinstance(ref, dict) else None
        if sid not in ids:
            raise SpecViolation(f"ref {name!r} names snapshot {sid}, which the table does not have")
