"""A session's settings, resolved once: arguments > ``LAKESESSION_*`` environment > config file.

``Settings`` holds every option ``connect()`` and ``spark()`` take, each field documented where it is
declared, and is the one place that reads their ``LAKESESSION_*`` variables (``Settings.resolve``) and
checks their enumerated values (``__post_init__``: ``access``, ``storage``, ``warmups``, ``clouds``), so
the modules that use a setting take it from here. ``ENVIRONMENT`` lists every ``LAKESESSION_*``
variable the client reads: the options' own, and the exceptions read where they are used, each with
its reader and why (``lakesession._environment``: process-wide switches read before or without a
Session, by the CLI, a child process or the JVM-launch helpers; ``LAKESESSION_JARS`` among them, which
the ``auto`` jar mode reads). Server-side variables (``lakesession/reference/``), the JupyterHub
spawner's and the trusted engine's own (``lakesession.engine._config``) are not the client's settings
and stay with their readers. The configuration reference in the docs is generated from both, and
tests fail on a variable the code reads that is not listed here, or on an option's variable read
anywhere else, so the reference cannot fall behind the code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._environment import PROCESS_VARIABLES, Variable
from .errors import ConfigError, UnknownOptionError

__all__ = ["ENVIRONMENT", "Settings", "Variable", "check_access", "check_storage"]

ACCESS_MODES = ("vended-credentials", "remote-signing")
STORAGE_MODES = ("s3-emulator", "file")


def check_access(access: object) -> str:
    """``access`` if it is a mode lakesession has; the one check behind ``Settings``, ``Session`` and ``table()``."""
    if access not in ACCESS_MODES:
        raise ConfigError(
            f"access must be one of {', '.join(ACCESS_MODES)}, not {access!r}. "
            f"Fix: access='{ACCESS_MODES[0]}' (the default) or access='{ACCESS_MODES[1]}'"
        )
    return str(access)


def check_storage(storage: str | None) -> str:
    """The embedded catalog's storage mode (default ``s3-emulator``), lower-cased; a ConfigError names the modes."""
    mode = (storage or STORAGE_MODES[0]).lower()
    if mode not in STORAGE_MODES:
        raise ConfigError(f"embedded storage {mode!r}: use 's3-emulator' (default) or 'file'")
    return mode


def _clients(value: str) -> list[str] | None:
    return [c.strip() for c in value.split(",") if c.strip()] or None


def _data_dir(value: str) -> Path:
    return Path(value).expanduser() / "embedded"


