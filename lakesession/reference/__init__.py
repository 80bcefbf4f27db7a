"""The reference Iceberg REST catalog: OIDC issuer, RBAC, audit — in-process or standalone.

It never imports the client half of lakesession. Names are resolved on first use (PEP 562):
importing one submodule (e.g. the S3 emulator) must not import the whole server.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bootstrap import Bootstrap, BootstrapError
    from .server import Admin, ClientCredentials, ReferenceCatalog, start
    from .settings import ServerSettings

_WHERE = {
    "Admin": ".server",
    "Bootstrap": ".bootstrap",
    "BootstrapError": ".bootstrap",
    "ClientCredentials": ".server",
    "ReferenceCatalog": ".server",
    "ServerSettings": ".settings",
    "start": ".server",
}

__all__ = ["Admin", "Bootstrap", "BootstrapError", "ClientCredentials", "ReferenceCatalog", "ServerSettings", "start"]


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where, __name__), name)
    globals()[name] = value  # once
    return value
