"""What a view reads: the tables and views named in its SQL, resolved to this catalog's identifiers.

The server's own (small) sqlglot walker, used to verify every ``referenced-by`` link: a view
may only lead to objects its SQL actually reads. It never imports the client half (the client
has its own walker in ``lakesession.catalog._chains``); both follow the same rules:

* every SQL representation of the current version is parsed in its dialect (unknown: Spark);
  CTE names, table functions and ``UNNEST`` are not references;
* a one-part name is resolved in the view's ``default-namespace`` (none: unresolvable);
* with three or more parts, a first part equal to the view's ``default-catalog`` or to this
  catalog's name is the catalog and is dropped; any other first part, when the view has a
  ``default-catalog``, names another catalog (not a link into this one);
* otherwise the last part is the name and the rest the namespace.

Names compare exactly (Iceberg REST identifiers are case-sensitive); catalog names do not.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any

logger = logging.getLogger(__name__)

Ident = tuple[tuple[str, ...], str]
CACHE_SIZE = 1024
_cache: OrderedDict[tuple[str, str], frozenset[Ident]] = OrderedDict()
_lock = threading.Lock()


def _dialect(name: str | None) -> str:
    from sqlglot.dialects.dialect import Dialect

    name = (name or "spark").lower()
    try:
        return name if Dialect.get(name) is not None else "spark"
    except Exception:  # an odd dialect string: parse as Spark
        return "spark"


def _references(sql: str, dialect: str | None) -> list[list[str]]:
    """The multi-part names ``sql`` reads (CTE names excluded); unparseable SQL reads nothing."""
    import sqlglot  # here, not at import: the catalog's start (on the way to a first query) needs no SQL parser
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=_dialect(dialect))
    except sqlglot.errors.SqlglotError as e:
        logger.debug("view SQL does not parse (%s): %s", dialect, e)
        return []
    if tree is None:
        return []
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    out: list[list[str]] = []
    for t in tree.find_all(exp.Table):
        if not isinstance(t.this, (exp.Identifier, exp.Dot)):
            continue
        parts = [p.name for p in t.parts]
        if len(parts) == 1 and parts[0].lower() in ctes:
            continue
        out.append(parts)
    return out


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
    known = {catalog_name.lower()} | ({default_cat.lower()} if default_cat else set())
    found: set[Ident] = set()
    for wrapped in version.representations or []:
        rep = getattr(wrapped, "root", wrapped)  # pyiceberg wraps each representation in a RootModel
        sql = getattr(rep, "sql", None)
        if getattr(rep, "type", None) != "sql" or not sql:
            continue
        for parts in _references(sql, getattr(rep, "dialect", None)):
            if len(parts) == 1:
                if default_ns:
                    found.add((default_ns, parts[0]))
                continue
            if len(parts) >= 3 and parts[0].lower() in known:
                parts = parts[1:]
            elif len(parts) >= 3 and default_cat:
                continue  # another catalog's object
            found.add((tuple(parts[:-1]), parts[-1]))
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
