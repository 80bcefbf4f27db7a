"""A session's settings, resolved once: arguments > ``LAKESESSION_*`` environment > config file.

``Settings`` holds every option ``connect()`` and ``spark()`` take, each field documented where it is
declared; ``ENVIRONMENT`` lists every ``LAKESESSION_*`` variable the client reads, including the
process-wide ones that are not session options (caches, widgets, the JupyterLab publisher). The
configuration reference in the docs is generated from both, and ``tests`` fail on a variable the
code reads that is not listed here, so the reference cannot fall behind the code.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, UnknownOptionError

__all__ = ["ENVIRONMENT", "Settings", "Variable"]

ACCESS_MODES = ("vended-credentials", "remote-signing")


@dataclass(frozen=True)
class Variable:
    """One ``LAKESESSION_*`` environment variable: its name, the option it sets (if any), what it means."""

    name: str
    doc: str
    option: str | None = None
    side: str = "client"  # client | hub | server | engine


def _opt(group: str, doc: str, env: str | None = None, default: Any = None, file: bool = False) -> Any:
    """A ``Settings`` field: its group (for the docs), meaning, variable and whether config files may set it."""
    return field(default=default, metadata={"group": group, "doc": doc, "env": env, "file": file})


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything a session is built from. ``Settings.resolve()`` merges the three sources once."""

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
        "spark", "Jar mode `auto`/`offline`/`maven`/`cache`, or explicit jar paths.", "LAKESESSION_JARS"
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
    given: frozenset[str] = field(default=frozenset(), repr=False, compare=False)  # names passed as arguments

    @classmethod
    def resolve(cls, catalog: str | None, given: Mapping[str, Any]) -> Settings:
        """Merge the config file's catalog entry, then ``LAKESESSION_*`` variables, then ``given`` (non-None)."""
        from .config import catalog_options

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
        for name, spec in names.items():
            var = spec.metadata["env"]
            if spec.metadata["file"] and var and os.environ.get(var):  # process-wide ones are read where used
                merged[name] = os.environ[var]
        explicit = {k: v for k, v in given.items() if v is not None}
        merged.update(explicit)
        merged["given"] = frozenset(explicit)
        if merged.get("access", ACCESS_MODES[0]) not in ACCESS_MODES:
            raise ConfigError(f"access must be one of {', '.join(ACCESS_MODES)}, not {merged['access']!r}")
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


def _settings_variables() -> list[Variable]:
    return [
        Variable(f.metadata["env"], f.metadata["doc"], option=f.name)
        for f in dataclasses.fields(Settings)
        if f.metadata and f.metadata["env"]
    ]


ENVIRONMENT: tuple[Variable, ...] = (
    *_settings_variables(),
    Variable("LAKESESSION_CONFIG", "The config file (default `~/.config/lakesession/config.yaml`)."),
    Variable(
        "LAKESESSION_CACHE_DIR",
        "Downloads, Maven jars (`maven/`), class and lab caches (default `~/.cache/lakesession`).",
    ),
    Variable(
        "LAKESESSION_MAVEN_URL",
        "A Maven Central mirror (same layout) for the jars lakesession downloads (default `https://repo1.maven.org/maven2`).",
    ),
    Variable(
        "LAKESESSION_SPARK_LOG",
        "`console`: Spark's own log (ERROR lines with Java traces) on stderr, for debugging Spark; by default it "
        "goes to `<cache>/logs/spark-<pid>.log`, which a Spark error names.",
    ),
    Variable(
        "LAKESESSION_SPARK_SECRET_FILE",
        "On a Spark standalone cluster: a file only you may read holding the cluster's `spark.authenticate.secret` "
        "(or its properties file); local mode needs none (Spark makes a secret per start).",
    ),
    Variable("LAKESESSION_JVM_CLASS_CACHE", "`0` turns off the local JVM's class-data-sharing archive."),
    Variable(
        "LAKESESSION_JVM_DIRS",
        "Folders (path-separated) searched for a supported Java when neither `JAVA_HOME` nor `java` on PATH is one "
        "(default: `/usr/lib/jvm`, `/usr/java`, macOS's and SDKMAN's JVM folders).",
    ),
    Variable(
        "LAKESESSION_TRACEBACK",
        "`1` prints the full traceback of an uncaught lakesession error in a script (by default: one line, and "
        "the traceback saved to `<cache>/last-traceback.txt`).",
    ),
    Variable(
        "LAKESESSION_JARS_VERBOSE",
        "`1` shows Spark's full Ivy resolution report (a `spark.jars.packages` of yours) instead of one progress line.",
    ),
    Variable("LAKESESSION_WIDGETS", "`0` renders the notebook views as HTML instead of ipywidgets."),
    Variable("LAKESESSION_LAB_PUBLISH", "`0` stops a kernel publishing its sessions' status to the JupyterLab panel."),
    Variable("LAKESESSION_LAB_INTERVAL", "Seconds between the JupyterLab publisher's checks (default 2)."),
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