def _seconds(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(
            f"LAKESESSION_EMBEDDED_CREDENTIAL_TTL={value!r} is not a whole number of seconds. Fix: set it to e.g. 3600"
        ) from None


#: how a variable's text becomes its field's value (the others are taken as they are)
FROM_ENVIRONMENT: dict[str, Callable[[str], Any]] = {
    "gateway_clients": _clients,
    "data_dir": _data_dir,
    "credential_ttl": _seconds,
}


def _opt(group: str, doc: str, env: str | None = None, default: Any = None, file: bool = False) -> Any:
    """A ``Settings`` field: its group (for the docs), meaning, variable and whether config files may set it."""
    return field(default=default, metadata={"group": group, "doc": doc, "env": env, "file": file})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a session is built from. ``Settings.resolve()`` merges the three sources once.

    ``Settings(...)`` itself holds just what it is given (checked on construction); ``connect(settings=...)``
    and ``spark(settings=...)`` take it as arguments, which their own keyword arguments override field by
    field, and resolve the environment and config file beneath both.
    """

    # the catalog and who you are there (also settable per catalog in the config file)
    uri: str | None = _opt("catalog", "Catalog base URI; unset = the embedded default.", "LAKESESSION_URI", file=True)
    warehouse: str | None = _opt("catalog", "Warehouse to request.", "LAKESESSION_WAREHOUSE", file=True)
    token: str | None = _opt("identity", "A static bearer token.", "LAKESESSION_TOKEN", file=True)
    credential: str | None = _opt(
        "identity", "`client_id:client_secret` for the client-credentials flow.", "LAKESESSION_CREDENTIAL", file=True
    )
    token_url: str | None = _opt(
        "identity", "OAuth token endpoint (default `{uri}/v1/oauth/tokens`).", "LAKESESSION_TOKEN_URL", file=True
    )
    issuer: str | None = _opt(
        "identity",
        "OIDC issuer (discovery); with `client_id` and no secret: device login.",
        "LAKESESSION_ISSUER",
        file=True,
    )
    client_id: str | None = _opt("identity", "OAuth client id.", "LAKESESSION_CLIENT_ID", file=True)
    client_secret: str | None = _opt("identity", "OAuth client secret.", "LAKESESSION_CLIENT_SECRET", file=True)
    scope: str | None = _opt("identity", "OAuth scope to request.", "LAKESESSION_SCOPE", file=True)
    identity: str | None = _opt(
        "identity",
        "`jupyterhub` (the hub user's token) or `none` (a catalog without authentication).",
        "LAKESESSION_IDENTITY",
        file=True,
    )
    on_prompt: Callable[..., Any] | None = _opt("identity", "Called with the device-login prompt (code and URL).")
    # Spark
    catalog_name: str = _opt("spark", "Catalog name inside Spark, also the session's default catalog.", default="lake")
    jars: str | list[str] | None = _opt(
        "spark",
        "Jar mode `auto` (default: `LAKESESSION_JARS` if set, else the cache)/`offline`/`maven`/`cache`, or explicit "
        "jar paths.",
    )
    master: str | None = _opt("spark", "Spark master (default `local[*]`).", "LAKESESSION_SPARK_MASTER")
    remote: str | None = _opt("spark", "Spark Connect URL (`sc://host:15002`).")
    engine: str | None = _opt(
        "spark",
        "The platform's trusted engine (`sc://engine.internal:15002/;use_ssl=true`): `sql()` runs queries that read "
        "DEFINER views there; `engine()` opens a session on it.",
        "LAKESESSION_ENGINE",
        file=True,
    )
    gateway_host: str | None = _opt(
        "spark", "Gateway bind address (default 127.0.0.1; routable for cluster mode).", "LAKESESSION_GATEWAY_HOST"
    )
    gateway_clients: Sequence[str] | None = _opt(
        "spark",
        "Addresses or CIDR networks allowed to reach a routable gateway (comma-separated in the variable; "
        "default: the Spark Connect server's host, and loopback).",
        "LAKESESSION_GATEWAY_CLIENTS",
    )
    spark_conf: Mapping[str, str] | None = _opt("spark", "Extra Spark configuration.")
    gateway_options: Mapping[str, Any] | None = _opt("spark", "Advanced gateway options (timeouts, retry window).")
    assumed_credential_ttl: float | None = _opt(
        "spark", "Seconds vended keys are assumed to live when the catalog states no expiry (Nessie)."
    )
    access: str = _opt(
        "spark", "`vended-credentials` or `remote-signing` (no storage credentials at all).", default=ACCESS_MODES[0]
    )
    comet: bool = _opt(
        "spark",
        "Apache DataFusion Comet's native scans and raw `s3a://` paths, credentials from the gateway (Spark 4.1).",
        default=False,
    )
    clouds: str | Sequence[str] | None = _opt(
        "spark",
        "Iceberg's Azure and GCP bundles to give Spark beyond S3's: `adls` (`azure`), `gcs` (`gcp`), `all` "
        "(comma-separated in the variable). Added anyway when the warehouse or catalog settings name that cloud.",
        "LAKESESSION_CLOUDS",
    )
    warmups: Sequence[str] | None = _opt(
        "spark",
        "Start-up warm-ups to run: some of `classcache`, `catalog`, `embedded`, or `all` (default) or `none` "
        "(comma-separated in the variable).",
        "LAKESESSION_WARMUPS",
    )
    # the embedded default (no uri)
    data_dir: str | os.PathLike[str] | None = _opt(
        "embedded", "Embedded catalog state (default `~/.local/share/lakesession/embedded`).", "LAKESESSION_HOME"
    )
    storage: str | None = _opt("embedded", "`s3-emulator` (default) or `file`.", "LAKESESSION_EMBEDDED_STORAGE")
    credential_ttl: int | None = _opt(
        "embedded", "Vended credential lifetime in seconds.", "LAKESESSION_EMBEDDED_CREDENTIAL_TTL"
    )
    access_token_ttl: int | None = _opt("embedded", "Access-token lifetime in seconds.")
    #: the fields passed as arguments (None: every field not at its default, for ``Settings(...)`` itself)
    given: frozenset[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Check the enumerated fields here, once, so a bad value fails before anything starts."""
        check_access(self.access)
        if self.storage is not None:
            object.__setattr__(self, "storage", check_storage(self.storage))
        if self.warmups is not None:
            from ._spark._plan import resolve_warmups

            resolve_warmups(self.warmups)
        if self.clouds is not None:
            from ._spark.versions import parse_clouds

            parse_clouds(self.clouds)
        if self.given is None:
            set_ = {f.name for f in dataclasses.fields(self) if f.metadata and getattr(self, f.name) != f.default}
            object.__setattr__(self, "given", frozenset(set_))

    @property
    def explicit(self) -> dict[str, Any]:
        """The fields passed as arguments, by name: what ``connect(settings=...)`` takes from it."""
        return {n: getattr(self, n) for n in sorted(self.given or ())}

    @classmethod
    def resolve(cls, catalog: str | None = None, given: Mapping[str, Any] | None = None) -> Settings:
        """Merge the config file's catalog entry, then every option's ``LAKESESSION_*`` variable, then ``given``
        (non-None): the one place those variables are read."""
        from .config import catalog_options

        given = given or {}
        names = {f.name: f for f in dataclasses.fields(cls) if f.metadata}
        unknown = sorted(set(given) - set(names))
        if unknown:  # only reachable through dict-splatting callers
            raise UnknownOptionError(
                f"unknown options: {', '.join(unknown)}. Fix: see lakesession.connect's parameters"
            )
        merged: dict[str, Any] = {}
        for key, value in catalog_options(catalog).items():
            spec = names.get(key)
            if spec is None or not spec.metadata["file"]:
                settable = ", ".join(n for n, f in names.items() if f.metadata["file"])
                raise UnknownOptionError(
                    f"catalog {catalog or 'default'!r}: unknown key {key!r} in the config file. Fix: use one of {settable}"
                )
            merged[key] = value
        merged.update(from_environment())
        explicit = {k: v for k, v in given.items() if v is not None}
        merged.update(explicit)
        merged["given"] = frozenset(explicit)
        return cls(**merged)

    def embedded_options(self) -> dict[str, Any]:
        return {n: getattr(self, n) for n in ("storage", "credential_ttl", "access_token_ttl")}

    def session_options(self) -> dict[str, Any]:
        names = ["catalog_name", "jars", "master", "remote", "engine", "gateway_host", "gateway_clients"]
        names += ["assumed_credential_ttl", "access", "comet", "clouds", "warmups"]
        opts: dict[str, Any] = {n: getattr(self, n) for n in names}
        opts["spark_conf"] = dict(self.spark_conf or {})
        opts["gateway_options"] = dict(self.gateway_options or {})
        return opts

    def __repr__(self) -> str:  # never the token or secrets
        shown = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata}
        shown = {k: v for k, v in shown.items() if v is not None}
        for secret in ("token", "credential", "client_secret"):
            if secret in shown:
                shown[secret] = "***"
        return f"Settings({', '.join(f'{k}={v!r}' for k, v in shown.items())})"


