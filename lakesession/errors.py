"""Every exception the client half of lakesession raises on purpose, in one tree (httpx's ``_exceptions.py`` habit).

Catch ``LakesessionError`` to handle anything lakesession raises on purpose; catch a subclass
to handle one concern. Every message ends with a hint on how to fix the problem, and none
ever contains a token, refresh token, client secret, storage key or device code.

```
LakesessionError
├── ConfigError (ValueError)              a configuration mistake: bad value, undefined catalog, unreadable file
│   ├── (pyspark's CapturedException)     an unknown warehouse, raised by Spark (lakesession._spark.errors)
│   ├── UnknownOptionError (TypeError)    an option no part of lakesession knows (a typo?)
│   ├── UnknownWarmupError                a start-up warm-up name that does not exist: lists the valid ones
│   ├── CatalogServerMissingError         the embedded catalog or `serve` in the slim lakesession-client install
│   ├── SparkMissingError                 Spark (`spark()`, `sql()`) in an install without pyspark
│   ├── ClientMissingError                the client (`connect()`, `spark()`) in the lakesession-catalog install
│   └── RawPathsUnavailableError          a raw s3a:// read in a Spark session without S3A (no location credentials, own jars)
├── SessionError                          the Session itself
│   ├── SessionClosedError                the Session was closed (or replaced): use the new one
│   └── NoSessionError                    the notebook has no session yet: log in first
├── IdentityError                         getting the user's token (lakesession.identity); one line
│   ├── LoginRequiredError                no (usable) login: log in again
│   ├── TokenRefreshError                 the issuer is unreachable / failing (transient; recovers)
│   │   └── IssuerUnreachableError        never reached where tokens come from: a wrong address (check uri=)
│   ├── ScopeError                        the issuer refused the scope sent (invalid_scope): says what it expects
│   └── DeviceFlowError                   the device-code login did not complete
│       └── SignInBusyError               the issuer answered 429/503: says when to try again (Retry-After)
├── CatalogAccessError                    the catalog refused (401/403) or failed (5xx, timeout) a request
│   ├── (pyspark's CapturedException)     the same, raised by Spark SQL (lakesession._spark.errors)
│   ├── CatalogUnreachableError           never reached the catalog: a wrong address (check uri=); no retries
│   └── CapabilityError                   the catalog does not offer what was asked (remote signing, grants)
├── TableNotFoundError (LookupError)      no such table: suggests close names (also pyiceberg's NoSuchTableError /
│                                         pyspark's AnalysisException, by where it was raised)
├── ViewChainError                        a view chain cannot be resolved: cycle, too deep, unparsable SQL
├── EngineRefusedError                    the trusted engine refused a request: names the sandbox rule or limit
├── EngineUnavailableError                the trusted engine stopped answering (killed, restarted, unreachable)
├── CredentialsError                      a table's vended storage credentials (lakesession.credentials)
│   ├── CredentialsRevokedError           the catalog refused a refresh (403): the grant is gone
│   └── CredentialsRefreshError           expired, and the catalog could not refresh them
├── StorageAccessError                    the object store refused a table's read/write (read-only, revoked, expired)
│   └── (pyspark's CapturedException)     the same, raised by a Spark job (lakesession._spark._denials)
├── JarResolutionError (RuntimeError)     Spark's jars could not be resolved
│   └── JavaNotFoundError                 no Java the Spark in use supports (4.x: 17/21; 3.5: 8/11/17)
└── MagicError                            a failed ``%lakesession`` magic (shown as one line)
```

Each class is defined here and re-exported by the room that raises it (``lakesession.identity``,
``lakesession.credentials``, …), so both import paths name the same class. Builtin bases
(``ValueError``, ``TypeError``, ``RuntimeError``) are kept where callers relied on them.
"""

from __future__ import annotations

__all__ = [
    "CapabilityError",
    "CatalogAccessError",
    "CatalogServerMissingError",
    "CatalogUnreachableError",
    "ClientMissingError",
    "ConfigError",
    "CredentialsError",
    "CredentialsRefreshError",
    "CredentialsRevokedError",
    "DeviceFlowError",
    "EngineRefusedError",
    "EngineUnavailableError",
    "IdentityError",
    "IssuerUnreachableError",
    "JarResolutionError",
    "JavaNotFoundError",
    "LakesessionError",
    "LoginRequiredError",
    "MagicError",
    "NoSessionError",
    "RawPathsUnavailableError",
    "ScopeError",
    "SessionClosedError",
    "SessionError",
    "SignInBusyError",
    "SparkMissingError",
    "StorageAccessError",
    "TableNotFoundError",
    "TokenRefreshError",
    "UnknownOptionError",
    "UnknownWarmupError",
    "ViewChainError",
]

