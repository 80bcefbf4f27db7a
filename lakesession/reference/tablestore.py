"""Table state: pyiceberg's SqlCatalog for writes, a fast path for loads.

Loads never parse table metadata with pydantic: the metadata file's bytes are
immutable per location, so they are cached by location and spliced into the
``LoadTableResult`` as they are. Commits go through SqlCatalog's optimistic
``commit_table`` (requirements and updates applied by pyiceberg).
"""

from __future__ import annotations

import gzip
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog.sql import IcebergTables, SqlCatalog
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError, ValidationError
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.table.update import AssertCreate, TableRequirement, TableUpdate
from sqlalchemy import String, and_, bindparam, insert, or_, select
from sqlalchemy.exc import IntegrityError

from . import nskeys, store
from .errors import BadRequest, CommitFailed, Conflict, NoSuchTable
from .keptread import KeptRead

logger = logging.getLogger(__name__)

Namespace = tuple[str, ...]

# Updates that change what data a table holds need TABLE_WRITE_DATA; the rest are metadata-only.
DATA_ACTIONS = frozenset({"add-snapshot", "remove-snapshots", "set-snapshot-ref", "remove-snapshot-ref"})


@dataclass(frozen=True)
class _Ident:
    """The one thing SqlCatalog.commit_table asks of its ``table`` argument."""

    identifier: tuple[str, ...]

    def name(self) -> tuple[str, ...]:
        return self.identifier


