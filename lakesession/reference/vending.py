"""Credential vending: short-lived, table-scoped STS credentials per (principal, table, mode).

Each issuance is an STS ``AssumeRole`` with a session policy that allows exactly
the table's location prefix (path-boundary safe), read-only or read-write.
Issued credentials are cached per (principal, table, location, mode) and handed
out again only while most of their lifetime remains (``S3Settings.min_remaining``,
90 % by default), so engines always receive nearly fresh credentials and refresh
rarely; concurrent misses for one key share one STS call. STS then sees about
ten calls per TTL per table and principal under continuous load, however hard
engines refresh.

With a ``shared`` tier (``vendcache.SharedVendCache``: the catalog database, encrypted), a miss here asks
the processes' common cache before STS, and one process issues for all (``serve --workers``, replicas).

botocore logs whole STS responses at DEBUG (the vended secret key and session
token among them); ``quiet_botocore_bodies`` keeps those records out of the logs.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from .._wire.redact import quiet_botocore_bodies
from .._wire.singleflight import SingleFlight
from .errors import BadRequest, ServiceUnavailable
from .storage.policy import prefixes_session_policy
from .storage.policysize import MAX_PLAIN_CHARS, fits, policy_text
from .webidentity import CatalogIdentity, WebIdentity

READ, WRITE = "read", "write"


@dataclass(frozen=True)
class S3Settings:
    """How the catalog reaches S3 and STS, and with which role it vends.

    Attributes:
        role_arn: The role the catalog assumes for every vended credential.
        region: AWS region (also ``client.region`` for engines).
        endpoint: S3 endpoint for engines and the catalog (``None`` = AWS).
        sts_endpoint: STS endpoint (``None`` = AWS, or the S3 endpoint for emulators that serve both).
        access_key_id / secret_access_key / session_token: the catalog's own credentials
            (``None`` = boto's default chain). Never sent to clients.
        web_identity: No standing key: STS ``AssumeRoleWithWebIdentity`` with tokens of the catalog's
            own issuer (``webidentity.WebIdentity``); the three keys above must then be ``None``.
        path_style: Path-style addressing (emulators, MinIO).
        credential_ttl: Lifetime of vended credentials in seconds.
        min_remaining: Fraction of their lifetime cached credentials must still have to be handed out again.
        sts_realm: Names the STS instance that mints the sessions; part of the shared vending cache's row id.
            The embedded emulator forgets its sessions when it stops, so each start has a realm of its own: a
            restarted catalog never hands out credentials its store no longer knows (workers share the realm).
    """

    role_arn: str
    region: str = "us-east-1"
    endpoint: str | None = None
    sts_endpoint: str | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = None
    session_token: str | None = None
    path_style: bool = True
    credential_ttl: int = 3600
    min_remaining: float = 0.9
    web_identity: WebIdentity | None = None
    sts_realm: str = ""  # which STS instance mints the sessions (the embedded emulator: one per start)

    def __post_init__(self) -> None:
        if self.web_identity is not None and (self.access_key_id or self.secret_access_key or self.session_token):
            raise ValueError("s3: web_identity means no standing storage key; remove the access key settings")

    def __repr__(self) -> str:
        mode = ", web_identity" if self.web_identity is not None else ""
        return (
            f"S3Settings(role_arn={self.role_arn!r}, region={self.region!r}, endpoint={self.endpoint!r}, "
            f"ttl={self.credential_ttl}{mode})"
        )

    @property
    def sts_url(self) -> str | None:
        return self.sts_endpoint or self.endpoint

    def client_config(self) -> dict[str, str]:
        """Where engines find the store: region, endpoint, addressing (no credentials)."""
        cfg = {"client.region": self.region, "s3.region": self.region}
        if self.endpoint:
            cfg["s3.endpoint"] = self.endpoint
        if self.path_style:
            cfg["s3.path-style-access"] = "true"
        return cfg

    def catalog_file_io(self) -> dict[str, str]:
        """pyiceberg FileIO properties for the catalog's own metadata reads and writes."""
        props = {"s3.region": self.region, "client.region": self.region}
        if self.endpoint:
            props["s3.endpoint"] = self.endpoint
        if self.path_style:
            props["s3.path-style-access"] = "true"
        if self.access_key_id and self.secret_access_key:
            props["s3.access-key-id"] = self.access_key_id
            props["s3.secret-access-key"] = self.secret_access_key
        if self.session_token:
            props["s3.session-token"] = self.session_token
        return props


@dataclass(frozen=True)
class VendedCredential:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at: float  # epoch seconds
    mode: str
    prefix: str
    issued_at: float = field(default_factory=time.time)

    def __repr__(self) -> str:
        return f"VendedCredential(prefix={self.prefix!r}, mode={self.mode!r}, expires_at={self.expires_at:.0f})"

    def config(self, s3: S3Settings) -> dict[str, str]:
        return {
            "s3.access-key-id": self.access_key_id,
            "s3.secret-access-key": self.secret_access_key,
            "s3.session-token": self.session_token,
            "s3.session-token-expires-at-ms": str(int(self.expires_at * 1000)),
            **s3.client_config(),
        }


def _session_name(principal: str) -> str:
    cleaned = re.sub(r"[^\w+=,.@-]", "-", principal)[:48] or "principal"
    return f"lakesession-{cleaned}"


class CredentialVendor:
    """Issues and caches table-scoped STS credentials."""

    def __init__(
        self,
        s3: S3Settings,
        sts_client: Any | None = None,
        identity: CatalogIdentity | None = None,
        shared: Any | None = None,
    ):
        self.s3 = s3
        self._sts = sts_client
        self.identity = identity  # web identity mode: no standing key, tokens of the catalog's own issuer
        if s3.web_identity is not None and identity is None:
            raise ValueError("s3.web_identity needs the catalog's identity (the embedded issuer signs its tokens)")
        self.shared = shared  # vendcache.SharedVendCache, or None (this process's cache only)
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, str, str, str], VendedCredential] = {}
        self._flights: SingleFlight[tuple[VendedCredential, bool]] = SingleFlight()
        self.sts_calls = 0

    def _client(self) -> Any:
        if self._sts is None:
            import boto3
            from botocore.config import Config

            quiet_botocore_bodies()  # AssumeRole responses carry the vended secret key and session token
            self._sts = boto3.client(
                "sts",
                # validation off below 900 s: emulators accept shorter DurationSeconds than AWS (short-TTL tests)
                config=Config(parameter_validation=self.s3.credential_ttl >= 900, retries={"max_attempts": 2}),
                region_name=self.s3.region,
                endpoint_url=self.s3.sts_url,
                aws_access_key_id=self.s3.access_key_id,
                aws_secret_access_key=self.s3.secret_access_key,
                aws_session_token=self.s3.session_token,
            )
        return self._sts

    def vend(
        self,
        principal: str,
        table: str,
        location: str,
        mode: str,
        *,
        now: float | None = None,
        also: tuple[str, ...] = (),
    ) -> tuple[VendedCredential, bool]:
        """Credentials for ``principal`` on ``table`` at ``location``; returns (credential, cache_hit).

        ``also``: more prefixes the same credential covers (one session policy for the union, for readers
        such as Hadoop S3A that take one credential per bucket); the cache key holds the sorted prefix set.
        """
        prefixes = tuple(sorted({p.rstrip("/") for p in (location, *also)}))
        key = (principal, table, "\n".join(prefixes), mode)
        now = time.time() if now is None else now
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit.expires_at - now >= self.s3.min_remaining * (hit.expires_at - hit.issued_at):
                return hit, True

        def issue() -> tuple[VendedCredential, bool]:
            cred = self._shared_hit(key, now) if self.shared is not None else None
            if cred is not None:
                hit = True
            else:
                hit = False
                try:
                    cred = self._assume(principal, location, mode, prefixes)
                except BaseException:
                    if self.shared is not None:
                        self.shared.release(key)
                    raise
                if self.shared is not None:
                    self.shared.put(key, cred)
            with self._lock:
                self._cache[key] = cred
                if len(self._cache) > 10_000:
                    self._evict(now)
            return cred, hit

        (issued, from_cache), joined = self._flights.do(key, issue)
        return issued, from_cache or joined

    def _shared_hit(self, key: tuple[str, str, str, str], now: float) -> VendedCredential | None:
        """The processes' common credential for ``key``: a fresh one, or the one another process is issuing."""
        assert self.shared is not None
        cred: VendedCredential | None = self.shared.fresh(key, now)
        if cred is None and not self.shared.claim(key, now):
            cred = self.shared.wait(key)  # None: its issuer is slow or gone, so this process issues
        return cred

    def _evict(self, now: float) -> None:
        for k in [k for k, v in self._cache.items() if v.expires_at <= now]:
            del self._cache[k]

    def own_credentials(self) -> Any:
        """The catalog's own credentials (botocore ``Credentials``: remote signing), or ``None`` if it holds none."""
        if self.identity is not None:
            return self.identity.credentials()
        s3 = self.s3
        if not (s3.access_key_id and s3.secret_access_key):
            return None
        from botocore.credentials import Credentials

        return Credentials(s3.access_key_id, s3.secret_access_key, s3.session_token)

    def _assume(self, principal: str, location: str, mode: str, prefixes: tuple[str, ...] = ()) -> VendedCredential:
        policy = policy_text(prefixes_session_policy(prefixes or (location,), write=(mode == WRITE)))
        if not fits(policy):  # STS would refuse it on every try: a 400 naming why, never a 503 (callers split unions)
            raise BadRequest(
                f"The storage session policy for {len(prefixes) or 1} location(s) starting at {location} would exceed "
                f"STS's limits ({len(policy)} characters, at most {MAX_PLAIN_CHARS}, or its packed size): use "
                "shorter locations"
            )
        if self.identity is not None:
            self.sts_calls += 1
            try:
                c = self.identity.assume(self.s3.role_arn, _session_name(principal), self.s3.credential_ttl, policy)
            except ServiceUnavailable as e:
                raise ServiceUnavailable(f"Credential vending failed: {e.message}") from None
            return self._credential(c, mode, location)
        try:
            self.sts_calls += 1
            resp = self._client().assume_role(
                RoleArn=self.s3.role_arn,
                RoleSessionName=_session_name(principal),
                Policy=policy,
                DurationSeconds=self.s3.credential_ttl,
            )
        except Exception as e:  # botocore errors, connection errors
            err = getattr(e, "response", {}).get("Error", {})  # the store's own reason (never holds our keys)
            why = f"{err.get('Code')}: {err.get('Message')}" if err.get("Message") else type(e).__name__
            raise ServiceUnavailable(f"Credential vending failed: STS AssumeRole error ({why})") from None
        return self._credential(resp["Credentials"], mode, location)

    def _credential(self, c: dict[str, Any], mode: str, location: str) -> VendedCredential:
        expiration = c["Expiration"]
        expires_at = (
            expiration.timestamp() if hasattr(expiration, "timestamp") else time.time() + self.s3.credential_ttl
        )
        return VendedCredential(
            c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"], expires_at, mode, location.rstrip("/")
        )

    def invalidate(self, principal: str | None = None) -> None:
        """Drop cached credentials (all, or one principal's) — e.g. after a grant is revoked."""
        with self._lock:
            for k in [k for k in self._cache if principal is None or k[0] == principal]:
                del self._cache[k]
        if self.shared is not None:  # other processes keep their in-memory copies until they age out
            self.shared.invalidate(principal)
