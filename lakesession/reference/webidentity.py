"""The catalog's storage identity without a standing key: STS ``AssumeRoleWithWebIdentity`` with tokens
the catalog's own issuer signs for it.

Why: a long-lived S3 key in the catalog's environment is the one secret that opens every table. With
``s3.web_identity`` the store's STS trusts the catalog's issuer instead (an OIDC provider in its IAM,
which fetches the issuer's discovery document and JWKS), and the catalog proves who it is with short
tokens it signs for itself: subject ``subject``, audience ``audience``. No user can obtain such a token:
users' tokens carry the catalog's own audience, and the issuer's token exchange refuses any other.

Two uses:

* vending: every vended credential is one ``AssumeRoleWithWebIdentity`` on the vending role with the
  table's session policy and a freshly signed token (no credentials of the catalog are involved);
* the catalog's own I/O (metadata files, remote signing): a session of ``role_arn`` obtained the same
  way, refreshed ahead of expiry (a third of its lifetime before it ends); when STS is briefly
  unreachable the current session serves on while more than a minute of it remains.

The tokens are never logged (botocore's DEBUG records are redacted, see ``lakesession._wire.redact``) nor
put into any error, response or audit record.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._wire.redact import quiet_botocore_bodies
from .errors import ServiceUnavailable

logger = logging.getLogger(__name__)

#: what AWS STS expects of web identity tokens, and the default audience of an OIDC provider added in IAM
DEFAULT_AUDIENCE = "sts.amazonaws.com"
DEFAULT_SUBJECT = "lakesession-catalog"
MIN_SESSION, MAX_SESSION = 900, 43200  # STS DurationSeconds bounds
_LAST_USABLE_SECONDS = 60.0  # a session this close to its end is never used, refresh failing or not

#: signs a token for (subject, audience, lifetime in seconds)
TokenMinter = Callable[[str, str, int], str]


@dataclass(frozen=True)
class WebIdentity:
    """How the catalog obtains its storage credentials from STS with tokens of its own issuer.

    Attributes:
        audience: ``aud`` of the tokens; the store's OIDC provider must list it as a client id
            (never the catalog's own audience: the catalog would then accept them as access tokens).
        subject: ``sub`` of the tokens; the roles' trust policies should require it (``oidc:sub``).
        role_arn: Role of the catalog's own session (metadata files, remote signing); ``None``: the vending role.
        session_duration: Lifetime of that session in seconds (900 to 43200); it is refreshed a third early.
        token_ttl: Lifetime of each signed token in seconds (STS uses it at once).
    """

    audience: str = DEFAULT_AUDIENCE
    subject: str = DEFAULT_SUBJECT
    role_arn: str | None = None
    session_duration: int = 3600
    token_ttl: int = 300

    def describe(self, vending_role: str) -> str:
        """One line for ``serve``'s printout: which mode, which identity, which roles."""
        own = self.role_arn or vending_role
        return (
            f"web identity (no storage key): AssumeRoleWithWebIdentity as sub={self.subject!r} "
            f"aud={self.audience!r}; vending role {vending_role}; own session role {own}"
        )


@dataclass(frozen=True)
class _Session:
    credentials: Any  # botocore.credentials.Credentials (its repr shows no secret)
    expires_at: float


class CatalogIdentity:
    """Signs the catalog's tokens and exchanges them at STS; keeps the catalog's own session fresh.

    ``clock`` is injectable so that tests can move time past a refresh point against a real STS.
    """

    def __init__(
        self,
        web: WebIdentity,
        mint: TokenMinter,
        *,
        vending_role: str,
        region: str,
        sts_endpoint: str | None,
        clock: Callable[[], float] = time.time,
        sts_client: Any | None = None,
    ):
        self.web = web
        self._mint = mint
        self.own_role = web.role_arn or vending_role
        self._region, self._endpoint = region, sts_endpoint
        self.clock = clock
        self._sts = sts_client
        self._session: _Session | None = None
        self._lock = threading.Lock()
        self.margin = max(_LAST_USABLE_SECONDS, web.session_duration / 3)
        self.sts_calls = 0
        self.refreshes = 0

    def __repr__(self) -> str:
        return f"CatalogIdentity(subject={self.web.subject!r}, audience={self.web.audience!r}, role={self.own_role!r})"

    def _client(self) -> Any:
        if self._sts is None:
            import boto3
            from botocore import UNSIGNED
            from botocore.config import Config

            quiet_botocore_bodies()  # requests carry the token, responses the session's secret
            # unsigned: AssumeRoleWithWebIdentity is authenticated by the token alone (no key anywhere)
            self._sts = boto3.client(
                "sts",
                config=Config(signature_version=UNSIGNED, parameter_validation=False, retries={"max_attempts": 2}),
                region_name=self._region,
                endpoint_url=self._endpoint,
            )
        return self._sts

    def token(self) -> str:
        """A freshly signed token for this catalog (STS checks issuer, signature, audience, expiry, subject)."""
        return self._mint(self.web.subject, self.web.audience, self.web.token_ttl)

    def assume(self, role_arn: str, session_name: str, duration: int, policy: str | None = None) -> dict[str, Any]:
        """One ``AssumeRoleWithWebIdentity``; the response's ``Credentials``. Errors never carry the token."""
        token = self.token()
        args: dict[str, Any] = {
            "RoleArn": role_arn,
            "RoleSessionName": session_name,
            "WebIdentityToken": token,
            "DurationSeconds": duration,
        }
        if policy is not None:
            args["Policy"] = policy
        try:
            self.sts_calls += 1
            resp = self._client().assume_role_with_web_identity(**args)
        except Exception as e:  # botocore errors, connection errors
            err = getattr(e, "response", {}).get("Error", {})
            why = f"{err.get('Code')}: {err.get('Message')}" if err.get("Message") else type(e).__name__
            raise ServiceUnavailable(
                f"STS AssumeRoleWithWebIdentity error ({why.replace(token, '***')}) for role {role_arn}"
            ) from None
        return dict(resp["Credentials"])

    def credentials(self) -> Any:
        """The catalog's own current credentials (botocore ``Credentials``), refreshed ahead of expiry."""
        now = self.clock()
        current = self._session
        if current is not None and current.expires_at - now > self.margin:
            return current.credentials
        with self._lock:  # one refresh at a time; the others wait for it and take its result
            now = self.clock()
            current = self._session
            if current is not None and current.expires_at - now > self.margin:
                return current.credentials
            try:
                self._session = self._fetch(now)
            except ServiceUnavailable as e:
                if current is not None and current.expires_at - now > _LAST_USABLE_SECONDS:
                    logger.warning("the catalog's storage session could not be refreshed (%s); still valid", e.message)
                    return current.credentials
                raise ServiceUnavailable(f"The catalog has no storage session: {e.message}") from None
            self.refreshes += 1
            return self._session.credentials

    def _fetch(self, now: float) -> _Session:
        from botocore.credentials import Credentials

        c = self.assume(self.own_role, "lakesession-catalog", self.web.session_duration)
        expiration = c["Expiration"]
        # its remaining lifetime, on this identity's clock (the same as time.time() unless a test moves it)
        lifetime = expiration.timestamp() - time.time() if hasattr(expiration, "timestamp") else None
        expires_at = now + (self.web.session_duration if lifetime is None else lifetime)
        logger.info("the catalog's storage session (role %s) is valid for %.0f s", self.own_role, expires_at - now)
        return _Session(Credentials(c["AccessKeyId"], c["SecretAccessKey"], c["SessionToken"]), expires_at)

    def file_io(self) -> dict[str, str]:
        """pyiceberg FileIO properties carrying the current session (the catalog's metadata reads and writes)."""
        creds = self.credentials()
        return {
            "s3.access-key-id": creds.access_key,
            "s3.secret-access-key": creds.secret_key,
            "s3.session-token": creds.token,
        }
