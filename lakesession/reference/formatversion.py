"""Table format versions 1–3 on top of pyiceberg 0.12, which reads v3 metadata but stops short of writing it.

pyiceberg applies every table update the catalog receives (``_apply_table_update``); for v3 it leaves
four gaps, filled here without touching pyiceberg's own registry (the catalog may run inside a user's
process):

- ``upgrade-format-version`` to 3 is refused (its supported version is 2);
- v3 metadata cannot be serialised (``TableMetadataV3.model_dump_json`` raises NotImplementedError);
- row lineage on ``add-snapshot`` (spec, "Row Lineage"): a v3 snapshot must carry ``first-row-id`` at or
  above the table's ``next-row-id`` and an ``added-rows`` count; the table's ``next-row-id`` then moves past
  the rows the snapshot assigned (pyiceberg resets it to null when ``added-rows`` is missing);
- v3-only parts of a schema (nanosecond timestamps, ``unknown``, geo types, non-null defaults) are checked
  against the format version at create time only; Iceberg Java checks every added schema.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV1, TableMetadataV2, TableMetadataV3
from pyiceberg.table.update import (
    AddSchemaUpdate,
    AddSnapshotUpdate,
    TableUpdate,
    UpgradeFormatVersionUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
)
from pyiceberg.typedef import IcebergBaseModel

from . import metadata_builder, metadata_rules

SUPPORTED_FORMAT_VERSIONS = (1, 2, 3)
ROW_LINEAGE_VERSION = 3  # the first format version that tracks row lineage
INITIAL_ROW_ID = 0
_MODELS: dict[int, type[BaseModel]] = {1: TableMetadataV1, 2: TableMetadataV2, 3: TableMetadataV3}


def parse_format_version(version: object) -> int:
    """A ``format-version`` value as sent (int or property string) → a supported version, else ValueError."""
    text = str(version).strip()
    if not text.isdigit() or int(text) not in SUPPORTED_FORMAT_VERSIONS:
        raise ValueError(
            f"Unsupported format-version {version!r}: this catalog creates and upgrades tables to format "
            f"versions {', '.join(map(str, SUPPORTED_FORMAT_VERSIONS))}"
        )
    return int(text)


def apply_update(update: TableUpdate, metadata: TableMetadata, context: _TableMetadataUpdateContext) -> TableMetadata:
    """pyiceberg's ``_apply_table_update`` with the v3 gaps above filled, ids assigned as Iceberg Java's
    builder does (``metadata_builder``), no snapshot from the future; ValueError for an invalid update."""
    if isinstance(update, UpgradeFormatVersionUpdate):
        return _upgrade(update, metadata, context)
    if isinstance(update, AddSchemaUpdate):
        check_schema(update.schema_, metadata.format_version)
    if isinstance(update, metadata_builder.HANDLED):
        return metadata_builder.apply(update, metadata, context)
    if (known := metadata_builder.known_only(update, metadata)) is None:
        return metadata  # Java's builder ignores removing what the table does not have
    update = known
    if isinstance(update, AddSnapshotUpdate):
        now = int(time.time() * 1000)
        if (problem := metadata_rules.future_problem(update.snapshot.timestamp_ms, now)) is not None:
            raise ValueError(f"timestamp-ms of snapshot {update.snapshot.snapshot_id} {problem}")
        if metadata.format_version >= ROW_LINEAGE_VERSION:
            return _add_snapshot_v3(update, metadata, context)
    return _apply_table_update(update, metadata, context)


def _upgrade(
    update: UpgradeFormatVersionUpdate, metadata: TableMetadata, context: _TableMetadataUpdateContext
) -> TableMetadata:
    target, current = parse_format_version(update.format_version), metadata.format_version
    if target < current:
        raise ValueError(f"Cannot downgrade v{current} table to v{target}")
    if target == current:
        return metadata
    fields: dict[str, Any] = {**dict(metadata), "format_version": target}
    if target >= ROW_LINEAGE_VERSION and fields.get("next_row_id") is None:
        fields["next_row_id"] = INITIAL_ROW_ID  # rows written before the upgrade have no row ids
    context.add_update(update)
    # as pyiceberg's own upgrade: the fields carry over, a create commit's later updates fill the rest
    return _MODELS[target].model_construct(**fields)  # type: ignore[return-value]


def _add_snapshot_v3(
    update: AddSnapshotUpdate, metadata: TableMetadata, context: _TableMetadataUpdateContext
) -> TableMetadata:
    snapshot = update.snapshot
    next_row_id = getattr(metadata, "next_row_id", None)
    next_row_id = INITIAL_ROW_ID if next_row_id is None else next_row_id
    if snapshot.first_row_id is None:
        raise ValueError("Cannot add a snapshot to a v3 table without first-row-id (row lineage)")
    if snapshot.added_rows is None or snapshot.added_rows < 0:
        raise ValueError("Cannot add a snapshot to a v3 table without a non-negative added-rows (row lineage)")
    if snapshot.first_row_id < next_row_id:
        raise ValueError(
            f"Cannot add a snapshot, first-row-id is behind table next-row-id: {snapshot.first_row_id} < {next_row_id}"
        )
    if (
        snapshot.parent_snapshot_id is not None
        and snapshot.sequence_number is not None
        and snapshot.sequence_number <= metadata.last_sequence_number  # type: ignore[union-attr]
    ):  # pyiceberg checks this for v2 only
        raise ValueError(
            f"Cannot add snapshot with sequence number {snapshot.sequence_number} older than last sequence "
            f"number {metadata.last_sequence_number}"  # type: ignore[union-attr]
        )
    updated = _apply_table_update(update, metadata, context)
    # "next-row-id: a long higher than all assigned row IDs" (REST spec): past this snapshot's rows
    return updated.model_copy(update={"next_row_id": snapshot.first_row_id + snapshot.added_rows})


def check_schema(schema: Schema, format_version: int) -> None:
    """Types and defaults a format version cannot hold (Iceberg Java's ``Schema.checkCompatibility``)."""
    schema.check_format_version_compatibility(format_version)
    if format_version < 3:
        for field in schema._lazy_id_to_field.values():
            if field.initial_default is not None:
                raise ValueError(
                    f"Invalid initial default for {field.name}: non-null default ({field.initial_default!r}) "
                    f"is not supported until v3. Current format version is: {format_version}"
                )


def with_row_lineage(metadata: TableMetadata) -> TableMetadata:
    """v3 metadata always names its ``next-row-id`` (Iceberg Java refuses v3 metadata without it)."""
    if metadata.format_version < ROW_LINEAGE_VERSION or getattr(metadata, "next_row_id", None) is not None:
        return metadata
    assigned = [s.first_row_id + (s.added_rows or 0) for s in metadata.snapshots if s.first_row_id is not None]
    return metadata.model_copy(update={"next_row_id": max([INITIAL_ROW_ID, *assigned])})


def dump(metadata: TableMetadata, exclude_none: bool = True) -> bytes:
    """The metadata file's JSON, any supported version (pyiceberg's serialiser, minus its v3 refusal)."""
    metadata = with_row_lineage(metadata)
    # TableMetadataV3 overrides model_dump_json only to raise; the base class's is the one v1 and v2 use
    return IcebergBaseModel.model_dump_json(metadata, exclude_none=exclude_none).encode()
