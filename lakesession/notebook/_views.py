"""The notebook's session and its views: widgets in a kernel, HTML objects anywhere else.

The magics act on one session: the one bound with ``use()`` or ``%lakesession login``, else
the one behind ``lakesession.spark()``.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..errors import NoSessionError
from . import _html

if TYPE_CHECKING:
    from ..session import Session

_active: Session | None = None

DEVICE_CLIENT_ID = "lakesession-cli"


def use(session: Session) -> Session:
    """Bind the magics and view functions to ``session`` (a ``lakesession.Session``)."""
    global _active
    _active = session
    return session


def active_session() -> Session:
    from .._connect import current_session

    session = _active or current_session()
    if session is None:
        raise NoSessionError(
            "no session yet. Fix: run %lakesession login (or session = lakesession.connect(...) "
            "and %lakesession use session)."
        )
    return session


def widgets_available() -> bool:
    """True in a Jupyter kernel with ipywidgets installed (front ends there can render widgets)."""
    if os.environ.get("LAKESESSION_WIDGETS", "").lower() in ("0", "false", "no"):
        return False
    try:
        import ipywidgets  # noqa: F401
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def _want(widget: bool | None) -> bool:
    return widgets_available() if widget is None else widget


def status(session: Session | None = None, *, widget: bool | None = None) -> Any:
    """Who the session acts as and when the token expires (live countdown as a widget)."""
    s = session or active_session()
    if _want(widget):
        from ._widgets import StatusWidget

        return StatusWidget(s)
    st = s.reports.status()
    ident = st.get("identity") or {}
    text = (
        f"{ident.get('principal')} ({ident.get('kind')} via {ident.get('issuer')}) — token expires in "
        f"{_html.duration(None if ident.get('expires_at') is None else ident['expires_at'] - st['time'])}; "
        f"catalog {st.get('catalog_name')} at {st.get('uri')}"
    )
    return _html.HTML(_html.status_html(st), text)


def grants(session: Session | None = None, *, widget: bool | None = None) -> Any:
    s = session or active_session()
    if _want(widget):
        from ._widgets import GrantsTable

        return GrantsTable(s)
    df = s.reports.grants()
    return _html.HTML(_html.grants_html(df.to_dict("records")), df.to_string(index=False))


def credentials(session: Session | None = None, *, widget: bool | None = None, auto_refresh: bool = False) -> Any:
    """Per-table credential states; as a widget the countdowns move and states flip live."""
    s = session or active_session()
    if _want(widget):
        from ._widgets import CredentialsPanel

        return CredentialsPanel(s, auto_refresh=auto_refresh)
    if auto_refresh:
        s.credential_store.refresh_all()
    df = s.reports.credentials()
    cols = ["engine", "table", "mode", "state", "seconds_left", "refreshes", "last_error"]
    return _html.HTML(_html.credentials_html(df.to_dict("records")), df[cols].to_string(index=False))


def audit(
    session: Session | None = None,
    *,
    since: str | float | None = None,
    action: str | None = None,
    widget: bool | None = None,
) -> Any:
    """The session's accesses (filterable, with a timeline)."""
    s = session or active_session()
    if _want(widget):
        from ._widgets import AuditPanel

        return AuditPanel(s, since=since, action=action)
    import pandas as pd

    from ._widgets import parse_since

    df = s.reports.audit()
    bound = parse_since(since)
    if bound is not None:
        df = df[df["time"] >= pd.Timestamp(bound, unit="s", tz="UTC")]
    if action:
        df = df[df["action"] == action]
    rows = df.to_dict("records")
    points = [(r["time"].timestamp(), str(r["decision"]), f"{r['action']} {r['object']}") for r in rows]
    return _html.HTML(_html.timeline_svg(points) + _html.audit_html(rows), df.to_string(index=False))


def chain(name: str, session: Session | None = None, *, widget: bool | None = None) -> Any:
    """The view chain behind ``ns.view``: object, security model, user in effect, decision."""
    s = session or active_session()
    node = s.chain(name)
    if _want(widget):
        from ._widgets import ChainTree

        return ChainTree(s, node)
    return node  # ChainNode has its own _repr_html_ and text tree


def login(
    catalog: str | None = None,
    *,
    device: bool = False,
    client_credentials: bool = False,
    uri: str | None = None,
    issuer: str | None = None,
    client_id: str | None = None,
) -> Any:
    """Connect (configured catalog, or the embedded default), log in now, bind the magics, show status."""
    import dataclasses

    from .._connect import connect_with, replace_current
    from .._settings import Settings
    from ._progress import DeviceLoginProgress

    given = {k: v for k, v in {"uri": uri, "issuer": issuer, "client_id": client_id}.items() if v}
    settings = Settings.resolve(catalog, given)  # once: the flags, then LAKESESSION_*, then the config file
    progress = None
    if device:
        if not (catalog or settings.issuer):
            raise NoSessionError(
                "--device needs an OIDC issuer. Fix: pass --issuer URL (and --uri URI), set "
                "LAKESESSION_ISSUER, or name a configured catalog."
            )
        progress = DeviceLoginProgress()
        settings = dataclasses.replace(
            settings,
            on_prompt=progress,
            client_id=settings.client_id or DEVICE_CLIENT_ID,
            given=(settings.given or frozenset()) | {"on_prompt", "client_id"},
        )
    ok = False
    try:
        s = connect_with(settings, catalog=catalog)
        kind = getattr(s.identity, "kind", None)  # waits for an embedded catalog to start
        if client_credentials and kind != "client_credentials":
            raise NoSessionError(
                f"--client-credentials, but the configuration gives a {kind} login. Fix: set "
                "LAKESESSION_CREDENTIAL=client_id:secret (never in the notebook) or configure the catalog."
            )
        s.identity.token()  # log in now: a wrong secret shows here, not at the first query
        ok = True
    finally:
        if progress is not None:
            progress.finish(ok)
    use(s)
    # one identity at a time: lakesession.spark() now returns this session's Spark, and the session
    # this login replaces is closed (its SparkSession no longer reaches the catalog)
    replace_current(s)
    return status(s)


def run_sql(query: str, *, limit: int = 20, session: Session | None = None) -> Any:
    """Spark SQL through the session (``Session.sql``: DEFINER views work), with job progress and a row limit."""
    from IPython.display import display

    from ._progress import SparkJobProgress, start_spark

    s = session or active_session()
    spark = start_spark(s)
    run = getattr(s, "sql", None) or spark.sql
    first = next((ln.strip() for ln in query.splitlines() if ln.strip()), "")
    with SparkJobProgress(spark, description=first):
        df = run(query)
        pdf = df.limit(limit + 1).toPandas() if df.columns else None
    if pdf is None:
        print("OK")
        return df
    display(pdf.head(limit))
    if len(pdf) > limit:
        print(f"(first {limit} rows; %%lakesql --limit N shows more)")
    return df
