"""pyiceberg's REST errors for a table, as the one ``CatalogAccessError`` line Spark gives for the same cause.

pyiceberg raises ``ForbiddenError("ForbiddenException: …")`` and its siblings: a class the user never
imported, no table, no principal, no fix. The same refusal through Spark is a ``CatalogAccessError``
(``lakesession._spark.errors``), so ``session.table()`` raises that too, the pyiceberg error as its cause.
"""

from __future__ import annotations

from pyiceberg.exceptions import ForbiddenError, ServerError, ServiceUnavailableError, UnauthorizedError

from ..errors import CatalogAccessError

_KINDS: tuple[tuple[type[Exception], str, int], ...] = (
    (ForbiddenError, "forbidden", 403),
    (UnauthorizedError, "not authorized", 401),
    (ServiceUnavailableError, "catalog unavailable", 503),
    (ServerError, "catalog failure", 500),
)
FIXES = {
    "forbidden": "ask the catalog's administrator for a grant on {table} (session.grants() lists yours)",
    "not authorized": "log in again (lakesession.connect(...) / %lakesession login)",
}
RETRY = "retry; if it persists, ask the catalog's operator"


def catalog_refusal(exc: Exception, *, action: str, table: str, principal: str | None) -> CatalogAccessError | None:
    """``exc`` (a pyiceberg REST error) as a one-line ``CatalogAccessError``, or None for any other error."""
    found = next(((kind, status) for cls, kind, status in _KINDS if isinstance(exc, cls)), None)
    if found is None:
        return None
    kind, status = found
    said = str(exc).splitlines()[0] if str(exc) else kind
    if ": " in said and said.split(": ", 1)[0].endswith(("Exception", "Error")):
        said = said.split(": ", 1)[1]  # pyiceberg's "<ErrorModel type>: <message>"
    who = f" as {principal}" if principal else ""
    fix = FIXES.get(kind, RETRY).format(table=table)
    message = f"The catalog refused to {action} table {table}{who} (HTTP {status}): {said.rstrip('.')}. Fix: {fix}."
    return CatalogAccessError(message, kind, status=status)
