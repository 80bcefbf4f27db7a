"""pyiceberg's SqlCatalog without the per-commit costs that dominated a profile under load.

Profiled with 50 sessions committing to 5 tables (``benchmarks/load.py``), a commit spent most of
its time outside the database: a new S3 filesystem per FileIO (pyiceberg builds a FileIO for every
load and every staged table), re-reading and re-parsing the current metadata file it had just
written, an existence check before each write, and a second read of the new file to answer.
Metadata files are immutable per location, so all of that is cached here; the optimistic commit
itself (``UPDATE … WHERE metadata_location = <current>``) is SqlCatalog's, unchanged.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from contextvars import ContextVar
from datetime import datetime
from typing import Any

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.io import PY_IO_IMPL, S3_RETRY_STRATEGY_IMPL, FileIO, load_file_io
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.serializers import Compressor
from pyiceberg.table import StagedTable, Table
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import TableMetadata, TableMetadataUtil
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    TableRequirement,
    TableUpdate,
    _TableMetadataUpdateContext,
    _update_table_metadata_log,
)
from pyiceberg.typedef import EMPTY_DICT, Identifier, Properties
from pyiceberg.types import IcebergType, ListType, MapType, NestedField, StructType
from pyiceberg.utils.config import Config
from pyiceberg.utils.datetime import datetime_to_millis

from . import formatversion, metadata_rules
from .tablestore import MetadataCache

_MAX_IOS = 64
_CREATING: ContextVar[Schema | None] = ContextVar("_CREATING", default=None)  # the schema a create was sent
_MAX_PARSED_BYTES = 64 * 1024 * 1024  # parsed metadata kept, counted by its JSON size (objects are larger)


class PutObjectFileIO(PyArrowFileIO):
    """PyArrowFileIO whose small S3 writes are one ``PutObject``, not three requests.

    pyarrow's S3 output stream starts a multipart upload when opened, so every metadata file a commit
    writes cost CreateMultipartUpload + UploadPart + CompleteMultipartUpload: three S3 round trips (and,
    with ``serve --s3-emulator``, three requests handled in the catalog's own process). With
    ``allow_delayed_open`` (pyarrow >= 20) the stream waits and sends one PutObject below 5 MB."""

    def _initialize_s3_fs(self, netloc: str | None) -> Any:
        s3fs = super()._initialize_s3_fs(netloc)
        if self.properties.get(S3_RETRY_STRATEGY_IMPL):
            return s3fs  # not among the options the filesystem can be rebuilt from
        rebuild, (options, *_) = s3fs.__reduce__()
        if not isinstance(options, dict) or "allow_delayed_open" not in options:
            return s3fs  # an older pyarrow: multipart it is
        return rebuild({**options, "allow_delayed_open": True})


class FileIOCache:
    """One FileIO per (properties, scheme): building one creates an S3 filesystem (≈ 10 ms of CPU)."""

    def __init__(self) -> None:
        self._ios: dict[tuple[Any, ...], FileIO] = {}
        self._lock = threading.Lock()

    def get(self, properties: Properties, location: str | None) -> FileIO:
        scheme = location.split("://", 1)[0] if location and "://" in location else ""
        key = (scheme, tuple(sorted(properties.items())))
        io = self._ios.get(key)
        if io is None:
            if scheme in ("s3", "s3a", "s3n") and PY_IO_IMPL not in properties:
                io = PutObjectFileIO(dict(properties))
            else:
                io = load_file_io(dict(properties), location)
            with self._lock:
                if len(self._ios) >= _MAX_IOS:
                    self._ios.clear()
                io = self._ios.setdefault(key, io)
        return io


class CachingSqlCatalog(SqlCatalog):
    """SqlCatalog whose metadata reads, parses and FileIOs are cached (metadata files never change)."""

    def __init__(
        self, name: str, *, storage_credentials: Callable[[], dict[str, str]] | None = None, **properties: str
    ):
        # ``storage_credentials``: the catalog's current storage session (``s3.web_identity``), merged into
        # ``properties`` at every use, so each FileIO built from them carries a live session; not while
        # starting (SqlCatalog reads its database settings there, and STS may need this catalog to be serving)
        self._storage_credentials: Callable[[], dict[str, str]] | None = None
        super().__init__(name, **properties)
        self._storage_credentials = storage_credentials
        self.metadata_cache = MetadataCache()
        self.file_ios = FileIOCache()
        self._parsed: OrderedDict[str, tuple[TableMetadata, int]] = OrderedDict()
        self._parsed_bytes = 0
        self._parsed_lock = threading.Lock()
        # pyiceberg reads its config file on every metadata write for this one flag
        self._exclude_none = not Config().get_bool("legacy-current-snapshot-id")

    @property
    def properties(self) -> Properties:
        if self._storage_credentials is None:
            return self._properties
        return {**self._properties, **self._storage_credentials()}

    @properties.setter
    def properties(self, value: Properties) -> None:
        self._properties = value

    def _load_file_io(self, properties: Properties = EMPTY_DICT, location: str | None = None) -> FileIO:
        return self.file_ios.get({**self.properties, **properties}, location)

    def metadata(self, location: str) -> TableMetadata:
        """The parsed metadata at ``location`` (bytes from the shared cache, parsed once)."""
        with self._parsed_lock:
            hit = self._parsed.get(location)
            if hit is not None:
                self._parsed.move_to_end(location)
                return hit[0]
        raw = self.metadata_cache.get(location, self.properties, self.file_ios)
        parsed = TableMetadataUtil.parse_raw(raw.decode())
        self._remember(location, parsed, len(raw))
        return parsed

    def _remember(self, location: str, metadata: TableMetadata, size: int) -> None:
        with self._parsed_lock:
            old = self._parsed.pop(location, None)
            self._parsed_bytes -= old[1] if old else 0
            self._parsed[location] = (metadata, size)
            self._parsed_bytes += size
            while self._parsed_bytes > _MAX_PARSED_BYTES and len(self._parsed) > 1:
                _, (_, dropped) = self._parsed.popitem(last=False)
                self._parsed_bytes -= dropped

    def _convert_orm_to_iceberg(self, orm_table: IcebergTables) -> Table:
        location, namespace, name = orm_table.metadata_location, orm_table.table_namespace, orm_table.table_name
        if not location or not namespace or not name:
            raise NoSuchTableError(f"Table row is incomplete: {namespace}.{name}")
        metadata = self.metadata(location)
        return Table(
            identifier=(*Catalog.identifier_to_tuple(namespace), name),
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(metadata.properties, location),
            catalog=self,
        )

    def create_table(
        self,
        identifier: str | Identifier,
        schema: Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> Table:
        """SqlCatalog's, keeping the fields' v3 defaults (``_write_metadata`` puts them back, see ``with_defaults``)."""
        token = _CREATING.set(schema)
        try:
            return super().create_table(identifier, schema, location, partition_spec, sort_order, properties)
        finally:
            _CREATING.reset(token)

    def _create_staged_table(
        self,
        identifier: str | Identifier,
        schema: Schema,
        location: str | None = None,
        partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
        sort_order: SortOrder = UNSORTED_SORT_ORDER,
        properties: Properties = EMPTY_DICT,
    ) -> StagedTable:
        """MetastoreCatalog's, keeping the fields' v3 defaults (a stage-create's answer)."""
        staged = super()._create_staged_table(identifier, schema, location, partition_spec, sort_order, properties)
        staged.metadata = with_defaults(staged.metadata, schema)
        return staged

    def _update_and_stage_table(
        self,
        current_table: Table | None,
        table_identifier: Identifier,
        requirements: tuple[TableRequirement, ...],
        updates: tuple[TableUpdate, ...],
    ) -> StagedTable:
        """MetastoreCatalog's, with two changes. Updates go through ``formatversion.apply_update`` (pyiceberg's,
        plus format v3: upgrades, row lineage, schema checks). And no deep copy of the whole metadata at the
        end (≈ 4 ms of GIL-holding Python per commit at 300 snapshots, 12 % of the server's GIL time under
        load): every update is copy-on-write (``model_copy(update=...)``) and nothing here mutates metadata,
        so sharing unchanged parts with the (cached, immutable) base is safe. A create (no current table)
        starts from pyiceberg's empty v1 metadata and is validated whole, as pyiceberg does."""
        base = current_table.metadata if current_table is not None else self._empty_table_metadata()
        for requirement in requirements:
            requirement.validate(current_table.metadata if current_table is not None else None)
        context = _TableMetadataUpdateContext()
        metadata = base
        for update in updates:
            metadata = formatversion.apply_update(update, metadata, context)
        if context.has_changes():  # as update_table_metadata does
            if current_table is not None:
                metadata = _update_table_metadata_log(metadata, current_table.metadata_location, base.last_updated_ms)
            if base.last_updated_ms == metadata.last_updated_ms:
                now = datetime_to_millis(datetime.now().astimezone())
                metadata = metadata.model_copy(update={"last_updated_ms": now})
        metadata.spec().check_compatible(metadata.schema())
        metadata.sort_order().check_compatible(metadata.schema())
        if current_table is None:
            metadata = TableMetadataUtil.parse_obj(formatversion.with_row_lineage(metadata).model_dump())
            version = 0
        else:
            version = self._parse_metadata_version(current_table.metadata_location) + 1
        provider = load_location_provider(metadata.location, metadata.properties)
        location = provider.new_table_metadata_file_location(version)
        return StagedTable(
            identifier=table_identifier,
            metadata=metadata,
            metadata_location=location,
            io=self._load_file_io(properties=metadata.properties, location=location),
            catalog=self,
        )

    def _write_metadata(self, metadata: TableMetadata, io: FileIO, metadata_path: str) -> None:  # type: ignore[override]
        """Serialise once; the new file's name is unique (a version and a UUID), so no existence check.
        Nothing Iceberg Java cannot read is ever written (``metadata_rules``: a 400 naming the field)."""
        if (created := _CREATING.get()) is not None:
            metadata = with_defaults(metadata, created)
        metadata = formatversion.with_row_lineage(metadata)
        raw = formatversion.dump(metadata, exclude_none=self._exclude_none)
        metadata_rules.check(raw)
        data = Compressor.get_compressor(metadata_path).bytes_compressor()(raw)
        with io.new_output(metadata_path).create(overwrite=True) as out:
            out.write(data)
        self.metadata_cache.put(metadata_path, raw)
        self._remember(metadata_path, metadata, len(raw))


def with_defaults(metadata: TableMetadata, sent: Schema) -> TableMetadata:
    """A new table's metadata with the ``initial-default``/``write-default`` of the schema it was created from.

    pyiceberg's ``new_table_metadata`` assigns fresh field ids (``_SetFreshIDs``) and rebuilds every field
    without its defaults, so a v3 table created with defaults silently lost them (issue #40); Iceberg Java's
    ``AssignFreshIds`` keeps them. The fresh schema has the sent one's shape, field by field, so the defaults
    are copied across in step."""
    fresh = metadata.schema()
    if not any(f.initial_default is not None or f.write_default is not None for f in sent._lazy_id_to_field.values()):
        return metadata
    restored = Schema(
        *_fields(fresh.as_struct(), sent.as_struct()),
        schema_id=fresh.schema_id,
        identifier_field_ids=fresh.identifier_field_ids,
    )
    schemas = [restored if s.schema_id == fresh.schema_id else s for s in metadata.schemas]
    update: dict[str, Any] = {"schemas": schemas}
    if metadata.format_version == 1:
        update["schema_"] = restored
    return metadata.model_copy(update=update)


def _fields(fresh: StructType, sent: StructType) -> list[NestedField]:
    return [
        NestedField(
            field_id=f.field_id,
            name=f.name,
            field_type=_type(f.field_type, s.field_type),
            required=f.required,
            doc=f.doc,
            initial_default=s.initial_default,
            write_default=s.write_default,
        )
        for f, s in zip(fresh.fields, sent.fields, strict=True)
    ]


def _type(fresh: IcebergType, sent: IcebergType) -> IcebergType:
    if isinstance(fresh, StructType) and isinstance(sent, StructType):
        return StructType(*_fields(fresh, sent))
    if isinstance(fresh, ListType) and isinstance(sent, ListType):
        element = _type(fresh.element_type, sent.element_type)
        return ListType(fresh.element_id, element, fresh.element_required)
    if isinstance(fresh, MapType) and isinstance(sent, MapType):
        key, value = _type(fresh.key_type, sent.key_type), _type(fresh.value_type, sent.value_type)
        return MapType(fresh.key_id, key, fresh.value_id, value, fresh.value_required)
    return fresh
