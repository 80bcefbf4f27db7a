"""Schema, spec and sort-order ids assigned as Iceberg Java's ``TableMetadata.Builder`` assigns them.

pyiceberg appends an added schema, spec or sort order under the id the client sent, so an ``add-schema``
with a taken ``schema-id`` (pyiceberg's own client sends 0) produced two schemas with one id, which the
catalog then refused (issue #40). Java never trusts the sent id: ``reuseOrCreateNewSchemaId`` (and its spec
and sort-order siblings) reuse the id of an identical one already there, else take one past the highest,
and ``-1`` in ``set-current-schema``/``set-default-spec``/``set-default-sort-order`` means the one last
added in this commit. The same is done here, over pyiceberg's copy-on-write metadata. And where Java's
builder ignores a removal of something the table does not have (a property, snapshot, statistics file,
spec or schema), pyiceberg refuses the commit: ``known_only`` keeps Java's behaviour.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER_ID, SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSortOrderUpdate,
    RemovePartitionSpecsUpdate,
    RemovePartitionStatisticsUpdate,
    RemovePropertiesUpdate,
    RemoveSchemasUpdate,
    RemoveSnapshotsUpdate,
    RemoveStatisticsUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSortOrderUpdate,
    SetDefaultSpecUpdate,
    TableUpdate,
    _TableMetadataUpdateContext,
)

__all__ = ["HANDLED", "apply", "known_only"]

LAST_ADDED = -1
INITIAL_SPEC_ID = 0
INITIAL_SORT_ORDER_ID = 1
HANDLED = (
    AddSchemaUpdate,
    AddPartitionSpecUpdate,
    AddSortOrderUpdate,
    SetCurrentSchemaUpdate,
    SetDefaultSpecUpdate,
    SetDefaultSortOrderUpdate,
)


def _last_added(context: _TableMetadataUpdateContext) -> dict[str, int | None]:
    """The builder's ``lastAddedSchemaId``/``SpecId``/``OrderId`` for this commit, kept on its context."""
    state: dict[str, int | None] | None = getattr(context, "_lakesession_last_added", None)
    if state is None:
        state = {"schema": None, "spec": None, "order": None}
        context._lakesession_last_added = state  # type: ignore[attr-defined]
    return state


def _added_ids(context: _TableMetadataUpdateContext, kind: type[Any], attr: str, id_attr: str) -> set[int]:
    return {getattr(getattr(u, attr), id_attr) for u in context._updates if isinstance(u, kind)}


def apply(update: TableUpdate, metadata: TableMetadata, context: _TableMetadataUpdateContext) -> TableMetadata:
    """Apply one of the ``HANDLED`` updates as Java's builder does; ValueError for an invalid one."""
    last = _last_added(context)
    if isinstance(update, AddSchemaUpdate):
        return _add_schema(update.schema_, metadata, context, last)
    if isinstance(update, AddPartitionSpecUpdate):
        return _add_spec(update.spec, metadata, context, last)
    if isinstance(update, AddSortOrderUpdate):
        return _add_order(update.sort_order, metadata, context, last)
    if isinstance(update, SetCurrentSchemaUpdate):
        sid = _resolve(update.schema_id, last["schema"], "schema")
        if sid == metadata.current_schema_id:
            return metadata
        if metadata.schema_by_id(sid) is None:
            raise ValueError(f"Cannot set current schema to unknown schema: {sid}")
        context.add_update(SetCurrentSchemaUpdate.model_validate({"schema-id": sid}))
        return metadata.model_copy(update={"current_schema_id": sid})
    if isinstance(update, SetDefaultSpecUpdate):
        spec_id = _resolve(update.spec_id, last["spec"], "spec")
        if spec_id == metadata.default_spec_id:
            return metadata
        if all(s.spec_id != spec_id for s in metadata.partition_specs):
            raise ValueError(f"Cannot set default partition spec to unknown spec: {spec_id}")
        context.add_update(SetDefaultSpecUpdate.model_validate({"spec-id": spec_id}))
        return metadata.model_copy(update={"default_spec_id": spec_id})
    assert isinstance(update, SetDefaultSortOrderUpdate)
    order_id = _resolve(update.sort_order_id, last["order"], "sort order")
    if order_id == metadata.default_sort_order_id:
        return metadata
    if metadata.sort_order_by_id(order_id) is None:
        raise ValueError(f"Cannot set default sort order to unknown sort order: {order_id}")
    context.add_update(SetDefaultSortOrderUpdate.model_validate({"sort-order-id": order_id}))
    return metadata.model_copy(update={"default_sort_order_id": order_id})


def _resolve(requested: int, last_added: int | None, what: str) -> int:
    if requested != LAST_ADDED:
        return requested
    if last_added is None:
        raise ValueError(f"Cannot set last added {what}: no {what} has been added")
    return last_added


def _same_schema(a: Schema, b: Schema) -> bool:
    """Java's ``Schema.sameSchema``: the same struct (ids, names, types, docs, defaults) and identifier fields."""
    return a.as_struct() == b.as_struct() and set(a.identifier_field_ids) == set(b.identifier_field_ids)


