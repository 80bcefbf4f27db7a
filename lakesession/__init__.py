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
import os
import sys
from types import TracebackType
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
        try:
            module = importlib.import_module(home, __name__)
        except ModuleNotFoundError as exc:  # lakesession-catalog ships the server and the core, not the client
            if exc.name != f"{__name__}{home}":
                raise
            from .errors import ClientMissingError

            raise ClientMissingError(f"lakesession.{name}", f"no module {exc.name!r}") from None
        value = getattr(module, name)
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


# -- an uncaught lakesession error in a script: its one line and where its traceback went ----------------------------
# Click and Typer print one line for a user's mistake, with a switch for the traceback; a lakesession error is the
# same (its message says what went wrong and the fix; 13-57 lines through pyspark and py4j only hide it). Here, not
# in a module of its own: `import lakesession` loads no other module (tests/project/test_import_boundaries.py).
TRACEBACK_ENV = "LAKESESSION_TRACEBACK"
_ERRORS = f"{__name__}.errors"


def _in_ipython() -> bool:
    shell = sys.modules.get("IPython")
    get = getattr(shell, "get_ipython", None)
    try:
        return get is not None and get() is not None
    except Exception:  # an IPython half torn down at exit: not a shell any more
        return False


def _public_name(exc: BaseException) -> str:
    """The class users can import (``lakesession.errors``) that ``exc`` is, rather than Spark's private subclass."""
    return next((c.__name__ for c in type(exc).__mro__ if c.__module__ == _ERRORS), type(exc).__name__)


def _save_traceback(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> str | None:
    """The full traceback in ``last-traceback.txt`` of lakesession's cache folder (the user's own, 0600, replaced
    each time: no pile of files), or None when it cannot be written."""
    import traceback
    from pathlib import Path

    override, xdg = os.environ.get("LAKESESSION_CACHE_DIR"), os.environ.get("XDG_CACHE_HOME")
    folder = Path(override).expanduser() if override else (Path(xdg) if xdg else Path.home() / ".cache") / "lakesession"
    path = folder / "last-traceback.txt"
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.writelines(traceback.format_exception(etype, value, tb))
    except (OSError, RuntimeError):  # no home, a read-only disk: the line still says how to see it
        return None
    return str(path)


def _excepthook(etype: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
    """``sys.excepthook``: two lines for a lakesession error; anything else (``KeyboardInterrupt``,
    ``SystemExit``, other errors) to the hook that was there; ``LAKESESSION_TRACEBACK=1``: Python's traceback."""
    errors = sys.modules.get(_ERRORS)
    wanted = os.environ.get(TRACEBACK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}
    if errors is None or not isinstance(value, errors.LakesessionError) or wanted or _in_ipython():
        _previous_excepthook(etype, value, tb)
        return
    path = _save_traceback(etype, value, tb)
    where = f"the traceback is in {path}; " if path else ""
    try:
        sys.stderr.write(f"lakesession: {_public_name(value)}: {errors.one_line(value)}\n")
        sys.stderr.write(f"({where}{TRACEBACK_ENV}=1 prints it here)\n")
        sys.stderr.flush()
    except Exception:  # a closed stderr: nowhere left to say it
        pass


def _install_excepthook() -> None:
    """Wrap the current hook once (a reload of this module must not wrap its own); never in IPython, which
    renders lakesession's errors itself (``_render_traceback_``) and keeps its own hook."""
    global _previous_excepthook
    current = sys.excepthook
    if (getattr(current, "__module__", None), getattr(current, "__name__", None)) == (__name__, "_excepthook"):
        return
    if not _in_ipython():
        _previous_excepthook, sys.excepthook = current, _excepthook


_previous_excepthook = globals().get("_previous_excepthook", sys.excepthook)  # a reload keeps the one it wrapped
_install_excepthook()
