"""Spark's side of a newcomer's mistakes, as the classes Python raises for them (#42).

* an address the session never reached: the gateway answered the JVM a 400 naming it (``gateway._nologin``),
  raised again as ``CatalogUnreachableError`` / ``IssuerUnreachableError``;
* a table Spark could not find (``TABLE_OR_VIEW_NOT_FOUND``), or one the catalog refused that the user's session
  cannot see: one line with the close names the user may list or holds grants on.

Called from ``lakesession._spark.errors`` (lazily: only a failure needs it); imports nothing from it.
"""

from __future__ import annotations

import re

from pyspark.errors.exceptions import captured

from ..catalog._refusals import refused_object, unlisted_table
from ..errors import ADDRESS_SETTING, TableNotFoundError, did_you_mean
from ..errors import CatalogUnreachableError as _CatalogUnreachableError
from ..errors import IssuerUnreachableError as _IssuerUnreachableError
from ..gateway._nologin import found_unreached
from ._chain import Chain, SparkSideError

BAD_REQUEST = "org.apache.iceberg.exceptions.BadRequestException"  # as in .errors (which imports this module)


class CatalogUnreachableError(_CatalogUnreachableError, SparkSideError):
    """The catalog this session never reached, from a Spark query (the gateway's 400): the class Python raises."""

    def __init__(self, message: str):
        SparkSideError.__init__(self, message)
        self.kind, self.java_class, self.status = "catalog unreachable", BAD_REQUEST, None
        self.url, self.setting = _address(message)


class IssuerUnreachableError(_IssuerUnreachableError, SparkSideError):
    """Where tokens come from, never reached, from a Spark query: the class Python raises."""

    def __init__(self, message: str):
        SparkSideError.__init__(self, message)
        self.cause = "IssuerUnreachableError"
        self.url, self.setting = _address(message)


def _address(message: str) -> tuple[str, str]:
    """(the URL, the setting to check) an "address never reached" line names."""
    url = re.match(r"Cannot reach (?:the catalog at )?(\S+) ", message)
    setting = message.rsplit("Fix: check ", 1)[-1].rstrip(".") if "Fix: check " in message else ADDRESS_SETTING
    return (url.group(1) if url else ""), setting


def unreached_from(text: str) -> captured.CapturedException | None:
    """The gateway's "never reached" 400 in ``text`` (an Iceberg exception's message), as the class Python raises."""
    found = found_unreached(text)
    if found is None:
        return None
    name, message = found
    return IssuerUnreachableError(message) if name == "IssuerUnreachableError" else CatalogUnreachableError(message)


def unreached_error(chain: Chain) -> captured.CapturedException | None:
    """The gateway's "never reached" 400 anywhere on a Spark failure's cause chain."""
    for said in chain.messages:
        found = unreached_from(said)
        if found is not None:
            return found
    return None


class TableNotFound(TableNotFoundError, SparkSideError, captured.AnalysisException):
    """Spark's ``TABLE_OR_VIEW_NOT_FOUND`` as one line with close names: ``TableNotFoundError`` and pyspark's
    ``AnalysisException`` (code catching that keeps working)."""

    def __init__(self, message: str, table: str, suggestions: list[str]):
        SparkSideError.__init__(self, message)
        self.table, self.suggestions = table, suggestions


_NOT_FOUND = re.compile(r"\[TABLE_OR_VIEW_NOT_FOUND\] The table or view (\S+) cannot be found")


def missing_table_error(chain: Chain) -> TableNotFound | None:
    """A table Spark could not find in a lakesession catalog, with the close names its session's user may list."""
    top = chain.links[0] if chain.links else None
    if top is None or not top.name.endswith("AnalysisException"):
        return None
    found = _NOT_FOUND.search(top.message)
    if found is None:
        return None
    parts = [p.strip("`") for p in found.group(1).split("`.`")]
    from ._denials import sessions

    for session in sessions():
        catalog = getattr(session, "catalog_name", None)
        listable = getattr(session, "_listable", None)
        if catalog is None or listable is None or len(parts) < 2:
            continue
        if parts[0] == catalog and len(parts) > 2:
            ident = tuple(parts[1:])
        elif parts[0] != catalog:
            ident = tuple(parts)  # the default catalog's
        else:
            continue
        known: list[str] = listable(ident[:-1])
        leaf = ident[-1]
        spaces = [f"{catalog}.{k[: -len('.*')]}.{leaf}" for k in known if k.endswith(".*")]
        close = spaces or [f"{catalog}.{c}" for c in did_you_mean(".".join(ident), known)]
        fix = f"did you mean {' or '.join(close)}?" if close else f"SHOW TABLES IN {catalog}.{'.'.join(ident[:-1])}"
        name = ".".join((catalog, *ident))
        said = f"Table {name} does not exist or is not visible to you (Spark: TABLE_OR_VIEW_NOT_FOUND). Fix: {fix}"
        return TableNotFound(said, name, close)
    return None


def unlisted(said: str) -> TableNotFound | list[str] | None:
    """A refused table the refused user's session cannot find: ``TableNotFound`` when its namespace's listing lacks
    it while a close name is there; else the close names among the user's granted tables (a typo, or no grant)."""
    found = refused_object(said)
    if found is None or found[1] != "table":
        return None
    who, _, name = found
    from ._denials import sessions

    for session in sessions():
        listed_fn, granted_fn = getattr(session, "_listed", None), getattr(session, "_granted", None)
        catalog = getattr(session, "catalog_name", None)
        if listed_fn is None or granted_fn is None or catalog is None:
            continue
        if getattr(session._identity, "principal", None) != who:
            continue
        ident = tuple(name.split("."))
        listed = listed_fn(ident[:-1])
        if listed is None:
            return [f"{catalog}.{g}" for g in did_you_mean(name, granted_fn()) if g != name]
        unseen = unlisted_table(ident, listed, uri=str(getattr(session, "uri", "")))
        if unseen is None:
            return None
        close = [f"{catalog}.{c}" for c in unseen.suggestions]
        return TableNotFound(
            f"Table {catalog}.{name} does not exist or is not visible to you (the catalog refused it). "
            f"Fix: did you mean {' or '.join(close)}?",
            f"{catalog}.{name}",
            close,
        )
    return None
