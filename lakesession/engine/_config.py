"""``EngineConfig``: every option of ``lakesession engine``, typed and documented.

Each option comes from its command-line flag, else its ``LAKESESSION_ENGINE_*`` variable, else the
YAML file given with ``--config`` (keys are the field names). The engine's client secret is read
from a variable or a file, never from the command line (``ps`` shows arguments to everyone).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ._sandbox import DEFAULT_PROTECTED_PREFIXES, DEFAULT_SETTABLE

__all__ = ["ENGINE_ENVIRONMENT", "EngineConfig"]


def _opt(doc: str, default: Any = None, env: str | None = None) -> Any:
    if isinstance(default, (list, dict, tuple)):
        value = default
        return field(default_factory=lambda: type(value)(value), metadata={"doc": doc, "env": env})
    return field(default=default, metadata={"doc": doc, "env": env})


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """How the trusted engine reaches the catalog and the issuer, whom it serves, and how it runs Spark."""

    catalog: str = _opt("The catalog's base URI (what clients pass as `uri`).", env="LAKESESSION_ENGINE_CATALOG")
    warehouse: str | None = _opt("Warehouse to request.", env="LAKESESSION_ENGINE_WAREHOUSE")
    client_id: str = _opt(
        "The engine's own client id at the issuer: a service principal of the catalog, declared in its "
        "`trusted_engines`, holding TOKEN_EXCHANGE.",
        "engine",
        "LAKESESSION_ENGINE_CLIENT_ID",
    )
    client_secret: str | None = field(
        default=None,
        repr=False,
        metadata={"doc": "The engine's client secret (variable or `client_secret_file`).", "env": None},
    )
    client_secret_file: str | None = _opt(
        "A file holding the engine's client secret.", env="LAKESESSION_ENGINE_CLIENT_SECRET_FILE"
    )
    issuer: str | None = _opt(
        "The OIDC issuer of users' tokens (discovery + JWKS); default: the catalog's embedded issuer `{catalog}/oidc`.",
        env="LAKESESSION_ENGINE_ISSUER",
    )
    token_url: str | None = _opt(
        "Token endpoint for RFC 8693 exchange; default: the issuer's discovery `token_endpoint`.",
        env="LAKESESSION_ENGINE_TOKEN_URL",
    )
    audiences: Sequence[str] = _opt(
        "Audiences a user's token may carry to be accepted (one of them).",
        ["lakesession"],
        "LAKESESSION_ENGINE_AUDIENCES",
    )
    principal_claim: str = _opt("Token claim naming the user.", "sub")
    host: str = _opt("Bind address of the gRPC front door.", "127.0.0.1", "LAKESESSION_ENGINE_HOST")
    port: int = _opt("Port of the gRPC front door (Spark Connect's default 15002).", 15002, "LAKESESSION_ENGINE_PORT")
    tls_cert: str | None = _opt("PEM certificate chain: serve TLS (required off loopback unless `insecure`).")
    tls_key: str | None = _opt("PEM private key for `tls_cert`.")
    insecure: bool = _opt("Serve plaintext on a non-loopback address (behind a TLS-terminating proxy).", False)
    master: str = _opt(
        "Spark master: `local[*]` or a cluster (`spark://host:7077`).", "local[*]", "LAKESESSION_ENGINE_MASTER"
    )
    catalog_name: str = _opt("The catalog's name inside Spark (and users' default catalog).", "lake")
    gateway_host: str = _opt("Bind address of the per-user gateways; a cluster's executors must reach it.", "127.0.0.1")
    gateway_clients: Sequence[str] | None = _opt(
        "Addresses/CIDRs allowed to reach the per-user gateways: with a routable `gateway_host`, every host of the "
        "cluster (the engine's own included; required then). On loopback (the default) only local processes can."
    )
    settable_confs: Sequence[str] = _opt("Configuration keys users may set.", list(DEFAULT_SETTABLE))
    protected_conf_prefixes: Sequence[str] = _opt(
        "Configuration key prefixes users may not read.", list(DEFAULT_PROTECTED_PREFIXES)
    )
    spark_conf: Mapping[str, str] = _opt(
        "Extra Spark configuration of the engine's JVM (it cannot override the sandbox, the Connect server's "
        "binding or authentication, the UI or the event log: those are set after it).",
        {},
    )
    jars: str | None = _opt("Jar mode (`auto`, `maven`, `cache`, `offline`).", env="LAKESESSION_ENGINE_JARS")
    workers: int = _opt("gRPC worker threads (each running query holds one).", 64)
    idle_timeout: float = _opt(
        "Seconds after a user's last call ends before the engine forgets them: their gateway (a port and two "
        "threads), connections and Connect sessions (temporary views, settings). Their next query opens a new "
        "session by itself. A query that runs longer never counts as idle.",
        900.0,
    )
    max_users: int = _opt(
        "Users served at once (each holds a gateway until idle for `idle_timeout`); the next one is refused "
        "(RESOURCE_EXHAUSTED, rule `max-users`) until one goes idle.",
        256,
    )
    max_sessions_per_user: int = _opt(
        "Connect sessions one user may hold at once (a notebook holds one per `Session`); the next is refused "
        "(RESOURCE_EXHAUSTED, rule `max-sessions-per-user`).",
        16,
    )

    @property
    def issuer_url(self) -> str:
        return (self.issuer or f"{self.catalog.rstrip('/')}/oidc").rstrip("/")

    def secret(self) -> str:
        """The engine's client secret: the field, else ``LAKESESSION_ENGINE_CLIENT_SECRET``, else the file."""
        if self.client_secret:
            return self.client_secret
        if os.environ.get("LAKESESSION_ENGINE_CLIENT_SECRET"):
            return os.environ["LAKESESSION_ENGINE_CLIENT_SECRET"]
        if self.client_secret_file:
            try:
                return Path(self.client_secret_file).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"cannot read client_secret_file {self.client_secret_file!r}: {exc}") from None
        raise ConfigError(
            "the engine needs its client secret: set LAKESESSION_ENGINE_CLIENT_SECRET or client_secret_file "
            "(never a command-line argument)"
        )

    @classmethod
    def resolve(cls, given: Mapping[str, Any], file: str | None = None) -> EngineConfig:
        """Merge the YAML file, then ``LAKESESSION_ENGINE_*`` variables, then ``given`` (non-None)."""
        names = {f.name: f for f in dataclasses.fields(cls)}
        merged: dict[str, Any] = {}
        if file:
            import yaml

            try:
                doc = yaml.safe_load(Path(file).read_text()) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise ConfigError(f"cannot read engine config {file!r}: {exc}") from None
            if not isinstance(doc, dict):
                raise ConfigError(f"{file}: expected a mapping of options")
            unknown = sorted(set(doc) - set(names))
            if unknown:
                raise ConfigError(f"{file}: unknown option(s) {', '.join(unknown)}; known: {', '.join(names)}")
            merged.update(doc)
        for name, spec in names.items():
            var = spec.metadata.get("env")
            if var and os.environ.get(var):
                value: Any = os.environ[var]
                if name == "port":
                    value = int(value)
                elif name == "audiences":
                    value = [a.strip() for a in value.split(",") if a.strip()]
                merged[name] = value
        merged.update({k: v for k, v in given.items() if v is not None})
        if not merged.get("catalog"):
            raise ConfigError("the engine needs the catalog's URI: --catalog or LAKESESSION_ENGINE_CATALOG")
        return cls(**merged)


ENGINE_ENVIRONMENT: tuple[tuple[str, str], ...] = (
    *((f.metadata["env"], f.metadata["doc"]) for f in dataclasses.fields(EngineConfig) if f.metadata.get("env")),
    ("LAKESESSION_ENGINE_CLIENT_SECRET", "The engine's client secret."),
)
