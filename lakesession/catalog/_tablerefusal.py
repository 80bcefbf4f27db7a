"""``Session.table``'s refusals: when the catalog refuses a load, the one error that says why and what to do.

Apart from ``session.py`` so that what a Session is stays short: the explanation asks the catalog what the
user may see (a view of that name, the namespace's listing, the grants) before it picks the error. It returns
the error rather than raising it, so that a user's traceback ends in ``Session.table`` (one frame, not two).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..session import Session


def explain_refusal(
    session: Session, name: str | Sequence[str], exc: Exception, principal: str | None
) -> tuple[Exception, BaseException | None] | None:
    """(the error to raise, its cause) for a load of ``name`` the catalog refused with ``exc``: a view named as
    a table, a missing table with the names close to it, a name the user may not see, a missing grant; None to
    let ``exc`` itself go on."""
    from pyiceberg.exceptions import ForbiddenError, NoSuchTableError

    from ..errors import ConfigError, did_you_mean
    from ._names import granted, listable, listed
    from ._refusals import catalog_refusal, missing_table, unlisted_table

    ident = tuple(name.split(".")) if isinstance(name, str) else tuple(name)
    # catalogs may refuse before saying "no such table": a view named here is not one
    if isinstance(exc, (NoSuchTableError, ForbiddenError)) and session._is_view(ident):
        view = ConfigError(
            f"{'.'.join(ident)} is a view, not a table: read it with session.view({name!r}) "
            "(a Spark DataFrame, its chain evaluated by the catalog) or session.sql(...)"
        )
        return view, None
    if isinstance(exc, NoSuchTableError):
        known = listable(session.catalog, session.reports, ident[:-1])
        return missing_table(exc, table=".".join(ident), uri=session.uri, known=known), None
    close: list[str] = []
    if isinstance(exc, ForbiddenError):  # catalogs refuse names the user may not see, existing or not
        tables = listed(session.catalog, ident[:-1])
        unseen = unlisted_table(ident, tables, uri=session.uri) if tables is not None else None
        if unseen is not None:
            return unseen, exc
        if tables is None:  # a name close to one granted: a typo, or truly no grant (both said)
            close = [g for g in did_you_mean(".".join(ident), granted(session.reports)) if g != ".".join(ident)]
    refused = catalog_refusal(exc, action="load", table=".".join(ident), principal=principal, close=close)
    return None if refused is None else (refused, exc)
