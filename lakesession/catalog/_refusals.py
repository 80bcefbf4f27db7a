"""pyiceberg's REST errors for a table, as the one ``CatalogAccessError`` line Spark gives for the same cause.

pyiceberg raises ``ForbiddenError("ForbiddenException: …")`` and its siblings: a class the user never
imported, no table, no principal, no fix. The same refusal through Spark is a ``CatalogAccessError``
(``lakesession._spark.errors``), so ``session.table()`` raises that too, the pyiceberg error as its cause.
"""

from __future__ import annotations

import re

from pyiceberg.exceptions import (
    BadRequestError,
    ForbiddenError,
    NoSuchTableError,
    RESTError,
    ServerError,
    ServiceUnavailableError,
    UnauthorizedError,
)

from ..errors import CatalogAccessError, ConfigError, TableNotFoundError, did_you_mean

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


def catalog_refusal(
    exc: Exception, *, action: str, table: str, principal: str | None, close: list[str] | None = None
) -> CatalogAccessError | None:
    """``exc`` (a pyiceberg REST error) as a one-line ``CatalogAccessError``, or None for any other error."""
    found = next(((kind, status) for cls, kind, status in _KINDS if isinstance(exc, cls)), None)
    if found is None:
        return None
    kind, status = found
    said = _said(exc, kind)
    who = f" as {principal}" if principal else ""
    fix = grant_fix(said, table) if kind == "forbidden" else FIXES.get(kind, RETRY).format(table=table)
    message = (
        f"The catalog refused to {action} table {table}{who} (HTTP {status}): {said}.{granted_close(close)} Fix: {fix}."
    )
    return CatalogAccessError(message, kind, status=status)


def granted_close(close: list[str] | None) -> str:
    """ " Did you mean …?" for a refused name close to tables the user holds grants on ('' when none is)."""
    return f" Did you mean {' or '.join(close)} (granted to you)?" if close else ""


# the reference catalog's (and lakesession serve's) 403: who, what, on which object, the privilege checked
_REFUSAL = re.compile(
    r"Principal '(?P<who>[^']+)' is not authorized for (?P<action>\S+) on (?P<kind>table|view|namespace) "
    r"(?P<name>\S+) \((?P<privilege>[A-Z_]+) required\)"
)
#: the privilege checked -> the one a user is granted for it (reading a table's data implies reading its metadata)
AS_GRANTED = {
    "TABLE_READ_PROPERTIES": "TABLE_READ_DATA",
    "TABLE_WRITE_PROPERTIES": "TABLE_WRITE_DATA",
    "VIEW_READ_PROPERTIES": "VIEW_READ_PROPERTIES",
}
GRANTS_HINT = "session.grants() lists yours"


def refused_object(said: str) -> tuple[str, str, str] | None:
    """(principal, kind, name) a catalog's 403 names (the reference catalog's wording), else None."""
    found = _REFUSAL.search(said)
    return None if found is None else (found["who"], found["kind"], found["name"])


def grant_fix(said: str, table: str | None) -> str:
    """The fix for a 403: the privilege to ask for, as granted, on the object the catalog named (else ``table``)."""
    found = _REFUSAL.search(said)
    if found is not None:
        privilege = AS_GRANTED.get(found["privilege"], found["privilege"])
        return f"ask the catalog's administrator for {privilege} on {found['kind']} {found['name']} ({GRANTS_HINT})"
    what = f" on {table}" if table else ""
    return f"ask the catalog's administrator for a grant{what} ({GRANTS_HINT})"


def forbidden_line(said: str, close: list[str] | None = None) -> str:
    """A catalog's 403 seen through Spark (Iceberg's ``Forbidden: …``) as the line Python gives: the table, the
    principal, the privilege to ask for as granted, and the fix."""
    said = said.removeprefix("Forbidden: ").rstrip(".")
    if "Fix:" in said:
        return said
    found = _REFUSAL.search(said)
    if found is None:
        return f"The catalog refused (HTTP 403): {said}.{granted_close(close)} Fix: {grant_fix(said, None)}."
    action, kind = found["action"], found["kind"]
    verb = action.removesuffix(f"_{kind}").replace("_", " ")  # load_table -> load (Python's wording)
    return (
        f"The catalog refused to {verb} {kind} {found['name']} as {found['who']} (HTTP 403): {said}."
        f"{granted_close(close)} Fix: {grant_fix(said, None)}."
    )


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


class NoSuchTable(TableNotFoundError, NoSuchTableError):
    """``TableNotFoundError`` that is pyiceberg's ``NoSuchTableError`` too (code catching that keeps working)."""


def unlisted_table(ident: tuple[str, ...], known: list[str], *, uri: str) -> NoSuchTable | None:
    """A refused name that the user's own listing of its namespace lacks while a close name is there: a typo,
    told as one (None when the name is listed, or nothing close is: then the refusal is what to show)."""
    table = ".".join(ident)
    if table in known:
        return None
    leaf = ident[-1]
    spaces = [k[: -len(".*")] + "." + leaf for k in known if k.endswith(".*")]
    close = spaces or did_you_mean(table, known)
    if not close:
        return None
    return NoSuchTable(
        f"Table {table} does not exist or is not visible to you (the catalog at {uri} refused it). "
        f"Fix: did you mean {' or '.join(close)}?",
        table,
        close,
    )


def missing_table(exc: NoSuchTableError, *, table: str, uri: str, known: list[str] | None = None) -> NoSuchTable:
    """A 404 as one line naming the table (Lakekeeper says only "Error getting tabular from catalog") and, from
    ``known`` (the tables the user may list in its namespace), the close names."""
    said = _said(exc, "no such table")
    leaf = table.rsplit(".", 1)[-1]
    spaces = [k[: -len(".*")] + "." + leaf for k in known or [] if k.endswith(".*")]  # a mistyped namespace
    close = spaces or did_you_mean(table, known or [])
    if close:
        fix = f"did you mean {' or '.join(close)}?"
    else:
        fix = "check the name (session.catalog.list_tables(namespace) lists a namespace's tables)"
    where = "" if table in said else f" ({said})"
    return NoSuchTable(f"Table {table} does not exist in the catalog at {uri}{where}. Fix: {fix}", table, close)
