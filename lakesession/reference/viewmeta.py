"""Iceberg view metadata: the REST request models and the update logic pyiceberg lacks.

``ViewMetadataBuilder`` applies ``CommitViewRequest`` updates the way Iceberg
Java's ``ViewMetadata.Builder`` does (schema and version reuse, ``-1`` meaning
"last added", version-log entries, dialect-drop protection, version expiry),
on pyiceberg's ``ViewMetadata`` models so the output is exactly the spec's JSON.

Every client mistake raises ``BadRequest`` (400); a failed requirement raises
``CommitFailed`` (409).
"""

from __future__ import annotations

import json
import re
import time
import uuid as uuidlib
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, MapType, StructType
from pyiceberg.view.metadata import (
    SQLViewRepresentation,
    ViewHistoryEntry,
    ViewMetadata,
    ViewVersion,
)

from .errors import BadRequest, CommitFailed

SUPPORTED_FORMAT_VERSION = 1
INITIAL_SCHEMA_ID = 0
LAST_ADDED = -1

# Iceberg's ViewProperties
VERSION_HISTORY_SIZE = "version.history.num-entries"
VERSION_HISTORY_SIZE_DEFAULT = 10
REPLACE_DROP_DIALECT_ALLOWED = "replace.drop-dialect.allowed"
WRITE_METADATA_LOCATION = "write.metadata.path"
_JAVA_INT = re.compile(r"[+-]?\d+")


# ---------------------------------------------------------------- request models
class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True)


class TableIdentifier(_Model):
    namespace: list[str]
    name: str


class CreateViewRequest(_Model):
    """The spec's ``CreateViewRequest`` (pyiceberg's model wrongly requires ``location``)."""

    name: str
    location: str | None = None
    schema_: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)


class AssignUUIDUpdate(_Model):
    action: Literal["assign-uuid"]
    uuid: str


class UpgradeFormatVersionUpdate(_Model):
    action: Literal["upgrade-format-version"]
    format_version: int = Field(alias="format-version")


class AddSchemaUpdate(_Model):
    action: Literal["add-schema"]
    schema_: Schema = Field(alias="schema")
    last_column_id: int | None = Field(default=None, alias="last-column-id")  # deprecated; ignored for views


class SetLocationUpdate(_Model):
    action: Literal["set-location"]
    location: str


class SetPropertiesUpdate(_Model):
    action: Literal["set-properties"]
    updates: dict[str, str]


class RemovePropertiesUpdate(_Model):
    action: Literal["remove-properties"]
    removals: list[str]


class AddViewVersionUpdate(_Model):
    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersionUpdate(_Model):
    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUIDUpdate
    | UpgradeFormatVersionUpdate
    | AddSchemaUpdate
    | SetLocationUpdate
    | SetPropertiesUpdate
    | RemovePropertiesUpdate
    | AddViewVersionUpdate
    | SetCurrentViewVersionUpdate,
    Field(discriminator="action"),
]


class AssertViewUUID(_Model):
    type: Literal["assert-view-uuid"]
    uuid: str

    def validate_against(self, base: ViewMetadata) -> None:
        if base.view_uuid != self.uuid:
            raise CommitFailed(
                f"Requirement failed: view UUID does not match: expected {self.uuid} != {base.view_uuid}"
            )


class RenameViewRequest(_Model):
    source: TableIdentifier
    destination: TableIdentifier


class CommitViewRequest(_Model):
    identifier: TableIdentifier | None = None
    requirements: list[AssertViewUUID] = Field(default_factory=list)
    updates: list[ViewUpdate]


# ---------------------------------------------------------------- helpers
def metadata_json(metadata: ViewMetadata) -> str:
    """The metadata as the spec's ``ViewMetadata`` JSON (aliases, no nulls)."""
    return metadata.model_dump_json(by_alias=True, exclude_none=True)


def metadata_dict(metadata: ViewMetadata) -> dict[str, Any]:
    return json.loads(metadata_json(metadata))


def _field_ids(t: Any, out: list[int]) -> None:
    if isinstance(t, StructType):
        for f in t.fields:
            out.append(f.field_id)
            _field_ids(f.field_type, out)
    elif isinstance(t, ListType):
        out.append(t.element_id)
        _field_ids(t.element_type, out)
    elif isinstance(t, MapType):
        out += [t.key_id, t.value_id]
        _field_ids(t.key_type, out)
        _field_ids(t.value_type, out)


def check_schema(schema: Schema) -> None:
    ids: list[int] = []
    _field_ids(schema.as_struct(), ids)
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise BadRequest(f"Invalid schema: duplicate field ids {dupes}")


def _same_schema(a: Schema, b: Schema) -> bool:
    return list(a.fields) == list(b.fields) and set(a.identifier_field_ids) == set(b.identifier_field_ids)


def _same_version(a: ViewVersion, b: ViewVersion) -> bool:
    """Equal ignoring version id and timestamp (Iceberg's ``sameViewVersion``)."""
    return (
        a.summary == b.summary
        and a.representations == b.representations
        and a.default_catalog == b.default_catalog
        and tuple(a.default_namespace) == tuple(b.default_namespace)
        and a.schema_id == b.schema_id
    )


