"""JupyterLab integration: a server extension serving what each kernel's lakesession sessions publish.

The kernel is the source of truth: ``lakesession.lab._publisher`` (started by every ``Session``
inside an IPython kernel) writes the sessions' secret-free ``Session.status()`` to
``<runtime dir>/lakesession/kernel-<kernel id>.json`` (mode 0600). The server extension
(``GET /lakesession/status``) returns those of the kernels it still runs, and the lab extension
(``extension/``: a status-bar item and a side panel) polls it and counts down expiries locally.

Keep this module free of Jupyter imports: kernels import ``lakesession.lab._publisher``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["_jupyter_labextension_paths", "_jupyter_server_extension_points", "_load_jupyter_server_extension"]


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "lakesession.lab"}]


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    """For ``jupyter labextension develop``: the built frontend (``lakesession/lab/labextension``)."""
    return [{"src": "labextension", "dest": "lakesession"}]


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from ._handlers import setup_handlers

    setup_handlers(serverapp)
