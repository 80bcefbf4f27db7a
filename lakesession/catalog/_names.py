"""The names a user may know near a mistyped one, for "did you mean" (``session.table``, Spark's errors).

Only what the user may see: the namespace's tables when the user may list them, else the tables the user holds
grants on (the catalog's grants endpoint), else the namespaces close to the one asked for. A refusal to list, or
a catalog without a grants endpoint, gives none: a suggestion is a courtesy and never hides the error itself.
"""

from __future__ import annotations

import difflib
from typing import Any, Protocol


class _Reports(Protocol):
    def grants(self, *, timeout: float = ..., strict: bool = ...) -> Any: ...


def listed(catalog: Any, namespace: tuple[str, ...]) -> list[str] | None:
    """The tables of ``namespace`` (None: the user may not list it, or it does not exist)."""
    try:
        return [".".join(t) for t in catalog.list_tables(namespace)]
    except Exception:
        return None


def granted(reports: _Reports) -> list[str]:
    """The tables the user holds grants on (none from a catalog without a grants endpoint)."""
    try:
        rows = reports.grants(timeout=5.0)["securable"]
    except Exception:
        return []
    return [str(r).removeprefix("table ") for r in rows if str(r).startswith("table ")]


def listable(catalog: Any, reports: _Reports, namespace: tuple[str, ...]) -> list[str]:
    """Names near ``namespace``: its tables, else the granted tables, else ``<ns>.*`` for each close namespace."""
    tables = listed(catalog, namespace)
    if tables is not None:
        return tables
    held = granted(reports)
    if held:
        return held
    try:
        spaces = [".".join(n) for n in catalog.list_namespaces()]
    except Exception:
        return []
    close = difflib.get_close_matches(".".join(namespace), spaces, n=3, cutoff=0.6)
    return [".".join((c, "*")) for c in close]
