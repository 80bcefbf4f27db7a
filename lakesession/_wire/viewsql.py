"""What a view's SQL reads, by one set of rules for the client's chain walker and the catalog's checks.

* a SQL representation is parsed in its dialect (unknown: Spark); CTE names, table functions and
  ``UNNEST`` are not references;
* a one-part name is resolved in the view's ``default-namespace`` (none: unresolvable);
* with three or more parts, a first part equal to the view's ``default-catalog`` or to one of this
  catalog's names is the catalog and is dropped; any other first part, when the view has a
  ``default-catalog``, names another catalog (not a link into this one);
* otherwise the last part is the name and the rest the namespace.

Names compare exactly (Iceberg REST identifiers are case-sensitive); catalog names do not.
sqlglot is imported on first use: a catalog's start, on the way to a first query, needs no SQL parser.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlglot import exp

ViewId = tuple[tuple[str, ...], str]


class UnqualifiedReference(ValueError):
    """A one-part name in a view without a ``default-namespace``: it names nothing."""


def dialect(name: str | None) -> str:
    """sqlglot's name for a representation's dialect; Spark for none or an unknown one."""
    from sqlglot.dialects.dialect import Dialect

    name = (name or "spark").lower()
    try:
        return name if Dialect.get(name) is not None else "spark"
    except Exception:  # an odd dialect string: parse as Spark
        return "spark"


def table_refs(tree: exp.Expr) -> list[exp.Table]:
    """The table/view references in a parsed statement: CTE names, table functions and UNNEST excluded."""
    from sqlglot import exp

    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    return [
        t
        for t in tree.find_all(exp.Table, bfs=False)
        if isinstance(t.this, (exp.Identifier, exp.Dot)) and not (len(t.parts) == 1 and t.parts[0].name.lower() in ctes)
    ]


def references(sql: str, sql_dialect: str | None) -> list[list[str]]:
    """The multi-part names ``sql`` reads, in order, each once; raises sqlglot's ``SqlglotError`` if it does not parse."""
    import sqlglot

    tree = sqlglot.parse_one(sql, read=dialect(sql_dialect))
    seen: list[list[str]] = []
    if tree is None:
        return seen
    for table in table_refs(tree):
        parts = [p.name for p in table.parts]
        if parts not in seen:
            seen.append(parts)
    return seen


def resolve(
    parts: list[str], default_namespace: Iterable[str], default_catalog: str | None, catalog_names: Iterable[str]
) -> ViewId | None:
    """The identifier in this catalog that ``parts`` names, or None when it names another catalog's object."""
    default_ns = tuple(default_namespace)
    if len(parts) == 1:
        if not default_ns:
            raise UnqualifiedReference(parts[0])
        return default_ns, parts[0]
    known = {n.lower() for n in catalog_names} | ({default_catalog.lower()} if default_catalog else set())
    if len(parts) >= 3 and parts[0].lower() in known:
        parts = parts[1:]
    elif len(parts) >= 3 and default_catalog:  # the engine qualifies with catalogs: this one is elsewhere
        return None
    return tuple(parts[:-1]), parts[-1]
