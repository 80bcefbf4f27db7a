"""lakesession: PySpark on Iceberg REST catalogs as your SSO identity.

import lakesession
spark = lakesession.spark()          # embedded catalog + demo user when nothing is configured
session = lakesession.connect(uri="https://catalog.example.com", credential="id:secret", token_url=...)

The public names load on first use (PEP 562): ``import lakesession`` loads no Spark, no pyiceberg REST
client and no gateway, and the catalog server (``lakesession.reference``) imports this package without
pulling the client in (tests/project/test_import_boundaries.py checks what is really loaded).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the names below are, for type checkers and IDEs (nothing is imported at run time)
    from ._connect import connect, current_session, spark
    from ._settings import Settings
    from .notebook import load_ipython_extension, unload_ipython_extension
    from .session import Session

__version__ = "0.1.0"

__all__ = [
    "Session",
    "Settings",
    "__version__",
    "connect",
    "current_session",
    "load_ipython_extension",
    "spark",
    "unload_ipython_extension",
]

#: each public name -> the module that defines it (imported by ``__getattr__`` on first use)
_HOMES = {
    "Session": ".session",
    "Settings": "._settings",
    "connect": "._connect",
    "current_session": "._connect",
    "load_ipython_extension": ".notebook",
    "spark": "._connect",
    "unload_ipython_extension": ".notebook",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use; else a submodule (``lakesession.errors``)."""
    home = _HOMES.get(name)
    if home is not None:
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if not name.startswith("__"):  # `lakesession.errors.ConfigError` after a bare `import lakesession`
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise  # the submodule exists but one of its own imports is missing: that is the error to see
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
