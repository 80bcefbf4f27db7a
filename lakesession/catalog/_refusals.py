"""pyiceberg's REST errors for a table, as the one ``CatalogAccessError`` line Spark gives for the same cause.

pyiceberg raises ``ForbiddenError("ForbiddenException: …")`` and its siblings: a class the user never
imported, no table, no principal, no fix. The same refusal through Spark is a ``CatalogAccessError``
(``lakesession._spark.errors``), so ``session.table()`` raises that too, the pyiceberg error as its cause.
"""

from __future__ import annotations

from pyiceberg.exceptions import (
    BadRequestError,
    ForbiddenError,
    NoSuchTableError,
    RESTError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
)

from ..errors import CatalogAccessError, ConfigError

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
    said = _said(exc, kind)
    who = f" as {principal}" if principal else ""
    fix = FIXES.get(kind, RETRY).format(table=table)
    message = f"The catalog refused to {action} table {table}{who} (HTTP {status}): {said}. Fix: {fix}."
    return CatalogAccessError(message, kind, status=status)


def _said(exc: Exception, fallback: str) -> str:
    """pyiceberg's ``"<ErrorModel type>: <message>"`` as the catalog's own words (the type dropped)."""
    said = str(exc).splitlines()[0] if str(exc) else fallback
    if ": " in said and said.split(": ", 1)[0].endswith(("Exception", "Error")):
        said = said.split(": ", 1)[1]
    return said.rstrip(".")


def config_refusal(exc: Exception, *, uri: str, warehouse: str | None) -> ConfigError | None:
    """A catalog's "no such warehouse" answer to ``/v1/config`` as the ``ConfigError`` it is.

    Lakekeeper answers ``NoSuchWarehouseException`` and the reference catalog ``NotFoundException``, both a
    404 that pyiceberg raises as a bare ``RESTError``; Nessie 0.99 answers a 500 ``IllegalStateException:
    Warehouse 'x' is not known`` (a ``ServerError``, recognised by the name asked for). 401/403 and other
    failures keep their own errors.
    """
    named = bool(warehouse) and f"'{warehouse}'" in str(exc) and "warehouse" in str(exc).lower()
    if type(exc) is not RESTError and not (named and isinstance(exc, (ServerError, BadRequestError))):
        return None
    return ConfigError(no_warehouse(_said(exc, "not found"), uri=uri, warehouse=warehouse))


def no_warehouse(said: str, *, uri: str | None, warehouse: str | None) -> str:
    """The one line for a catalog without the warehouse asked for (Python and Spark say the same)."""
    at = f"The catalog at {uri}" if uri else "The catalog"
    if warehouse:
        fix = "check warehouse= (LAKESESSION_WAREHOUSE, config.yaml); the catalog's administrator knows its names"
        return f"{at} has no warehouse {warehouse!r}: {said.rstrip('.')}. Fix: {fix}."
    fix = "check warehouse= (LAKESESSION_WAREHOUSE, config.yaml) and uri= (the catalog's base, before /v1)"
    return f"{at} refused the warehouse asked for: {said.rstrip('.')}. Fix: {fix}."


def missing_table(exc: NoSuchTableError, *, table: str, uri: str) -> NoSuchTableError:
    """A 404 that names the table: Lakekeeper says only "Error getting tabular from catalog".

    Still pyiceberg's ``NoSuchTableError`` (code catching it keeps working), with one line naming the table.
    """
    said = _said(exc, "no such table")
    if table in said:
        return exc
    fix = "check the name (session.catalog.list_tables(namespace) lists a namespace's tables)"
    return NoSuchTableError(f"Table {table} does not exist in the catalog at {uri} ({said}). Fix: {fix}.")