def _add_schema(
    schema: Schema, metadata: TableMetadata, context: _TableMetadataUpdateContext, last: dict[str, int | None]
) -> TableMetadata:
    """``addSchemaInternal`` with ``reuseOrCreateNewSchemaId``."""
    new_last_column_id = max(metadata.last_column_id, schema.highest_field_id)
    new_id = metadata.current_schema_id
    found = False
    for existing in metadata.schemas:
        if _same_schema(existing, schema):
            new_id, found = existing.schema_id, True
            break
        if existing.schema_id >= new_id:
            new_id = existing.schema_id + 1
    if found and new_last_column_id == metadata.last_column_id:
        added_now = _added_ids(context, AddSchemaUpdate, "schema_", "schema_id")
        last["schema"] = new_id if last["schema"] is not None and new_id in added_now else None
        return metadata
    renumbered = schema if schema.schema_id == new_id else schema.model_copy(update={"schema_id": new_id})
    updates: dict[str, Any] = {"last_column_id": new_last_column_id}
    if not found:
        updates["schemas"] = [*metadata.schemas, renumbered]
    context.add_update(AddSchemaUpdate(schema=renumbered))
    last["schema"] = new_id
    return metadata.model_copy(update=updates)


def _compatible(a: PartitionSpec, b: PartitionSpec) -> bool:
    """Java's ``PartitionSpec.compatibleWith``: the same source, transform and name, field by field."""
    return len(a.fields) == len(b.fields) and all(
        (x.source_id, str(x.transform), x.name) == (y.source_id, str(y.transform), y.name)
        for x, y in zip(a.fields, b.fields, strict=True)
    )


def _add_spec(
    spec: PartitionSpec, metadata: TableMetadata, context: _TableMetadataUpdateContext, last: dict[str, int | None]
) -> TableMetadata:
    """``addPartitionSpecInternal`` with ``reuseOrCreateNewSpecId``; field ids kept (``freshSpec``)."""
    new_id = INITIAL_SPEC_ID
    for existing in metadata.partition_specs:
        if _compatible(spec, existing):
            added_now = _added_ids(context, AddPartitionSpecUpdate, "spec", "spec_id")
            last["spec"] = existing.spec_id if last["spec"] is not None and last["spec"] in added_now else None
            return metadata
        if new_id <= existing.spec_id:
            new_id = existing.spec_id + 1
    spec.check_compatible(metadata.schema())
    if metadata.format_version == 1 and [f.field_id for f in spec.fields] != list(range(1000, 1000 + len(spec.fields))):
        raise ValueError(f"Spec does not use sequential IDs that are required in v1: {spec}")
    renumbered = PartitionSpec(*spec.fields, spec_id=new_id)
    last_partition_id = max(
        [f.field_id for f in spec.fields]
        + [metadata.last_partition_id if metadata.last_partition_id is not None else 999]
    )
    context.add_update(AddPartitionSpecUpdate(spec=renumbered))
    last["spec"] = new_id
    return metadata.model_copy(
        update={"partition_specs": [*metadata.partition_specs, renumbered], "last_partition_id": last_partition_id}
    )


def _add_order(
    order: SortOrder, metadata: TableMetadata, context: _TableMetadataUpdateContext, last: dict[str, int | None]
) -> TableMetadata:
    """``addSortOrderInternal`` with ``reuseOrCreateNewSortOrderId`` (an unsorted order is always id 0)."""
    new_id = UNSORTED_SORT_ORDER_ID if not order.fields else INITIAL_SORT_ORDER_ID
    found = False
    if order.fields:
        for existing in metadata.sort_orders:
            if existing.fields == order.fields:
                new_id, found = existing.order_id, True
                break
            if new_id <= existing.order_id:
                new_id = existing.order_id + 1
    else:
        found = metadata.sort_order_by_id(UNSORTED_SORT_ORDER_ID) is not None
    if found:
        added_now = _added_ids(context, AddSortOrderUpdate, "sort_order", "order_id")
        last["order"] = new_id if last["order"] is not None and last["order"] in added_now else None
        return metadata
    order.check_compatible(metadata.schema())
    renumbered = SortOrder(*order.fields, order_id=new_id)
    context.add_update(AddSortOrderUpdate.model_validate({"sort-order": renumbered}))
    last["order"] = new_id
    return metadata.model_copy(update={"sort_orders": [*metadata.sort_orders, renumbered]})


def known_only(update: TableUpdate, metadata: TableMetadata) -> TableUpdate | None:
    """A removal narrowed to what the table has, as Java's ``removeProperties``/``removeSnapshots``/
    ``removeStatistics``/``removeSpecs``/``removeSchemas`` filter it; None when nothing is left to remove."""
    if isinstance(update, RemovePropertiesUpdate):
        keys = [k for k in update.removals if k in metadata.properties]
        return RemovePropertiesUpdate(removals=keys) if keys else None
    if isinstance(update, RemoveSnapshotsUpdate):
        known = {s.snapshot_id for s in metadata.snapshots}
        ids = [i for i in update.snapshot_ids if i in known]
        return RemoveSnapshotsUpdate.model_validate({"snapshot-ids": ids}) if ids else None
    if isinstance(update, RemoveStatisticsUpdate):
        return update if any(s.snapshot_id == update.snapshot_id for s in metadata.statistics) else None
    if isinstance(update, RemovePartitionStatisticsUpdate):
        return update if any(s.snapshot_id == update.snapshot_id for s in metadata.partition_statistics) else None
    if isinstance(update, RemovePartitionSpecsUpdate):
        if metadata.default_spec_id in update.spec_ids:
            raise ValueError("Cannot remove the default partition spec")
        spec_ids = [i for i in update.spec_ids if any(s.spec_id == i for s in metadata.partition_specs)]
        return RemovePartitionSpecsUpdate.model_validate({"spec-ids": spec_ids}) if spec_ids else None
    if isinstance(update, RemoveSchemasUpdate):
        if metadata.current_schema_id in update.schema_ids:
            raise ValueError("Cannot remove the current schema")
        schema_ids = [i for i in update.schema_ids if metadata.schema_by_id(i) is not None]
        return RemoveSchemasUpdate.model_validate({"schema-ids": schema_ids}) if schema_ids else None
    return update
