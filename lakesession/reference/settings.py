"""Typed, documented configuration of the reference catalog."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AbuseLimits:
    """Limits that keep one client from exhausting the server for everyone else.

    Rates are ``limits`` strings (``"10/minute"``, several joined by ``;``). Device
    authorization counts every call; the token endpoint counts every call per address
    (a CPU guard: each authentication hashes a secret) and, separately, its *failed*
    authentications per client id and address and per address (brute force), never per
    client id alone: a flood from many addresses must not lock the id's owner out. A
    throttled caller gets 429 with ``Retry-After``; the counters are keyed so that other
    client ids and addresses keep working. Counters live in memory (per process).

    Attributes:
        device_rate_per_client_address: Device authorizations per (client id, address).
        device_rate_per_address: Device authorizations per address, whatever the client id (ids are free to invent).
        device_pending_per_address: Pending (unexpired, unredeemed) device codes one address may hold.
        device_pending_per_network: Pending device codes one network (/24 IPv4, /64 IPv6) may hold.
        device_pending_total: Pending device codes overall; when full, a new one evicts the oldest code of
            the network holding the most, never a code a user already approved, and waits (503) rather
            than evict when no network holds more than one (``idp/_devices.py``).
        device_approved_per_principal: Approved (or denied) device codes one principal may hold before their
            devices redeem them; approving one more withdraws that principal's oldest (its device is told
            ``expired_token``). Such codes are never evicted by anyone else's authorizations.
        token_rate_per_address: Token endpoint calls per address.
        token_failures_per_client_address: Failed token requests per (client id, address).
        token_failures_per_address: Failed token requests per address.
        max_body_bytes: Largest request body accepted (413 beyond; checked on Content-Length and while streaming).
        max_json_depth: Deepest JSON nesting accepted in a request body (400 beyond).
    """

    device_rate_per_client_address: str = "20/minute"
    device_rate_per_address: str = "60/minute"
    device_pending_per_address: int = 50
    device_pending_per_network: int = 1000
    device_pending_total: int = 10_000
    device_approved_per_principal: int = 5
    token_rate_per_address: str = "1200/minute"
    token_failures_per_client_address: str = "20/minute"
    token_failures_per_address: str = "60/minute"
    max_body_bytes: int = 10 * 1024 * 1024
    max_json_depth: int = 100


@dataclass
class AdmissionLimits:
    """The fair admission gate (``admission``): how many requests run at once and who goes first when more wait.

    At most ``concurrency`` requests run the catalog at once; the others wait at the gate and are let in by
    their client's share of recent server time, least used first: a principal (a verified bearer token's
    subject) or, for requests without a known token, the client's network (/24 IPv4, /64 IPv6). So one
    user's request is not queued behind a flood from others, however many requests they keep in flight.

    Attributes:
        enabled: Gate requests (``false``: every request runs at once, as before). A single-user catalog (the
            embedded default, ``single_user``) never gates: there is no one to be fair to.
        concurrency: Requests running the catalog at once (about the server's cores; each worker process has its own).
        hold_ms: A request holds its slot until its response is sent or for this long, whichever comes first; a
            handler waiting on slow I/O (database, STS) then lets the next request in and continues.
        half_life: Seconds over which a client's recorded server time halves: the memory of who was served (short,
            so that a person's requests a few seconds apart count as light even when each is a dear one).
        queue_per_key: Requests of one principal or network waiting at once; one more answers 429 with Retry-After.
        queue_total: Requests waiting at once overall; one more answers 503 with Retry-After.
    """

    enabled: bool = True
    concurrency: int = 2
    hold_ms: float = 50.0
    half_life: float = 0.25
    queue_per_key: int = 64
    queue_total: int = 4096


@dataclass
class ServerSettings:
    """Everything the reference catalog needs to start.

    Attributes:
        warehouse: Base location for table and view data/metadata (``file:///…`` for now).
        db_url: SQLAlchemy URL of the catalog state (SQLite file by default; PostgreSQL for a shared server).
        catalog_name: The warehouse name clients ask for; also the REST ``prefix``.
        base_url: The URL clients reach this server at (default ``http://HOST:PORT`` as bound, loopback for
            ``0.0.0.0``); the issuer lives under it, and discovery, device login and token endpoint advertise
            it, never a request's Host header. Set it in a container or behind a proxy (``--base-url``).
        issuer_url: An external OIDC issuer to trust instead of the embedded one (validated via its JWKS).
        audience: The ``aud`` every access token must carry to be accepted by the catalog.
        principal_claim: Token claim naming the principal (``sub`` by default): a claim name or a dotted path
            into nested objects (``claims``); Keycloak names users in ``preferred_username``. Its value must be
            one non-empty string, else the token is refused (401).
        roles_claim: Token claim (name or dotted path) listing the caller's groups or roles, e.g. ``groups``
            (Keycloak's group membership mapper) or ``realm_access.roles``; unset: tokens bring no roles. Each
            name that is a role declared in the catalog adds that role's grants to the catalog's own
            memberships (a union: grants only ever add), read per request; other names are ignored.
        roles_claim_prefix: Stripped from each name of ``roles_claim`` (``/`` for Keycloak's full group paths);
            names without it are ignored.
        token_privileged_roles: Roles holding ``CATALOG_MANAGE_ACCESS`` or ``TOKEN_EXCHANGE`` that a token may
            still bring. Without it such roles reach principals only through the catalog's own memberships,
            so whoever administers the IdP's groups cannot make catalog admins.
        access_token_ttl: Lifetime of access tokens minted by the embedded issuer, in seconds.
        refresh_token_ttl: Lifetime of refresh tokens minted by the embedded issuer, in seconds.
        device_code_ttl: How long a device code can wait for approval, in seconds.
        device_code_ttl_under_pressure: The (shorter) lifetime of codes issued while half the pending-code store
            (``abuse.device_pending_total``) is taken; also the bound on how long any flood keeps new device
            logins out once it stops (``idp/_devices.py``).
        device_poll_interval: Minimum polling interval the device flow asks clients to keep, in seconds.
        namespace_separator: How multi-level namespaces are joined in URLs (spec default ``%1F``).
        extra_config: Extra properties added to every ``/v1/config`` answer's ``defaults``.
        s3: ``vending.S3Settings`` when the warehouse is on S3 (enables credential vending and signing).
        adls: ``cloudvending.AdlsSettings`` when the warehouse is on ADLS (``abfss://``): SAS vending.
        gcs: ``cloudvending.GcsSettings`` when the warehouse is on GCS (``gs://``): OAuth token vending.
        trusted_engines: Callers whose ``referenced-by`` view chains are honoured and who may set the view
            owner property: ``{"principal": name}`` or ``{"issuer": iss, "audience": aud}`` /
            ``{"issuer": iss, "subject": sub}`` (see ``trust``, ``viewsecurity``). A principal or subject
            rule also matches the engine *acting for a user* (a token-exchange token whose current actor,
            the outermost ``act``, is the engine): the chain is then honoured while every check stays the
            user's, and the engine may set the owner property only to that user's name. An audience rule
            never matches a token with ``act`` (in an exchange the requester picks the audience).
        view_owner_property: View property naming a DEFINER view's owner (absent: INVOKER). While trusted
            engines give it effect, only the owner may change a DEFINER view's SQL (or whoever the same
            commit makes owner, through the engine acting for them): see ``viewsecurity``.
        abuse: Rate limits, pending device-code quotas and request size/nesting limits (``AbuseLimits``).
        admission: The fair admission gate (``AdmissionLimits``): requests at once, and who is let in first.
        trusted_proxies: Addresses (or CIDR networks) of reverse proxies whose ``X-Forwarded-For`` /
            ``X-Forwarded-Proto`` are believed; none by default, so client addresses (which every
            per-address limit keys on) come from the socket. The embedded catalog never sets it.
        backchannel_logout_clients: Client ids of the external issuer whose OIDC back-channel logout tokens the
            catalog accepts at ``POST /oidc-backchannel-logout`` (the ``aud`` of Keycloak's logout tokens is the
            client, e.g. ``lakesession-cli``); empty: no such endpoint. A verified logout token ends its ``sid``
            (or, with only a ``sub``, that subject's tokens issued before it) on every replica: see ``logout``.
        single_user: The catalog serves one user (the embedded default): only then may a trusted-engine
            rule match every token (see ``trust.check_trust_configuration``).
    """

    warehouse: str
    db_url: str
    catalog_name: str = "lakesession"
    base_url: str = "http://127.0.0.1:8181"
    issuer_url: str | None = None
    audience: str = "lakesession"
    principal_claim: str = "sub"
    roles_claim: str | None = None
    roles_claim_prefix: str = ""
    token_privileged_roles: list[str] = field(default_factory=list)
    access_token_ttl: int = 3600
    refresh_token_ttl: int = 7 * 24 * 3600
    device_code_ttl: int = 600
    device_code_ttl_under_pressure: int = 120
    device_poll_interval: int = 5
    namespace_separator: str = "%1F"
    extra_config: dict[str, str] = field(default_factory=dict)
    s3: Any = None
    adls: Any = None
    gcs: Any = None
    trusted_engines: list[dict[str, Any]] = field(default_factory=list)
    view_owner_property: str = "trino.run-as-owner"
    abuse: AbuseLimits = field(default_factory=AbuseLimits)
    admission: AdmissionLimits = field(default_factory=AdmissionLimits)
    single_user: bool = False
    backchannel_logout_clients: list[str] = field(default_factory=list)
    trusted_proxies: list[str] = field(default_factory=list)

    @property
    def embedded_issuer_url(self) -> str:
        return self.base_url.rstrip("/") + "/oidc"

    @property
    def effective_issuer_url(self) -> str:
        return self.issuer_url or self.embedded_issuer_url

    @property
    def uses_embedded_issuer(self) -> bool:
        return self.issuer_url is None
