"""Expand the views a query reads into their SQL, each table pinned to a chain-scoped catalog.

Spark resolves an Iceberg view by loading the tables in its SQL as the *invoker*: a DEFINER
view over a table the user may not read directly fails. ``expand`` does what a view-aware
engine does instead: it replaces each view reference with the view's own SQL (recursively,
in the view's dialect, honouring its default catalog and namespace) and rewrites every table
the chain reads to ``<chain catalog>.ns.table``. The caller maps each chain to a catalog whose
loads carry that chain in ``referenced-by`` (the gateway's chain routes), so the catalog
decides — per step, for the right user — and a table authorized through a view is never
loaded into, or cached by, the main catalog.

Statements other than queries (``INSERT … SELECT`` and ``EXPLAIN`` of either included) run unchanged:
a ``CREATE VIEW`` must store what the user wrote, not chain catalog names.

Names resolve as Spark resolves them: one- and two-part names in the current catalog and namespace
(``where``, when the caller knows them), and a name the catalog does not know as written falls back to its
lower-case form (Spark's identifiers are case-insensitive by default; catalogs store what DDL wrote, usually
lower case) unless a table exists under the name as written.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp

from .._wire.enginerules import chain_prefix
from .._wire.viewsql import table_refs as _table_refs
from ._chains import (
    MAX_DEPTH,
    OWNER_PROPERTY,
    ViewChainError,
    ViewId,
    _classify,
    _Client,
    _dotted,
    _message,
    _pick_sql,
    current_version,
)

logger = logging.getLogger("lakesession.catalog")

__all__ = ["Expansion", "expand", "quoted"]

ChainCatalog = Callable[[tuple[ViewId, ...], ViewId], str]
#: () -> (current catalog, current namespace): asked only when a one- or two-part name needs it
Where = Callable[[], tuple[str, tuple[str, ...]]]
#: Spark's EXPLAIN and its modes: the statement after it is expanded like a query
_EXPLAIN = re.compile(r"(?is)^\s*explain(?:\s+(?:extended|codegen|cost|formatted))?\s+")


@dataclass
class Expansion:
    """The query to run, and what was expanded (views, and per chain the tables it reads)."""

    sql: str
    views: list[str] = field(default_factory=list)
    chains: dict[str, list[str]] = field(default_factory=dict)  # "v1 → v2" -> ["ns.t", …]
    definers: list[str] = field(default_factory=list)  # the expanded views that run as their owner


def quoted(parts: list[str] | tuple[str, ...]) -> str:
    """A Spark identifier with every part backquoted (dots and backquotes inside names survive)."""
    return ".".join("`" + p.replace("`", "``") + "`" for p in parts)


def unquoted(name: str) -> tuple[str, ...]:
    """The parts of a Spark multi-part name, backquoted or not (``a.`b.c` `` → ``("a", "b.c")``): the
    inverse of ``quoted``, for what Spark prints, e.g. ``currentDatabase()`` of a level containing '.'."""
    parts: list[str] = []
    cur, i, inside = "", 0, False
    while i < len(name):
        c = name[i]
        if inside and c == "`" and name[i + 1 : i + 2] == "`":
            cur, i = cur + "`", i + 2
            continue
        if c == "`":
            inside = not inside
        elif c == "." and not inside:
            parts.append(cur)
            cur = ""
        else:
            cur += c
        i += 1
    parts.append(cur)
    return tuple(parts)


def _alias(table: exp.Table) -> str:
    return table.alias or table.parts[-1].name


class _Expander:
    def __init__(
        self,
        client: _Client,
        catalog_name: str,
        current_namespace: tuple[str, ...] | None,
        chain_catalog: ChainCatalog,
        max_depth: int,
        where: Where | None = None,
        refuse_unreadable: bool = False,
    ):
        self.client = client
        self.catalog_name = catalog_name
        self.current_namespace = current_namespace
        self._where = where
        self._refuse_unreadable = refuse_unreadable
        self._current: tuple[str, tuple[str, ...]] | None = None
        self.chain_catalog = chain_catalog
        self.max_depth = max_depth
        self.result = Expansion("")
        self.changed = False

    # -- the user's query ------------------------------------------------------------------
    def top_level(self, table: exp.Table) -> ViewId | None:
        """The identifier in this catalog that a reference of the user's query names, if any."""
        parts = [p.name for p in table.parts]
        self.refuse_internal(parts)
        if len(parts) >= 3:
            if parts[0].lower() != self.catalog_name.lower():
                return None  # another catalog
            return tuple(parts[1:-1]), parts[-1]
        if self._where is not None:  # Spark's rules: the current catalog, then its current namespace
            catalog, namespace = self.where()
            if catalog != self.catalog_name:
                return None  # resolved in another catalog
            if len(parts) == 2:
                if parts[0] in (self.catalog_name, "spark_catalog") or parts[0].lower() == "global_temp":
                    return None  # a catalog's root (no views there), or Spark's global temporary views
                return (parts[0],), parts[1]
            return (namespace, parts[0]) if namespace else None
        if len(parts) == 2:
            return (parts[0],), parts[1]
        if self.current_namespace:
            return self.current_namespace, parts[0]
        return None

    def refuse_internal(self, parts: list[str]) -> None:
        """A name of an internal view-chain catalog: ``ViewChainError``."""
        if parts[0].lower().startswith(chain_prefix(self.catalog_name.lower())):
            raise ViewChainError(
                f"{'.'.join(parts)} names an internal view-chain catalog: reference the view "
                f"instead (e.g. {self.catalog_name}.ns.view); tables read through a view are "
                f"not reachable directly."
            )

    def refuse_unreadable(self, ident: ViewId, view_body: Any) -> None:
        """A name refused as a view and as a table: both refusals, not only the table's (Spark asks for a table
        first and stops at its 403, so a view the user may not read was reported as a table lacking a privilege
        of tables). The catalog does not say which of the two exists; the message does not guess."""
        status, table_body = self.client.get("tables", ident, [])
        if status != 403:
            return
        from ..errors import CatalogAccessError

        said = [m for m in (_message(view_body), _message(table_body)) if m]
        raise CatalogAccessError(
            f"Forbidden: {_dotted(ident)} is refused both as a view and as a table: {'; '.join(said) or 'no reason given'}",
            "forbidden",
            "org.apache.iceberg.exceptions.ForbiddenException",
            403,
        )

    def where(self) -> tuple[str, tuple[str, ...]]:
        """The session's current catalog and namespace (asked once per expansion, and only when needed)."""
        if self._current is None:
            assert self._where is not None
            self._current = self._where()
        return self._current

    def load_view(self, ident: ViewId) -> tuple[ViewId, int, Any]:
        """``(identifier, status, body)`` of the view ``ident`` names: as written, else its lower-case form
        (Spark's identifiers are case-insensitive) unless a table goes by the name as written."""
        status, body = self.client.get("views", ident, [])
        lower = (tuple(p.lower() for p in ident[0]), ident[1].lower())
        if status == 200 or lower == ident or self.client.get("tables", ident, [])[0] == 200:
            return ident, status, body
        lower_status, lower_body = self.client.get("views", lower, [])
        return (lower, lower_status, lower_body) if lower_status == 200 else (ident, status, body)

    def query(self, tree: exp.Expr) -> None:
        for table in _table_refs(tree):
            ident = self.top_level(table)
            if ident is None:
                continue
            ident, status, body = self.load_view(ident)
            if status == 403 and self._refuse_unreadable and len(table.parts) > 1:  # one part: maybe a temp view
                self.refuse_unreadable(ident, body)
            if status == 200:
                table.replace(self._subquery(self.view(ident, body, []), table))
            elif len(table.parts) == 2 or (len(table.parts) == 1 and self._where is None):
                # run where it was resolved: this session's catalog (a one-part name Spark resolves itself: it
                # may be one of the session's temporary views, which come first)
                table.replace(self._pinned(self.catalog_name, ident, table))
            self.changed = True

    # -- views ---------------------------------------------------------------------------------
    def view(self, ident: ViewId, body: Any, chain: list[ViewId]) -> exp.Expr:
        """The view's SQL as a tree (in Spark's dialect once rendered), its references rewritten."""
        path = [*chain, ident]
        if len(path) > self.max_depth:
            raise ViewChainError(
                f"View chain deeper than {self.max_depth}: {' → '.join(map(_dotted, path))}. "
                f"Catalogs refuse longer referenced-by chains: flatten some of the views."
            )
        version = current_version(body.get("metadata") or {}, _dotted(ident))
        sql, dialect = _pick_sql(version)
        try:
            tree = sqlglot.parse_one(sql, read=dialect)
        except sqlglot.errors.ParseError as exc:
            raise ViewChainError(f"Cannot parse view {_dotted(ident)}'s SQL ({dialect}): {exc}") from exc
        self.result.views.append(_dotted(ident))
        if OWNER_PROPERTY in ((body.get("metadata") or {}).get("properties") or {}):
            self.result.definers.append(_dotted(ident))
        local = {self.catalog_name.lower()}
        for table in _table_refs(tree):
            child, _display = _classify([p.name for p in table.parts], version, local)
            if child is None:
                continue  # another catalog: left as the view wrote it
            if child in path:
                cycle = " → ".join(_dotted(v) for v in [*path[path.index(child) :], child])
                raise ViewChainError(
                    f"View cycle: {cycle}. A view must not read itself, directly or through "
                    f"other views: replace one of them to break the cycle."
                )
            status, child_body = self.client.get("views", child, path)
            if status == 200:
                table.replace(self._subquery(self.view(child, child_body, path), table))
                continue
            catalog = self.chain_catalog(tuple(path), child)
            self.result.chains.setdefault(" → ".join(map(_dotted, path)), []).append(_dotted(child))
            table.replace(self._pinned(catalog, child, table))
        return tree

    @staticmethod
    def _pinned(catalog: str, ident: ViewId, table: exp.Table) -> exp.Table:
        """``catalog.ns.name``, keeping the name the SQL used as its alias (``t.col`` still resolves)."""
        pinned = exp.to_table(quoted((catalog, *ident[0], ident[1])), dialect="spark")
        pinned.set("alias", exp.TableAlias(this=exp.to_identifier(_alias(table))))
        return pinned

    @staticmethod
    def _subquery(tree: exp.Expr, table: exp.Table) -> exp.Expr:
        return exp.Subquery(this=tree, alias=exp.TableAlias(this=exp.to_identifier(_alias(table))))