def _dialects(version: ViewVersion) -> set[str]:
    return {r.root.dialect.lower() for r in version.representations if isinstance(r.root, SQLViewRepresentation)}


def _bool_prop(props: dict[str, str], key: str) -> bool:
    """Java's ``Boolean.parseBoolean`` (``PropertyUtil.propertyAsBoolean``): "true" in any case, no spaces."""
    return props.get(key, "false").lower() == "true"


def _java_int(text: str) -> int | None:
    """Java's ``Integer.parseInt`` (``PropertyUtil.propertyAsInt``): a sign, digits, within an int; else None."""
    if _JAVA_INT.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -(2**31) <= value < 2**31 else None


# ---------------------------------------------------------------- builder
class ViewMetadataBuilder:
    """Mutable view metadata; ``changes`` counts the updates that changed something."""

    def __init__(self, base: ViewMetadata | None = None):
        self.base = base
        self.uuid: str | None = base.view_uuid if base else None
        self.format_version = base.format_version if base else SUPPORTED_FORMAT_VERSION
        self.location: str | None = base.location if base else None
        self.schemas: list[Schema] = list(base.schemas) if base else []
        self.versions: list[ViewVersion] = list(base.versions) if base else []
        self.history: list[ViewHistoryEntry] = list(base.version_log) if base else []
        self.properties: dict[str, str] = dict(base.properties) if base else {}
        self.current_version_id: int | None = base.current_version_id if base else None
        self.previous_version = self._version(base.current_version_id) if base else None
        self.changes = 0
        self.added_version_ids: list[int] = []
        self.last_added_schema_id: int | None = None
        self.last_added_version_id: int | None = None
        self.history_entry: ViewHistoryEntry | None = None

    # -- lookups
    def _version(self, version_id: int) -> ViewVersion | None:
        return next((v for v in self.versions if v.version_id == version_id), None)

    def _schema_ids(self) -> set[int]:
        return {s.schema_id for s in self.schemas}

    # -- updates
    def apply(self, update: Any) -> None:
        if isinstance(update, AssignUUIDUpdate):
            self.assign_uuid(update.uuid)
        elif isinstance(update, UpgradeFormatVersionUpdate):
            self.upgrade_format_version(update.format_version)
        elif isinstance(update, AddSchemaUpdate):
            self.add_schema(update.schema_)
        elif isinstance(update, SetLocationUpdate):
            self.set_location(update.location)
        elif isinstance(update, SetPropertiesUpdate):
            self.set_properties(update.updates)
        elif isinstance(update, RemovePropertiesUpdate):
            self.remove_properties(update.removals)
        elif isinstance(update, AddViewVersionUpdate):
            self.add_version(update.view_version)
        elif isinstance(update, SetCurrentViewVersionUpdate):
            self.set_current_version_id(update.view_version_id)
        else:  # pragma: no cover - the request model admits nothing else
            raise BadRequest(f"Unsupported view update: {type(update).__name__}")

    def assign_uuid(self, new_uuid: str) -> None:
        if not new_uuid:
            raise BadRequest("Cannot set uuid to an empty value")
        if self.uuid is not None and new_uuid != self.uuid:
            raise BadRequest("Cannot reassign uuid")
        if new_uuid != self.uuid:
            self.uuid = new_uuid
            self.changes += 1

    def upgrade_format_version(self, version: int) -> None:
        if version < self.format_version:
            raise BadRequest(f"Cannot downgrade v{self.format_version} view to v{version}")
        if version > SUPPORTED_FORMAT_VERSION:
            raise BadRequest(f"Unsupported format version: {version}")
        if version != self.format_version:
            self.format_version = version
            self.changes += 1

    def set_location(self, location: str) -> None:
        location = location.rstrip("/")
        if not location:
            raise BadRequest("Invalid location: empty")
        if location != self.location:
            self.location = location
            self.changes += 1

    def set_properties(self, updates: dict[str, str]) -> None:
        if updates:
            self.properties.update(updates)
            self.changes += 1

    def remove_properties(self, removals: list[str]) -> None:
        if removals:
            for k in removals:
                self.properties.pop(k, None)
            self.changes += 1

    def add_schema(self, schema: Schema) -> int:
        """Reuse an identical schema's id, else assign the highest id + 1; either becomes "last added"."""
        check_schema(schema)
        new_id = INITIAL_SCHEMA_ID
        for s in self.schemas:
            if _same_schema(s, schema):
                self.last_added_schema_id = s.schema_id
                return s.schema_id
            new_id = max(new_id, s.schema_id + 1)
        self.schemas.append(schema.model_copy(update={"schema_id": new_id}))
        self.last_added_schema_id = new_id
        self.changes += 1
        return new_id

    def add_version(self, version: ViewVersion) -> int:
        """Reuse an identical version's id, else add it under an unused id; either becomes "last added"."""
        if version.schema_id == LAST_ADDED:
            if self.last_added_schema_id is None:
                raise BadRequest("Cannot set last added schema: no schema has been added")
            version = version.model_copy(update={"schema_id": self.last_added_schema_id})
        if version.schema_id not in self._schema_ids():
            raise BadRequest(f"Cannot add version with unknown schema: {version.schema_id}")
        seen: set[str] = set()
        for r in version.representations:
            if isinstance(r.root, SQLViewRepresentation):
                d = r.root.dialect.lower()
                if d in seen:
                    raise BadRequest(f"Invalid view version: Cannot add multiple queries for dialect {d}")
                seen.add(d)
        new_id = version.version_id
        for v in self.versions:
            if _same_version(v, version):
                self.last_added_version_id = v.version_id
                return v.version_id
            if v.version_id >= new_id:
                new_id = v.version_id + 1
        new_id = max(new_id, 1)
        self.versions.append(version.model_copy(update={"version_id": new_id}))
        self.added_version_ids.append(new_id)
        self.last_added_version_id = new_id
        self.changes += 1
        return new_id

    def set_current_version_id(self, version_id: int) -> None:
        if version_id == LAST_ADDED:
            if self.last_added_version_id is None:
                raise BadRequest("Cannot set last version id: no view version has been added")
            version_id = self.last_added_version_id
        if version_id == self.current_version_id:
            return
        version = self._version(version_id)
        if version is None:
            raise BadRequest(f"Cannot set current version to unknown version: {version_id}")
        self.current_version_id = version_id
        ts = version.timestamp_ms if version_id in self.added_version_ids else int(time.time() * 1000)
        # by alias: pyiceberg declares these models with hyphenated aliases (mypy sees only those)
        self.history_entry = ViewHistoryEntry.model_validate({"timestamp-ms": ts, "version-id": version_id})
        self.changes += 1

    # -- result
    def build(self) -> ViewMetadata:
        if not self.location:
            raise BadRequest("Invalid location: null")
        if not self.versions or self.current_version_id is None:
            raise BadRequest("Invalid view: no versions were added")
        current = self._version(self.current_version_id)
        assert current is not None
        history = self.history + ([self.history_entry] if self.history_entry else [])

        drop_allowed = _bool_prop(self.properties, REPLACE_DROP_DIALECT_ALLOWED)
        if self.previous_version is not None and not drop_allowed:
            before, after = _dialects(self.previous_version), _dialects(current)
            if not before <= after:
                raise BadRequest(
                    f"Cannot replace view due to loss of view dialects ({REPLACE_DROP_DIALECT_ALLOWED}=false): "
                    f"previous dialects {sorted(before)}, new dialects {sorted(after)}"
                )

        raw_size = self.properties.get(VERSION_HISTORY_SIZE, str(VERSION_HISTORY_SIZE_DEFAULT))
        history_size = _java_int(raw_size)
        if history_size is None:
            raise BadRequest(f"{VERSION_HISTORY_SIZE} must be an int (Java's Integer.parseInt) but was {raw_size!r}")
        if history_size <= 0:
            raise BadRequest(f"{VERSION_HISTORY_SIZE} must be positive but was {history_size}")
        keep = max(len({*self.added_version_ids, current.version_id}), history_size)
        versions = self.versions
        if len(versions) > keep:
            # Version ids are assigned sequentially: keep the current version and the newest others.
            others = sorted((v.version_id for v in versions if v.version_id != current.version_id), reverse=True)
            retained = {current.version_id, *others[: keep - 1]}
            versions = [v for v in versions if v.version_id in retained]
            kept_history: list[ViewHistoryEntry] = []
            for entry in history:
                if entry.version_id in retained:
                    kept_history.append(entry)
                else:
                    kept_history.clear()  # drop history past any expired version
            history = kept_history

        return ViewMetadata.model_validate(
            {
                "view-uuid": self.uuid or str(uuidlib.uuid4()),
                "format-version": self.format_version,
                "location": self.location,
                "schemas": self.schemas,
                "current-version-id": current.version_id,
                "versions": versions,
                "version-log": history,
                "properties": self.properties,
            }
        )


def new_view_metadata(req: CreateViewRequest, location: str) -> ViewMetadata:
    """Metadata of a new view: the request's schema (id 0) and view-version (id 1) made current."""
    version = req.view_version
    if not version.representations:
        raise BadRequest("Cannot create view without specifying a query")
    b = ViewMetadataBuilder()
    b.assign_uuid(str(uuidlib.uuid4()))
    b.set_location(location)
    b.set_properties(dict(req.properties))
    schema_id = b.add_schema(req.schema_)
    version_id = b.add_version(version.model_copy(update={"version_id": 1, "schema_id": schema_id}))
    b.set_current_version_id(version_id)
    return b.build()


def apply_commit(base: ViewMetadata, req: CommitViewRequest) -> tuple[ViewMetadata, bool]:
    """Validate requirements against ``base`` and apply the updates; returns (metadata, changed)."""
    for requirement in req.requirements:
        requirement.validate_against(base)
    b = ViewMetadataBuilder(base)
    for update in req.updates:
        b.apply(update)
    if b.changes == 0:
        return base, False
    return b.build(), True