class MetadataCache:
    """Immutable metadata-file bytes by location, bounded by total size."""

    def __init__(self, max_bytes: int = 256 * 1024 * 1024):
        self.max_bytes = max_bytes
        self._items: OrderedDict[str, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def get(self, location: str, properties: dict[str, str], ios: Any = None) -> bytes:
        """The file's bytes (validated, compact JSON); ``ios`` (a ``FileIOCache``) reuses FileIOs."""
        with self._lock:
            hit = self._items.get(location)
            if hit is not None:
                self._items.move_to_end(location)
                return hit
        io = ios.get(properties, location) if ios is not None else load_file_io(properties, location)
        with io.new_input(location).open() as f:
            raw = f.read()
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        raw = json.dumps(json.loads(raw), separators=(",", ":")).encode()  # validate once, compact
        self.put(location, raw)
        return raw

    def put(self, location: str, raw: bytes) -> None:
        """Remember a file's bytes (the catalog's own writes: compact JSON, exactly what it wrote)."""
        with self._lock:
            if location not in self._items:
                self._items[location] = raw
                self._size += len(raw)
                while self._size > self.max_bytes and len(self._items) > 1:
                    _, old = self._items.popitem(last=False)
                    self._size -= len(old)


class TableStore:
    def __init__(self, catalog: SqlCatalog, cache: MetadataCache | None = None):
        self.catalog = catalog
        self.cache = cache or getattr(catalog, "metadata_cache", None) or MetadataCache()
        self._ios = getattr(catalog, "file_ios", None)
        self._locations: dict[str, str] = {}
        # one commit per table at a time in this process: a commit that lost the race then fails its
        # requirements at once (409) instead of writing a metadata file the database would refuse
        self._commit_locks = tuple(threading.Lock() for _ in range(64))
        self._location_read: KeptRead | None = None

    def remember_location(self, metadata_location: str, location: str) -> None:
        """Record which table location a metadata file describes (written once per new metadata file)."""
        if self._locations.get(metadata_location) == location:
            return
        self._locations[metadata_location] = location
        try:
            with self.catalog.engine.begin() as conn:
                conn.execute(
                    insert(store.table_locations).values(metadata_location=metadata_location, location=location)
                )
        except IntegrityError:
            pass

    def table_location(self, ns: Namespace, name: str) -> str:
        """The table's base location, without reading its metadata file (after the first time ever)."""
        meta = self.metadata_location(ns, name)
        if meta is None:
            raise NoSuchTable(f"Table does not exist: {nskeys.path_text((*ns, name))}")
        return self.location_of(meta)

    def location_of(self, meta: str) -> str:
        """The table location a metadata file describes (memory, then the database, then the file once)."""
        hit = self._locations.get(meta)
        if hit is not None:
            return hit
        with self.catalog.engine.connect() as conn:
            row = conn.execute(
                select(store.table_locations.c.location).where(store.table_locations.c.metadata_location == meta)
            ).first()
        if row is not None:
            self._locations[meta] = row[0]
            return row[0]
        location = json.loads(self.cache.get(meta, self.catalog.properties, self._ios))[
            "location"
        ]  # registered elsewhere
        self.remember_location(meta, location)
        return location

    @property
    def _t(self) -> Any:
        return IcebergTables.__table__

    def metadata_location(self, ns: Namespace, name: str) -> str | None:
        """The table's current metadata file (every load and commit asks: a kept read, see ``keptread``)."""
        read = self._location_read
        if read is None or read.engine is not self.catalog.engine:
            t = self._t
            statement = select(t.c.metadata_location).where(
                self._in(None), t.c.table_name == bindparam("name", type_=String)
            )
            read = self._location_read = KeptRead(self.catalog.engine, statement)
        row = read.first(ns=nskeys.key(ns), name=name)
        return row[0] if row else None

    def _in(self, ns: Namespace | None) -> Any:
        """Tables (not pyiceberg views) of namespace ``ns`` in this catalog; ``None``: the namespace is a bound
        parameter ``ns`` (a statement compiled once, ``metadata_location``)."""
        t = self._t
        namespace = bindparam("ns", type_=String) if ns is None else nskeys.key(ns)
        return and_(
            t.c.catalog_name == self.catalog.name,
            t.c.table_namespace == namespace,
            or_(t.c.iceberg_type == "TABLE", t.c.iceberg_type.is_(None)),
        )

    def current_locations(self) -> list[tuple[Namespace, str, str]]:
        """(namespace, name, location) of every table whose current metadata location is known."""
        t, loc = self._t, store.table_locations
        q = (
            select(t.c.table_namespace, t.c.table_name, loc.c.location)
            .join(loc, loc.c.metadata_location == t.c.metadata_location)
            .where(t.c.catalog_name == self.catalog.name)
        )
        with self.catalog.engine.connect() as conn:
            return [(nskeys.from_key(r[0]), r[1], r[2]) for r in conn.execute(q).all()]

    def names(self, ns: Namespace) -> list[str]:
        with self.catalog.engine.connect() as conn:
            rows = conn.execute(select(self._t.c.table_name).where(self._in(ns))).all()
        return sorted(r[0] for r in rows)

    def view_exists(self, ns: Namespace, name: str) -> bool:
        v = store.views
        with self.catalog.engine.connect() as conn:
            return (
                conn.execute(
                    select(v.c.name).where(
                        and_(v.c.catalog_name == self.catalog.name, v.c.namespace == nskeys.key(ns), v.c.name == name)
                    )
                ).first()
                is not None
            )

    def require_free(self, ns: Namespace, name: str) -> None:
        if self.metadata_location(ns, name) is not None:
            raise Conflict(f"Table already exists: {nskeys.path_text((*ns, name))}")
        if self.view_exists(ns, name):
            raise Conflict(f"View with same name already exists: {nskeys.path_text((*ns, name))}")

    def load_raw(self, ns: Namespace, name: str) -> tuple[str, bytes]:
        loc = self.metadata_location(ns, name)
        if loc is None:
            raise NoSuchTable(f"Table does not exist: {nskeys.path_text((*ns, name))}")
        return loc, self.cache.get(loc, self.catalog.properties, self._ios)

    def commit(
        self, ns: Namespace, name: str, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> tuple[str, bytes]:
        ident = (*ns, name)
        current = self.metadata_location(ns, name)
        exists = current is not None
        creating = any(isinstance(r, AssertCreate) for r in requirements)
        if not exists and not creating:
            raise NoSuchTable(f"Table does not exist: {nskeys.path_text(ident)}")
        if not exists and self.view_exists(ns, name):
            raise Conflict(f"View with same name already exists: {nskeys.path_text(ident)}")
        parsed = getattr(self.catalog, "metadata", None)  # CachingSqlCatalog: parsed metadata by location
        try:
            if current is not None and parsed is not None:
                # requirements already failing against the committed state: 409 without queueing for the lock
                for requirement in requirements:
                    requirement.validate(parsed(current))
            with self._commit_locks[hash(ident) % len(self._commit_locks)]:
                resp = self.catalog.commit_table(_Ident(nskeys.sql_ident(ns, name)), requirements, updates)  # type: ignore[arg-type]
            self.remember_location(resp.metadata_location, resp.metadata.location)
        except CommitFailedException as e:
            raise CommitFailed(str(e)) from None
        except TableAlreadyExistsError as e:
            raise Conflict(str(e)) from None
        except NoSuchTableError as e:
            raise NoSuchTable(str(e)) from None
        except (ValueError, TypeError, KeyError, ValidationError) as e:
            raise BadRequest(f"Invalid table update: {e}") from None
        return resp.metadata_location, self.cache.get(resp.metadata_location, self.catalog.properties, self._ios)

    def purge(self, ns: Namespace, name: str, prefixes: set[str]) -> int:
        """Drop the table and delete its files — only those inside ``prefixes`` (what it owns).

        pyiceberg's ``purge_table`` deletes every file the metadata names, and a snapshot may
        name any file (a forged manifest listing another table's data): with the catalog's own
        keys that would delete another table's data. Returns how many files were left alone."""
        ident = (*ns, name)
        table = self.catalog.load_table(nskeys.sql_ident(ns, name))
        self.catalog.drop_table(nskeys.sql_ident(ns, name))
        io = load_file_io(self.catalog.properties, table.metadata_location)
        metadata = table.metadata
        skipped = 0

        def inside(path: str) -> bool:
            return any(path.startswith(p) for p in prefixes)

        def delete(path: str) -> None:
            nonlocal skipped
            if not inside(path):
                skipped += 1
                return
            _delete_quietly(io, path)

        manifest_lists = {s.manifest_list for s in metadata.snapshots}
        manifests: dict[str, Any] = {}
        for snapshot in metadata.snapshots:
            if not inside(snapshot.manifest_list):
                continue  # never follow a list the table does not own
            for manifest in snapshot.manifests(io):
                manifests.setdefault(manifest.manifest_path, manifest)
        data_files: set[str] = set()
        for path, manifest in manifests.items():
            if inside(path):
                data_files |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=False)}
        for path in (*data_files, *manifests, *manifest_lists, *(m.metadata_file for m in metadata.metadata_log)):
            delete(path)
        delete(table.metadata_location)
        if skipped:
            logger.warning(
                "purge of %s kept %d file(s) outside the table's own storage", nskeys.path_text(ident), skipped
            )
        return skipped


