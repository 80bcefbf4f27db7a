"""Typed, documented configuration of the reference catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServerSettings:
    """Everything the reference catalog needs to start.

    Attributes:
        warehouse: Base location for table and view data/metadata (``file:///…`` for now).
        db_url: SQLAlchemy URL of the catalog state (SQLite file by default; PostgreSQL for a shared server).
        catalog_name: The warehouse name clients ask for; also the REST ``prefix``.
        base_url: Public base URL of this server (``http://127.0.0.1:8181``); the issuer lives under it.
        issuer_url: An external OIDC issuer to trust instead of the embedded one (validated via its JWKS).
        audience: The ``aud`` every access token must carry to be accepted by the catalog.
        principal_claim: Token claim naming the principal (``sub`` by default).
        access_token_ttl: Lifetime of access tokens minted by the embedded issuer, in seconds.
        refresh_token_ttl: Lifetime of refresh tokens minted by the embedded issuer, in seconds.
        device_code_ttl: How long a device code can wait for approval, in seconds.
        device_poll_interval: Minimum polling interval the device flow asks clients to keep, in seconds.
        namespace_separator: How multi-level namespaces are joined in URLs (spec default ``%1F``).
        s3: ``vending.S3Settings`` when the warehouse is on S3 (enables credential vending and signing).
        trusted_engines: Callers whose ``referenced-by`` view chains are honoured and who may set the view
            owner property: ``{"principal": name}`` or ``{"issuer": iss, "audience": aud}`` /
            ``{"issuer": iss, "subject": sub}`` (see ``viewsecurity``).
        view_owner_property: View property naming a DEFINER view's owner (absent: INVOKER).
        single_user: The catalog serves one user (the embedded default): only then may a trusted-engine
            rule match every token (see ``viewsecurity.check_trust_configuration``).
    """

    warehouse: str
    db_url: str
    catalog_name: str = "lakesession"
    base_url: str = "http://127.0.0.1:8181"
    issuer_url: str | None = None
    audience: str = "lakesession"
    principal_claim: str = "sub"
    access_token_ttl: int = 3600
    refresh_token_ttl: int = 7 * 24 * 3600
    device_code_ttl: int = 600
    device_poll_interval: int = 5
    namespace_separator: str = "%1F"
    extra_config: dict[str, str] = field(default_factory=dict)
    s3: Any = None
    trusted_engines: list[dict[str, Any]] = field(default_factory=list)
    view_owner_property: str = "trino.run-as-owner"
    single_user: bool = False

    @property
    def embedded_issuer_url(self) -> str:
        return self.base_url.rstrip("/") + "/oidc"

    @property
    def effective_issuer_url(self) -> str:
        return self.issuer_url or self.embedded_issuer_url

    @property
    def uses_embedded_issuer(self) -> bool:
        return self.issuer_url is None