def expand(
    query: str,
    *,
    client: _Client,
    catalog_name: str,
    current_namespace: tuple[str, ...] | None,
    chain_catalog: ChainCatalog,
    max_depth: int = MAX_DEPTH,
    where: Where | None = None,
    refuse_unreadable: bool = False,
) -> Expansion:
    """``query`` with every view of ``catalog_name`` it reads expanded (see the module docstring).

    Args:
        client: Loads views (and probes chains) as the user, directly at the catalog.
        catalog_name: The session's catalog name in Spark; three-part names in other catalogs are
            left alone.
        current_namespace: Where one-part names resolve (Spark's current namespace when the
            current catalog is ``catalog_name``), or None to leave them to Spark.
        chain_catalog: ``(chain, table) -> catalog name`` serving ``table`` through ``chain``.
        where: ``() -> (current catalog, current namespace)`` of the session that runs the query, called
            at most once and only for a one- or two-part name; given, it replaces ``current_namespace``.
        refuse_unreadable: A name of the query refused both as a view and as a table raises
            ``CatalogAccessError`` with both refusals (the engine, and the notebook's routing to it); else
            Spark meets the table's refusal alone.

    Raises:
        ViewChainError: a cycle, a chain deeper than ``max_depth``, unparsable view SQL, or a
            reference to an internal chain catalog.
        CatalogAccessError: with ``refuse_unreadable``, a name refused both as a view and as a table.
    """
    explain = _EXPLAIN.match(query)
    if explain is not None:  # its plan is the statement's: expanded the same way
        inner = expand(
            query[explain.end() :],
            client=client,
            catalog_name=catalog_name,
            current_namespace=current_namespace,
            chain_catalog=chain_catalog,
            max_depth=max_depth,
            where=where,
            refuse_unreadable=refuse_unreadable,
        )
        inner.sql = query[: explain.end()] + inner.sql if inner.sql != query[explain.end() :] else query
        return inner
    try:
        tree = sqlglot.parse_one(query, read="spark")
    except sqlglot.errors.ParseError:
        logger.debug("query not parsed by sqlglot; running it unchanged (views keep INVOKER semantics)")
        return Expansion(query)
    if tree is None:
        return Expansion(query)
    expander = _Expander(client, catalog_name, current_namespace, chain_catalog, max_depth, where, refuse_unreadable)
    if isinstance(tree, exp.Query):
        expander.query(tree)
    elif isinstance(tree, exp.Insert) and isinstance(tree.expression, exp.Query):
        expander.query(tree.expression)
    else:
        for table in _table_refs(tree):  # still refuse direct use of chain catalogs (resolving nothing)
            expander.refuse_internal([p.name for p in table.parts])
        return Expansion(query)
    result = expander.result
    result.sql = tree.sql(dialect="spark") if expander.changed else query
    return result
