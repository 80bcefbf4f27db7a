"""``%lakesession`` line magic and ``%%lakesql`` cell magic.

Failures show as one readable line with the fix (``MagicError`` renders its own one-line
traceback), never a Java stack trace; with the extension loaded, any ``LakesessionError`` or
``CatalogAccessError`` raised in a cell is shown the same way.
"""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.display import display

from ..errors import LakesessionError, MagicError
from . import _views

USAGE = """%lakesession login [CATALOG] [--device | --client-credentials] [--uri URI] [--issuer URL] [--client-id ID]
%lakesession use VARIABLE          bind the magics to a Session held in a notebook variable
%lakesession status | grants | credentials [--auto-refresh] | audit [--since 10m] [--action A]
%lakesession resolve NS.VIEW
%%lakesql [--limit 20] [--out NAME]   Spark SQL through the session"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:
        raise MagicError(f"{message}. Usage:\n{USAGE}")


def split_args(line: str) -> list[str]:
    """The magic's words, without a trailing ``# comment`` (written after magics the way shells allow).

    A ``#`` starts a comment only at the start of a word, outside quotes, as in a shell: ``'a # b'`` and
    ``x#y`` stay arguments; ``shlex(comments=True)`` alone would cut ``x#y`` to ``x``.
    """
    quote = ""
    prev_space = True
    i = 0
    while i < len(line):
        ch = line[i]
        if quote:
            if ch == "\\" and quote == '"':
                i += 1
            elif ch == quote:
                quote = ""
        elif ch == "\\":
            i += 1
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev_space:
            line = line[:i]
            break
        prev_space = not quote and ch.isspace()
        i += 1
    try:
        return shlex.split(line)
    except ValueError as exc:  # an unclosed quote
        raise MagicError(f"{exc}. Usage:\n{USAGE}") from None


def explain(exc: BaseException) -> str:
    """One secret-free line for a failure, ending with how to fix it."""
    from .._spark.errors import CatalogAccessError

    if isinstance(exc, MagicError):
        return str(exc)
    if isinstance(exc, CatalogAccessError) and "Fix:" in str(exc):  # it names its own fix (table, privilege)
        return _first(str(exc), 600)
    if isinstance(exc, CatalogAccessError):
        fix = {
            "forbidden": "ask the catalog's administrator for a grant (see %lakesession grants)",
            "not authorized": "log in again (%lakesession login)",
        }.get(exc.kind, "retry; if it persists, ask the catalog's operator")
        return f"the catalog refused the request ({exc.kind}): {_first(str(exc))}. Fix: {fix}."
    if isinstance(exc, LakesessionError):
        return _first(str(exc), 400)
    from pyiceberg.exceptions import ForbiddenError, UnauthorizedError

    if isinstance(exc, ForbiddenError):
        return f"the catalog refused the request: {_first(str(exc))}. Fix: ask for a grant (see %lakesession grants)."
    if isinstance(exc, UnauthorizedError):
        return f"the catalog rejected your login: {_first(str(exc))}. Fix: log in again (%lakesession login)."
    name = type(exc).__name__
    try:
        from pyspark.errors import PySparkException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        PySparkException = ()  # type: ignore[assignment,misc]
    if isinstance(exc, PySparkException):  # AnalysisException, ParseException, …: Spark's own first line
        return f"Spark: {_first(str(exc))}. Fix: correct the SQL (names are lake.<namespace>.<table>)."
    if name in ("Py4JJavaError", "Py4JError", "Py4JNetworkError"):
        java = getattr(exc, "java_exception", None)
        text = str(java.toString()) if java is not None else str(exc)
        return f"the Spark JVM failed: {_first(text)}. Fix: check the SQL and the session (%lakesession status)."
    return f"{name}: {_first(str(exc))}"


def _first(text: str, limit: int = 300) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    for marker in ("\tat ", " at org.", " at java."):
        line = line.split(marker)[0]
    line = line.rstrip(".")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def show_one_line(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> None:
    """``set_custom_exc`` handler: a lakesession failure in any cell, as one line (still an error for the kernel)."""
    err = value if isinstance(value, MagicError) else MagicError(explain(value))
    shell.showtraceback((MagicError, err, None))


@magics_class
class LakesessionMagics(Magics):
    """The magics; the session they act on is ``_views.active_session()``."""

    #: the view the magic displayed last (the object behind the output: its HTML, its widget)
    last_view: Any = None

    @line_magic
    def lakesession(self, line: str) -> None:
        """Log in, and show status, grants, credentials, audit, view chains — see ``%lakesession help``.

        Each view is displayed, not returned: a cell of several magics (the README's block) shows every one of
        them, where a returned value shows only when it is the cell's last expression."""
        try:
            view = self._dispatch(split_args(line))
        except MagicError:
            raise
        except Exception as exc:
            raise MagicError(explain(exc)) from None
        if view is not None:
            type(self).last_view = view
            display(view)

    def _user_ns(self) -> dict[str, Any]:
        """The notebook's variables (a registered magic always has its shell)."""
        assert self.shell is not None
        return self.shell.user_ns

    def _dispatch(self, argv: list[str]) -> Any:
        if not argv or argv[0] in ("help", "-h", "--help"):
            print(USAGE)
            return None
        cmd, rest = argv[0], argv[1:]
        p = _Parser(prog=f"%lakesession {cmd}", add_help=False)
        if cmd == "login":
            p.add_argument("catalog", nargs="?")
            flow = p.add_mutually_exclusive_group()
            flow.add_argument("--device", action="store_true")
            flow.add_argument("--client-credentials", action="store_true")
            p.add_argument("--uri")
            p.add_argument("--issuer")
            p.add_argument("--client-id")
            a = p.parse_args(rest)
            return _views.login(
                a.catalog,
                device=a.device,
                client_credentials=a.client_credentials,
                uri=a.uri,
                issuer=a.issuer,
                client_id=a.client_id,
            )
        if cmd == "use":
            p.add_argument("variable")
            a = p.parse_args(rest)
            user_ns = self._user_ns()
            if a.variable not in user_ns:
                raise MagicError(
                    f"no variable {a.variable!r} in the notebook. Fix: session = lakesession.connect(...) first."
                )
            _views.use(user_ns[a.variable])
            return _views.status()
        if cmd in ("status", "grants"):
            p.parse_args(rest)
            return _views.status() if cmd == "status" else _views.grants()
        if cmd == "credentials":
            p.add_argument("--auto-refresh", action="store_true")
            return _views.credentials(auto_refresh=p.parse_args(rest).auto_refresh)
        if cmd == "audit":
            p.add_argument("--since")
            p.add_argument("--action")
            a = p.parse_args(rest)
            return _views.audit(since=a.since, action=a.action)
        if cmd == "resolve":
            p.add_argument("name")
            return _views.chain(p.parse_args(rest).name)
        raise MagicError(f"unknown command {cmd!r}. Usage:\n{USAGE}")

    @cell_magic
    def lakesql(self, line: str, cell: str) -> None:
        """Run the cell as Spark SQL through the session; show up to ``--limit`` rows (default 20)."""
        p = _Parser(prog="%%lakesql", add_help=False)
        p.add_argument("--limit", type=int, default=20)
        p.add_argument("--out")
        try:
            a = p.parse_args(split_args(line))
            df = _views.run_sql(cell, limit=a.limit)
        except MagicError:
            raise
        except Exception as exc:
            raise MagicError(explain(exc)) from None
        if a.out:
            self._user_ns()[a.out] = df


def load(shell: Any) -> None:
    shell.register_magics(LakesessionMagics)
    from pyiceberg.exceptions import ForbiddenError, UnauthorizedError

    from .._spark.errors import CatalogAccessError

    shell.set_custom_exc((LakesessionError, CatalogAccessError, ForbiddenError, UnauthorizedError), show_one_line)


def unload(shell: Any) -> None:
    shell.set_custom_exc((), None)