RELOAD_HINT = "reload the table (session.table(...)) once the catalog is reachable"


class LakesessionError(Exception):
    """Base class of all errors raised by the lakesession client.

    Every one renders as one red line in IPython/Jupyter (``_render_traceback_``, which IPython's
    ``showtraceback`` uses instead of a traceback), with or without ``%load_ext lakesession``: the message
    says what went wrong and the fix; the traceback is the caller's to ask for (``%tb``, ``LAKESESSION_TRACEBACK``).
    """

    def _render_traceback_(self) -> list[str]:
        return [f"\x1b[31mlakesession: {one_line(self)}\x1b[0m"]


def one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (a message never needs its line breaks to be understood)."""
    return " ".join(part.strip() for part in str(exc).splitlines() if part.strip()) or type(exc).__name__


class _OneLine:
    """Kept for the classes that name it: every ``LakesessionError`` renders as one line now."""


# -- configuration ------------------------------------------------------------------------------------------
class ConfigError(LakesessionError, ValueError):
    """A configuration mistake: a bad value, a catalog that is not defined, or a file that cannot be read."""


class UnknownOptionError(ConfigError, TypeError):
    """An option nothing in lakesession knows (``TypeError`` like an unexpected keyword argument)."""


class UnknownWarmupError(ConfigError):
    """A warm-up name (``warmups=`` / ``LAKESESSION_WARMUPS``) that is not one of ``lakesession._spark._plan.WARMUPS``."""


#: How to get the full distribution (the catalog server: the embedded default, `lakesession serve`), as a user
#: can do it: no package index has `lakesession`, so the install names a checkout or the wheel built from one.
FULL_INSTALL = (
    "the full distribution: `pip install -e .` from a checkout of the repository, "
    "or its wheel (`python -m build` there, then `pip install dist/lakesession-*.whl`)"
)


class RawPathsUnavailableError(_OneLine, ConfigError):
    """A raw ``s3a://`` read in a Spark session that has no S3A (``lakesession._spark._rawpaths``): the catalog
    offers no credentials by path, Spark was started with the user's own jars, the line has no wiring (Spark 3.5
    on Java 8/11); one line naming which and the fix."""


# -- the session ----------------------------------------------------------------------------------------------
class CatalogServerMissingError(ConfigError):
    """The catalog server is not installed: the slim ``lakesession-client`` distribution leaves it out."""

    def __init__(self, wanted: str, cause: str = "") -> None:
        because = f" ({cause})" if cause else ""
        super().__init__(
            f"{wanted} needs lakesession's catalog server, which this install does not include{because}. "
            f"Install {FULL_INSTALL}; or connect to a running catalog: "
            'lakesession.connect(uri="https://…") or LAKESESSION_URI.'
        )


#: How to get the client (``lakesession-client``: ``connect()``, ``spark()``, the ``lakesession`` command) from a checkout
CLIENT_INSTALL = "lakesession-client: `pip install ./core ./client` from a checkout of the repository"


class ClientMissingError(_OneLine, ConfigError):
    """The client half is not installed: ``lakesession-catalog`` (the server alone) ships only the package's shared
    files besides the server, so ``lakesession.connect``/``spark`` name the install instead of a bare import error."""

    def __init__(self, wanted: str, cause: str = "") -> None:
        because = f" ({cause})" if cause else ""
        super().__init__(
            f"{wanted} is lakesession's client, which this install (the catalog server alone) does not include"
            f"{because}. Fix: install {CLIENT_INSTALL}, or {FULL_INSTALL}."
        )


class SparkMissingError(_OneLine, ConfigError):
    """pyspark is not installed (the client distributions depend on it, but it can be uninstalled or shadowed): one
    line naming the install that adds it, instead of a ``ModuleNotFoundError`` from deep inside ``spark()``."""

    def __init__(self, wanted: str, cause: str = "") -> None:
        because = f" ({cause})" if cause else ""
        super().__init__(
            f"{wanted} needs pyspark, which this install does not include{because}. "
            "Fix: pip install 'pyspark>=3.5,<4.2' (the lakesession and lakesession-client distributions "
            "include it); connect(), session.table() and session.grants() work without it."
        )


class SessionError(LakesessionError):
    """The Session cannot do what was asked in its current state."""


class SessionClosedError(SessionError):
    """The Session was closed (or replaced by another identity's); its gateway no longer serves Spark."""


class NoSessionError(_OneLine, SessionError):
    """The notebook has no session yet."""


# -- identity ---------------------------------------------------------------------------------------------------
class IdentityError(_OneLine, LakesessionError):
    """The user's token could not be obtained or used. Shown as one line: each message names its fix
    (log in again, check the client secret, …), and a traceback into the token code helps nobody."""


class LoginRequiredError(IdentityError):
    """There is no usable login (none yet, or the refresh token is dead): the user must log in again."""


class TokenRefreshError(IdentityError):
    """The issuer could not be reached or failed (transient): later calls try again and recover."""


#: what to check when an address was never reached (the catalog's; tokens come from ``{uri}/v1/oauth/tokens``
#: unless token_url=/issuer= say otherwise)
ADDRESS_SETTING = "uri= (LAKESESSION_URI)"


class IssuerUnreachableError(TokenRefreshError):
    """Where tokens come from could not be reached and no token ever came from it: most likely a wrong address,
    so no retries and no "usually temporary". ``url`` is that address; ``setting`` the one to check."""

    def __init__(self, url: str, detail: str, setting: str = ADDRESS_SETTING):
        super().__init__(
            f"Cannot reach {url} ({detail}); no token was ever obtained from it, so the address is likely wrong. "
            f"Fix: check {setting}."
        )
        self.url = url
        self.setting = setting


class ScopeError(IdentityError):
    """The issuer refused the requested scope (OAuth ``invalid_scope``); the message names the scope sent
    and what the issuer's discovery (``scopes_supported``) or a known catalog (Polaris) expects."""

    def __init__(self, message: str, sent: str | None = None, expected: list[str] | None = None):
        super().__init__(message)
        self.sent = sent
        self.expected = list(expected or [])


class DeviceFlowError(IdentityError):
    """The device-code login (RFC 8628) did not complete: denied, expired or timed out."""


class SignInBusyError(DeviceFlowError):
    """The issuer's sign-in service answered 429 or 503 (a flood, a rate limit): one line naming the status and
    the server's ``Retry-After``. ``status`` is that HTTP status; ``retry_after`` the seconds (None if not said)."""

    def __init__(self, message: str, status: int, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


# -- the catalog ------------------------------------------------------------------------------------------------
class CatalogAccessError(LakesessionError):
    """The catalog refused or failed a request; ``str()`` is the catalog's message.

    ``kind`` is ``forbidden``, ``not authorized``, ``catalog unavailable``, ``catalog failure`` or
    ``catalog error``; ``status`` the HTTP status when one was seen (None for a timeout).
    """

    def __init__(self, message: str, kind: str, java_class: str | None = None, status: int | None = None):
        super().__init__(message)
        self.kind = kind
        self.java_class = java_class
        self.status = status


class CatalogUnreachableError(CatalogAccessError):
    """The catalog could not be reached and never was in this session: most likely a wrong address (fail fast,
    no retries). ``url`` is the address tried; ``setting`` the one to check."""

    def __init__(self, url: str, detail: str, setting: str = ADDRESS_SETTING):
        super().__init__(unreachable_message(url, detail, setting), "catalog unreachable")
        self.url = url
        self.setting = setting


def unreachable_message(url: str, detail: str, setting: str = ADDRESS_SETTING) -> str:
    """The one line for a catalog this session never reached (Python and Spark say the same)."""
    return (
        f"Cannot reach the catalog at {url} ({detail}); this session never reached it, so the address is likely "
        f"wrong. Fix: check {setting}."
    )


class CapabilityError(_OneLine, CatalogAccessError):
    """The catalog does not offer what was asked (remote signing, a grants endpoint); the message
    names what its ``/v1/config`` answered. ``capability`` is what was asked; ``config`` that answer (secret-free)."""

    def __init__(
        self, message: str, capability: str, config: dict[str, object] | None = None, status: int | None = None
    ):
        super().__init__(message, "capability", status=status)
        self.capability = capability
        self.config = dict(config or {})


class TableNotFoundError(LakesessionError, LookupError):
    """A table that does not exist (or that the user may not see): the message names it and suggests close names
    from those the user may list (``suggestions``). From Python it is pyiceberg's ``NoSuchTableError`` too; from
    Spark, pyspark's ``AnalysisException`` too, so code catching those keeps working."""

    def __init__(self, message: str, table: str | None = None, suggestions: list[str] | None = None):
        super().__init__(message)
        self.table = table
        self.suggestions = list(suggestions or [])


def did_you_mean(name: str, known: list[str]) -> list[str]:
    """Up to three of ``known`` close to ``name`` (difflib): by the whole name, else by the last part alone."""
    import difflib

    whole = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(whole), n=3, cutoff=0.75)
    if close:
        return [whole[c] for c in close]
    leaf = name.rsplit(".", 1)[-1].lower()
    by_leaf: dict[str, list[str]] = {}
    for k in known:
        by_leaf.setdefault(k.rsplit(".", 1)[-1].lower(), []).append(k)
    return [k for c in difflib.get_close_matches(leaf, list(by_leaf), n=3, cutoff=0.6) for k in by_leaf[c]][:3]


class ViewChainError(LakesessionError):
    """A view chain that cannot be resolved (cycle, too deep, unparsable SQL, unexpected answer)."""


class EngineRefusedError(_OneLine, LakesessionError):
    """The trusted engine (``lakesession engine``) refused a request; ``rule`` names the sandbox rule
    (``user-code``, ``path-access``, ``settings`` …, docs: *Run the trusted engine*)."""

    def __init__(self, message: str, rule: str):
        super().__init__(message)
        self.rule = rule


class EngineUnavailableError(_OneLine, LakesessionError):
    """The trusted engine stopped answering (killed, restarting, unreachable) or ended the session: the
    message names the engine; ``address`` is its URL. A query that was running there is lost."""

    def __init__(self, message: str, address: str):
        super().__init__(message)
        self.address = address


# -- vended storage credentials ---------------------------------------------------------------------------------
class CredentialsError(LakesessionError):
    """A table's vended storage credentials are missing or unusable."""

    def __init__(self, message: str, table: str | None = None):
        super().__init__(message)
        self.table = table


class CredentialsRevokedError(CredentialsError):
    """The catalog refused to refresh the table's credentials (HTTP 403): access was revoked."""

    def __init__(self, table: str, detail: str | None = None):
        reason = f" ({detail})" if detail else ""
        super().__init__(
            f"Access to table {table} was revoked: the catalog refused to refresh its storage credentials{reason}. "
            f"Ask for the grant again, then reload the table with session.table({table!r}).",
            table,
        )


class CredentialsRefreshError(CredentialsError):
    """The table's credentials expired and could not be refreshed (catalog unreachable or failing)."""

    def __init__(self, table: str, detail: str | None = None):
        reason = f": {detail}" if detail else ""
        super().__init__(
            f"The storage credentials of table {table} expired and could not be refreshed{reason}. "
            f"Later reads try again; or {RELOAD_HINT}.",
            table,
        )


# -- the object store ----------------------------------------------------------------------------------------------
class StorageAccessError(_OneLine, LakesessionError):
    """The object store refused a read or write of a table's files (S3 AccessDenied, ExpiredToken, …).

    ``table`` (None when unknown), ``operation`` (read, write, delete), ``principal``, ``reason`` (the likely
    cause: ``read-only grant``, ``revoked``, ``expired`` or ``denied``), ``code`` (the store's error code) and
    ``path`` (the object, when the store named it). The store's own exception is ``__cause__`` (pyiceberg) or
    ``java_error`` (Spark, with ``log``: the Spark log file).
    """

    def __init__(
        self,
        message: str,
        *,
        table: str | None = None,
        operation: str = "access",
        principal: str | None = None,
        reason: str = "denied",
        code: str = "AccessDenied",
        path: str | None = None,
    ):
        super().__init__(message)
        self.table = table
        self.operation = operation
        self.principal = principal
        self.reason = reason
        self.code = code
        self.path = path


# -- Spark's jars ---------------------------------------------------------------------------------------------------
class JarResolutionError(LakesessionError, RuntimeError):
    """The Spark jar set could not be resolved; the message says how to fix it."""


class JavaNotFoundError(JarResolutionError):
    """No Java the Spark in use supports was found (Spark 4.x: 17 or 21; 3.5: 8, 11 or 17): the message names
    the supported versions, what was found, and the fix."""


# -- notebooks ----------------------------------------------------------------------------------------------------
class MagicError(_OneLine, LakesessionError):
    """A failed magic: IPython shows just this one line, not a traceback."""
