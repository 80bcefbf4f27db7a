"""Chain-scoped catalog routes: how Spark reads DEFINER views without a back door.

``Session.sql`` expands a view into its SQL and points each table the view chain reads at a
catalog of its own (``lake__chain_…``), served by the gateway under ``/chain/{id}``. Every
request on that route:

* is limited to exactly the tables the chain reads — loadTable, table exists, credential
  refresh, remote signing (the catalog still refuses writes to a read-only chain) and scan
  metrics; anything else (listings, creates, commits, other tables, views)
  answers 403 ``ForbiddenException`` — so the chain catalog is read-only and narrow;
* carries the chain in ``referenced-by`` (set by the gateway, replacing any value the engine
  sent), so the catalog evaluates DEFINER/INVOKER security for the right user.

On the session's main route the gateway strips ``referenced-by``: plain ``spark.sql`` on the
main catalog keeps INVOKER semantics, and a table the user may read only through a view is
never cached in — or reachable from — the main catalog.
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass, field

from .._wire.referenced_by import replace as with_referenced_by
from .._wire.referenced_by import strip as strip_referenced_by
from ._routes import Endpoint, Route, parse_catalog

__all__ = ["ChainRoute", "ChainRoutes", "strip_referenced_by", "with_referenced_by"]

ViewId = tuple[tuple[str, ...], str]

# what a chain route may do with a table it reads
_READS = {
    Endpoint.LOAD_TABLE,
    Endpoint.TABLE_EXISTS,
    Endpoint.TABLE_CREDENTIALS,
    Endpoint.REPORT_METRICS,
    Endpoint.SIGN_TABLE,
}


@dataclass
class ChainRoute:
    """One view chain (outermost first) and the tables it may load through it."""

    id: str
    chain: tuple[ViewId, ...]
    referenced_by: str  # encoded with the catalog's namespace separator
    tables: set[ViewId] = field(default_factory=set)

    @property
    def display(self) -> str:
        return " → ".join(".".join((*ns, name)) for ns, name in self.chain)

    def permits(self, method: str, path: str) -> tuple[bool, str]:
        """(allowed, why not) for a request on this route; ``path`` starts at ``/v1``."""
        return self.permits_route(parse_catalog(method, path))

    def permits_route(self, route: Route) -> tuple[bool, str]:
        """(allowed, why not) for a parsed catalog request on this route: its config, and reads of its tables."""
        if route.endpoint is Endpoint.CONFIG:
            return True, ""
        ident = route.table
        if ident is None:
            return False, "only the tables this view chain reads can be loaded here"
        if ident not in self.tables:
            return False, f"table {'.'.join((*ident[0], ident[1]))} is not read by this view chain"
        if route.endpoint not in _READS:
            return False, "view chains are read-only"
        return True, ""


class ChainRoutes:
    """The gateway's registry of chain routes; ids are random and never reused."""

    def __init__(self) -> None:
        self._routes: dict[str, ChainRoute] = {}
        self._by_chain: dict[tuple[ViewId, ...], ChainRoute] = {}
        self._lock = threading.Lock()

    def register(self, chain: tuple[ViewId, ...], referenced_by: str, tables: set[ViewId] | None = None) -> ChainRoute:
        """The route for ``chain`` (created on first use); ``tables`` are added to what it may load."""
        with self._lock:
            route = self._by_chain.get(chain)
            if route is None:
                route = ChainRoute(secrets.token_hex(8), chain, referenced_by)
                self._routes[route.id] = route
                self._by_chain[chain] = route
            route.tables |= set(tables or ())
            return route

    def get(self, route_id: str) -> ChainRoute | None:
        with self._lock:
            return self._routes.get(route_id)

    def __len__(self) -> int:
        return len(self._routes)
