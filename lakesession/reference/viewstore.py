"""View persistence: one row per view in ``ls_views`` (its current metadata location and JSON).

Routes and view security both read views through this module; it never imports routes, so
``viewsecurity`` can check view chains without an import cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyiceberg.catalog.sql import IcebergTables
from pyiceberg.view.metadata import ViewMetadata
from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from . import nskeys, store

if TYPE_CHECKING:
    from .context import Services

Namespace = tuple[str, ...]


def _ns_str(ns: Namespace) -> str:
    """Namespaces as stored: ``nskeys.key`` (levels joined with 0x1F, as in pyiceberg's tables here)."""
    return nskeys.key(ns)


class ViewStore:
    """View rows in ``ls_views``; table names come from pyiceberg's ``iceberg_tables``."""

    def __init__(self, services: Services):
        self.services = services
        self.catalog_name = services.catalog.name
        self.engine = services.catalog.engine

    def _where(self, ns: Namespace, name: str) -> Any:
        v = store.views.c
        return and_(v.catalog_name == self.catalog_name, v.namespace == _ns_str(ns), v.name == name)

    def get(self, ns: Namespace, name: str) -> tuple[str, ViewMetadata] | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                select(store.views.c.metadata_location, store.views.c.metadata_json).where(self._where(ns, name))
            ).first()
        if row is None:
            return None
        return row.metadata_location, ViewMetadata.model_validate_json(row.metadata_json)

    def names(self, ns: Namespace) -> list[str]:
        v = store.views.c
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(v.name)
                .where(and_(v.catalog_name == self.catalog_name, v.namespace == _ns_str(ns)))
                .order_by(v.name)
            ).all()
        return [r[0] for r in rows]

    def table_exists(self, ns: Namespace, name: str) -> bool:
        # Any row of iceberg_tables (whatever its iceberg_type) occupies the identifier.
        t = IcebergTables.__table__
        with self.engine.connect() as conn:
            return (
                conn.execute(
                    select(t.c.table_name)
                    .where(
                        and_(
                            t.c.catalog_name == self.catalog_name,
                            t.c.table_namespace == _ns_str(ns),
                            t.c.table_name == name,
                        )
                    )
                    .limit(1)
                ).first()
                is not None
            )

    def insert(self, ns: Namespace, name: str, location: str, text: str) -> bool:
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(store.views).values(
                        catalog_name=self.catalog_name,
                        namespace=_ns_str(ns),
                        name=name,
                        metadata_location=location,
                        metadata_json=text,
                    )
                )
        except IntegrityError:
            return False
        return True

    def swap(self, ns: Namespace, name: str, expected: str, location: str, text: str) -> bool:
        """Compare-and-swap on the metadata location (a lost race commits nothing)."""
        return self._changed(
            update(store.views)
            .where(and_(self._where(ns, name), store.views.c.metadata_location == expected))
            .values(metadata_location=location, metadata_json=text)
        )

    def delete(self, ns: Namespace, name: str) -> bool:
        return self._changed(delete(store.views).where(self._where(ns, name)))

    def rename(self, src: tuple[Namespace, str], dst: tuple[Namespace, str]) -> bool | None:
        """True if renamed, False if the source vanished, None if the destination is taken."""
        try:
            return self._changed(
                update(store.views).where(self._where(*src)).values(namespace=_ns_str(dst[0]), name=dst[1])
            )
        except IntegrityError:
            return None

    def _changed(self, stmt: Any) -> bool:
        """Run ``stmt``; commit only if it changed exactly one row, so a transaction that changed nothing
        never commits (an ``Idempotency-Key`` outcome stored with the commit must mean a change)."""
        try:
            with self.engine.begin() as conn:
                if conn.execute(stmt).rowcount != 1:
                    raise _NoChange
        except _NoChange:
            return False
        return True


class _NoChange(Exception):
    """Rolls back a write that matched no row."""