def _delete_quietly(io: FileIO, path: str) -> None:
    try:
        io.delete(path)
    except OSError:
        logger.warning("purge: could not delete %s", path)


def filter_refs(raw: bytes) -> bytes:
    """``snapshots=refs``: keep only snapshots that a branch or tag points at."""
    meta = json.loads(raw)
    keep = {r.get("snapshot-id") for r in (meta.get("refs") or {}).values()}
    if meta.get("current-snapshot-id") not in (None, -1):
        keep.add(meta["current-snapshot-id"])
    meta["snapshots"] = [s for s in meta.get("snapshots") or [] if s.get("snapshot-id") in keep]
    return json.dumps(meta, separators=(",", ":")).encode()


def load_result(
    metadata_location: str | None,
    raw: bytes,
    config: dict[str, str] | None = None,
    storage_credentials: list[dict[str, Any]] | None = None,
) -> bytes:
    """A ``LoadTableResult`` body with the metadata bytes spliced in unparsed."""
    parts = [b"{"]
    if metadata_location is not None:
        parts += [b'"metadata-location":', json.dumps(metadata_location).encode(), b","]
    parts += [b'"metadata":', raw, b',"config":', json.dumps(config or {}).encode()]
    if storage_credentials:
        parts += [b',"storage-credentials":', json.dumps(storage_credentials).encode()]
    parts.append(b"}")
    return b"".join(parts)
