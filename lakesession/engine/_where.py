"""Where a Connect session resolves names: its current catalog and namespace, as its own Spark says.

The front door expands views before Spark sees a query, so an unqualified name (``USE lake.sales`` then
``SELECT * FROM v_eu``) must resolve exactly where Spark would resolve it. Only the session's Spark knows
(``USE``, ``SET CATALOG``, ``spark.catalog.setCurrentDatabase`` all change it), so ``Whereabouts`` asks it —
once, when a name needs it — and keeps the answer until a statement that may change it passes the front door.
A plain query (SELECT, WITH, VALUES, TABLE, EXPLAIN, SHOW, DESCRIBE) never changes it; anything else does.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ._sandbox import walk

__all__ = ["Whereabouts", "changes_where", "list_tables_here"]

Where = tuple[str, tuple[str, ...]]

#: statements that never change the current catalog or namespace (first keyword, after comments)
_READS = re.compile(
    r"(?is)^(?:\s+|--[^\n]*\n|/\*.*?\*/|\()*(?:select|with|values|from|table|explain|show|describe|desc)\b"
)
_SETS_CURRENT = ("set_current_database", "set_current_catalog")
_SESSIONS = 4096
#: the question asked of the session's Spark (current_database() answers the namespace quoted, as Spark prints it)
QUESTION = "SELECT current_catalog(), current_database()"
#: what ``spark.catalog.listTables()`` answers at a catalog's root (no table lives there): no rows, its columns
EMPTY_TABLE_LIST = (
    "SELECT CAST(NULL AS STRING) AS name, CAST(NULL AS STRING) AS catalog, CAST(NULL AS ARRAY<STRING>) AS namespace, "
    "CAST(NULL AS STRING) AS description, CAST(NULL AS STRING) AS tableType, CAST(NULL AS BOOLEAN) AS isTemporary "
    "WHERE false"
)


def changes_where(plan: Any) -> bool:
    """Whether ``plan`` may change its session's current catalog or namespace (any statement but a read)."""
    for msg in walk(plan):
        name = msg.DESCRIPTOR.full_name
        if name == "spark.connect.SQL" and not _READS.match(msg.query):
            return True
        if name == "spark.connect.SqlCommand" and msg.sql and not _READS.match(msg.sql):
            return True
        if name == "spark.connect.Catalog" and msg.WhichOneof("cat_type") in _SETS_CURRENT:
            return True
    return False


def list_tables_here(plan: Any) -> list[Any]:
    """The ``spark.catalog.listTables()`` relations of ``plan`` that name no namespace (the current one's)."""
    return [
        msg
        for msg in walk(plan)
        if msg.DESCRIPTOR.full_name == "spark.connect.Relation"
        and msg.WhichOneof("rel_type") == "catalog"
        and msg.catalog.WhichOneof("cat_type") == "list_tables"
        and not msg.catalog.list_tables.HasField("db_name")
    ]


class Whereabouts:
    """Each Connect session's current catalog and namespace, asked of its Spark (``ask``) when unknown."""

    def __init__(self, ask: Callable[[str, Any], list[tuple[Any, ...]]]) -> None:
        self._ask = ask  # (session id, user) -> the rows of QUESTION run in that session
        # by session id, with the principal that asked (an id released and claimed again starts afresh); bounded:
        # sessions end without telling us
        self._known: OrderedDict[str, tuple[str, Where]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str, user: Any) -> Where:
        with self._lock:
            known = self._known.get(session_id)
        if known is not None and known[0] == user.principal:
            return known[1]
        from ..catalog._expand import unquoted

        catalog, database = self._ask(session_id, user)[0]
        namespace = unquoted(database) if database else ()
        where = (str(catalog), tuple(namespace))
        with self._lock:
            self._known[session_id] = (user.principal, where)
            while len(self._known) > _SESSIONS:
                self._known.popitem(last=False)
        return where

    def forget(self, session_id: str) -> None:
        """The session ran (or is about to run) something that may move it: ask again next time."""
        with self._lock:
            self._known.pop(session_id, None)
