"""Jupyter integration: ``%load_ext lakesession`` magics, ipywidgets views, progress, HTML fallbacks.

    %load_ext lakesession
    %lakesession login                # embedded default, or the configured catalog
    %lakesession status               # who, where, token countdown (live widget)
    %%lakesql --limit 20
    SELECT * FROM lake.sales.orders

From Python: ``lakesession.notebook.status(session)`` (and ``grants``, ``credentials``, ``audit``,
``chain``) give widgets in a kernel and HTML objects elsewhere; ``use(session)`` binds the magics.
"""

from __future__ import annotations

from typing import Any

from ._views import active_session, audit, chain, credentials, grants, login, run_sql, status, use, widgets_available

__all__ = [
    "active_session",
    "audit",
    "chain",
    "credentials",
    "grants",
    "load_ipython_extension",
    "login",
    "run_sql",
    "status",
    "unload_ipython_extension",
    "use",
    "widgets_available",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext lakesession`` (or ``c.InteractiveShellApp.extensions = ["lakesession"]``)."""
    import warnings

    from ._magics import load

    # httpcore imports trio when it is installed, and trio warns once about IPython's exception
    # hook: noise in the first cell's output that the user can do nothing about
    warnings.filterwarnings(
        "ignore", message="IPython detected, but you already have a custom exception handler", category=RuntimeWarning
    )
    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    from ._magics import unload

    unload(ipython)
