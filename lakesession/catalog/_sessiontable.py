"""``Session.table``: the load, and when the catalog refuses it, the one error that says why and what to do.

Apart from ``session.py`` so that what a Session is stays short: the explanation asks the catalog what the
user may see (a view of that name, the namespace's listing, the grants) before it picks the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from ..session import Session


def session_table(session: Session, name: str | Sequence[str], *, access: str | None, mode: str | None) -> Table:
    """``name`` loaded as ``session``'s user (``_tables.load_table``), or the refusal explained: a view named
    as a table, a missing table with the names close to it, a name the user may not see, a missing grant."""
    from pyiceberg.exceptions import ForbiddenError, NoSuchTableError, RESTError

    from ..errors import ConfigError, did_you_mean
    from ._names import granted, listable, listed
    from ._refusals import catalog_refusal, missing_table, unlisted_table
    from ._tables import load_table

    catalog = session.catalog  # first: its start fetches the token that names the principal
    principal = getattr(session.identity, "principal", None)
    try:
        return load_table(
            catalog,
            name,
            session.credential_store,
            session._token,
            session.uri,
            access=access or session.access,
            mode=mode,
            principal=principal,
        )
    except (NoSuchTableError, RESTError) as exc:
        ident = tuple(name.split(".")) if isinstance(name, str) else tuple(name)
        # catalogs may refuse before saying "no such table": a view named here is not one
        if isinstance(exc, (NoSuchTableError, ForbiddenError)) and session._is_view(ident):
            raise ConfigError(
                f"{'.'.join(ident)} is a view, not a table: read it with session.view({name!r}) "
                "(a Spark DataFrame, its chain evaluated by the catalog) or session.sql(...)"
            ) from None
        if isinstance(exc, NoSuchTableError):
            known = listable(catalog, session.reports, ident[:-1])
            raise missing_table(exc, table=".".join(ident), uri=session.uri, known=known) from None
        close: list[str] = []
        if isinstance(exc, ForbiddenError):  # catalogs refuse names the user may not see, existing or not
            tables = listed(catalog, ident[:-1])
            unseen = unlisted_table(ident, tables, uri=session.uri) if tables is not None else None
            if unseen is not None:
                raise unseen from exc
            if tables is None:  # a name close to one granted: a typo, or truly no grant (both said)
                close = [g for g in did_you_mean(".".join(ident), granted(session.reports)) if g != ".".join(ident)]
        refused = catalog_refusal(exc, action="load", table=".".join(ident), principal=principal, close=close)
        if refused is None:
            raise
        raise refused from exc
