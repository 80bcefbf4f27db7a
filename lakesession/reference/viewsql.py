"""What a view reads: the tables and views named in its SQL, resolved to this catalog's identifiers.

Used to verify every ``referenced-by`` link: a view may only lead to objects its SQL actually reads.
The rules are the client's too (``lakesession._wire.viewsql``): parsing and resolution live there once.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

from .._wire import viewsql

logger = logging.getLogger(__name__)

Ident = tuple[tuple[str, ...], str]
CACHE_SIZE = 1024
_cache: OrderedDict[tuple[str, str], frozenset[Ident]] = OrderedDict()
_lock = threading.Lock()


def _references(sql: str, dialect: str | None) -> list[list[str]]:
    """The multi-part names ``sql`` reads (CTE names excluded); unparseable SQL reads nothing."""
    import sqlglot

    try:
        return viewsql.references(sql, dialect)
    except sqlglot.errors.SqlglotError as e:
        logger.debug("view SQL does not parse (%s): %s", dialect, e)
        return []


def _current_version(metadata: Any) -> Any:
    current = getattr(metadata, "current_version_id", None)
    return next((v for v in getattr(metadata, "versions", None) or [] if v.version_id == current), None)


def reads(metadata: Any, catalog_name: str) -> set[Ident]:
    """The identifiers (namespace, name) in this catalog that the view's current version reads."""
    version = _current_version(metadata)
    if version is None:
        return set()
    default_ns = tuple(version.default_namespace or ())
    default_cat = getattr(version, "default_catalog", None)
    found: set[Ident] = set()
    for wrapped in version.representations or []:
        rep = getattr(wrapped, "root", wrapped)  # pyiceberg wraps each representation in a RootModel
        sql = getattr(rep, "sql", None)
        if getattr(rep, "type", None) != "sql" or not sql:
            continue
        for parts in _references(sql, getattr(rep, "dialect", None)):
            try:
                ident = viewsql.resolve(parts, default_ns, default_cat, (catalog_name,))
            except viewsql.UnqualifiedReference:
                continue  # names nothing
            if ident is not None:  # None: another catalog's object
                found.add(ident)
    return found


def reads_at(metadata_location: str, metadata: Any, catalog_name: str) -> frozenset[Ident]:
    """``reads``, cached by metadata location (a metadata file never changes): parsing costs
    milliseconds, and a chained read asks on every signed S3 request and credential refresh."""
    key = (metadata_location, catalog_name)
    with _lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit
    found = frozenset(reads(metadata, catalog_name))
    with _lock:
        _cache[key] = found
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return found