def from_environment(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Each option whose ``LAKESESSION_*`` variable is set (and not empty), as its field's value."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        var = f.metadata.get("env") if f.metadata else None
        if var and env.get(var):
            out[f.name] = FROM_ENVIRONMENT.get(f.name, str)(env[var])
    return out


def _settings_variables() -> list[Variable]:
    return [
        Variable(f.metadata["env"], f.metadata["doc"], option=f.name)
        for f in dataclasses.fields(Settings)
        if f.metadata and f.metadata["env"]
    ]


ENVIRONMENT: tuple[Variable, ...] = (
    *_settings_variables(),
    *PROCESS_VARIABLES,
    Variable(
        "LAKESESSION_HUB_ACCESS_TOKEN",
        "Set by the JupyterHub spawner hook: the user's access token (removed from the environment at first use).",
        side="hub",
    ),
    Variable(
        "LAKESESSION_HUB_TOKEN_EXPIRES_AT", "Set by the JupyterHub spawner hook: that token's expiry.", side="hub"
    ),
    Variable(
        "LAKESESSION_PRINCIPAL_CLAIM",
        "Set by the JupyterHub spawner hook (`configure(principal_claim=...)`): the token claim shown as the "
        "principal (Keycloak: `preferred_username`; its `sub` is a UUID).",
        side="hub",
    ),
    Variable("LAKESESSION_HUB_CLIENT_SECRET", "The hub's device-login authenticator's client secret.", side="hub"),
    Variable(
        "LAKESESSION_SERVE__<KEY>",
        "`lakesession serve`: overrides a config-file key (nested with `__`).",
        side="server",
    ),
    *(
        Variable(name, doc, side="engine")
        for name, doc in (
            ("LAKESESSION_ENGINE_CATALOG", "`lakesession engine`: the catalog's base URI."),
            ("LAKESESSION_ENGINE_WAREHOUSE", "`lakesession engine`: the warehouse to request."),
            ("LAKESESSION_ENGINE_CLIENT_ID", "`lakesession engine`: its client id (a trusted service principal)."),
            ("LAKESESSION_ENGINE_CLIENT_SECRET", "`lakesession engine`: its client secret (never an argument)."),
            ("LAKESESSION_ENGINE_CLIENT_SECRET_FILE", "`lakesession engine`: a file holding its client secret."),
            ("LAKESESSION_ENGINE_ISSUER", "`lakesession engine`: the OIDC issuer of users' tokens."),
            ("LAKESESSION_ENGINE_TOKEN_URL", "`lakesession engine`: the token endpoint for RFC 8693 exchange."),
            ("LAKESESSION_ENGINE_AUDIENCES", "`lakesession engine`: accepted token audiences (comma-separated)."),
            ("LAKESESSION_ENGINE_HOST", "`lakesession engine`: the front door's bind address."),
            ("LAKESESSION_ENGINE_PORT", "`lakesession engine`: the front door's port (15002)."),
            ("LAKESESSION_ENGINE_MASTER", "`lakesession engine`: the Spark master (`local[*]`)."),
            ("LAKESESSION_ENGINE_JARS", "`lakesession engine`: the jar mode."),
        )
    ),
    Variable("LAKESESSION_SERVER_TIMING", "`1`: the catalog adds a `Server-Timing` split (benchmarks).", side="server"),
    Variable(
        "LAKESESSION_FAULT_KILL_AFTER_COMMIT",
        "Fault injection for tests: the catalog exits after saving the named mutation.",
        side="server",
    ),
)
