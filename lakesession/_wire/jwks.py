"""JWT access-token verification by OIDC discovery and JWKS: the rules both halves apply to bearer tokens.

The catalog server verifies tokens of an external issuer with it (``reference/idp/_remote.py``, and
``_keys.py`` for its own issuer's tokens), and so does a trusted engine (``lakesession engine``) that
must check each user's token before acting for that user, without importing the server. One
implementation, so both accept and refuse exactly the same tokens.

Checks: signature with an asymmetric algorithm only (never ``none`` or HMAC: a public key is no
secret), ``typ``, ``iss`` (exact), ``aud`` containing one of the expected audiences, ``exp`` (required)
and ``nbf``/``iat`` with leeway, ``sub`` required. Every failure is a :class:`TokenRejected` whose message
is a short reason that never echoes the token; an issuer whose keys cannot be loaded is
:class:`IssuerUnavailable` (a different answer: retry later, not "log in again").

joserfc does the cryptography and httpx the fetching (both dependencies of every distribution).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Iterable
from typing import Any

import httpx
from joserfc import jws, jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyIdError,
    JoseError,
    MissingClaimError,
    UnsupportedAlgorithmError,
)
from joserfc.jwk import KeySet

__all__ = [
    "ACCESS_TOKEN_TYPES",
    "ASYMMETRIC_ALGORITHMS",
    "LEEWAY_SECONDS",
    "PLAIN_JWT_TYPES",
    "IssuerUnavailable",
    "RemoteVerifier",
    "TokenRejected",
    "check_access_token",
    "token_header",
]

logger = logging.getLogger(__name__)

LEEWAY_SECONDS = 30
#: Asymmetric JWS algorithms a verifier will accept (never ``none`` nor HMAC).
ASYMMETRIC_ALGORITHMS = (
    "ES256",
    "ES384",
    "ES512",
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "EdDSA",
    "Ed25519",
)
#: ``typ`` of an RFC 9068 access token (what the embedded issuer mints)
ACCESS_TOKEN_TYPES = ("at+jwt", "application/at+jwt")
#: ``typ`` values accepted from other issuers (many mint plain JWTs, or no ``typ`` at all)
PLAIN_JWT_TYPES = (None, "JWT", "jwt", "at+jwt", "application/at+jwt")
_MAX_TOKEN = 16_384


class TokenRejected(ValueError):
    """The bearer token is malformed or fails a check; the message is a short reason (never the token)."""


class IssuerUnavailable(RuntimeError):
    """The issuer's signing keys could not be loaded (discovery or JWKS unreachable or unusable)."""


def token_header(token: str) -> dict[str, Any]:
    """The unverified JOSE header of a compact JWS (for ``kid``/``typ`` routing only)."""
    if not isinstance(token, str) or token.count(".") != 2 or len(token) > _MAX_TOKEN:
        raise TokenRejected("Malformed bearer token: not a compact JWT")
    try:
        return dict(jws.extract_compact(token.encode("ascii")).headers())
    except (JoseError, ValueError, UnicodeError):
        raise TokenRejected("Malformed bearer token: not a compact JWT") from None


def _audience_hint(audiences: list[str]) -> str:
    """The fix for a token without the expected audience (no secret: IdPs add it with an audience mapper)."""
    return f" (expected {' or '.join(map(repr, audiences))} in aud: an IdP adds it with an audience mapper)"


def _audiences(audience: str | Iterable[str]) -> list[str]:
    found = [audience] if isinstance(audience, str) else list(dict.fromkeys(a for a in audience if isinstance(a, str)))
    if not found or not all(found):
        raise ValueError("an expected audience is required: a token meant for another service must be refused")
    return found


def check_access_token(
    token: str,
    keys: KeySet,
    *,
    issuer: str,
    audience: str | Iterable[str],
    algorithms: Collection[str],
    allowed_types: Collection[str | None],
    leeway: int = LEEWAY_SECONDS,
) -> dict[str, Any]:
    """Verify a JWT access token's signature and claims; return its claims or raise :class:`TokenRejected`.

    ``audience``: one audience or several; the token's ``aud`` must contain one of them."""
    audiences = _audiences(audience)
    header = token_header(token)
    if header.get("alg") not in algorithms:
        raise TokenRejected("Token rejected: signing algorithm not accepted")
    if header.get("typ") not in allowed_types:
        raise TokenRejected("Token rejected: wrong token type (an at+jwt access token is required)")
    try:
        claims = jwt.decode(token, keys, algorithms=list(algorithms)).claims
    except InvalidKeyIdError:
        raise TokenRejected("Token rejected: signed by an unknown key") from None
    except BadSignatureError:
        raise TokenRejected("Token rejected: invalid signature") from None
    except UnsupportedAlgorithmError:
        raise TokenRejected("Token rejected: signing algorithm not accepted") from None
    except (JoseError, ValueError, TypeError):
        raise TokenRejected("Token rejected: malformed token") from None
    registry = jwt.JWTClaimsRegistry(
        leeway=leeway,
        iss={"essential": True, "value": issuer},
        aud={"essential": True, "values": audiences},
        exp={"essential": True},
        sub={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise TokenRejected("Token rejected: expired") from None
    except MissingClaimError as exc:
        missing = f"missing claim {exc.claim}"
        if "aud" in str(exc.claim).split(","):  # Keycloak's lightweight tokens (admin-cli) carry no aud, no sub
            missing += _audience_hint(audiences)
        raise TokenRejected(f"Token rejected: {missing}") from None
    except InvalidClaimError as exc:
        reason = {
            "iss": "issuer mismatch",
            "aud": "audience mismatch",
            "nbf": "not yet valid",
            "iat": "issued in the future",
        }.get(exc.claim, f"invalid claim {exc.claim}")
        if exc.claim == "aud":
            reason += _audience_hint(audiences)
        raise TokenRejected(f"Token rejected: {reason}") from None
    return claims


class RemoteVerifier:
    """Verifies access tokens of an OIDC issuer against its published JWKS.

    On first use it reads ``{issuer_url}/.well-known/openid-configuration`` and the ``jwks_uri`` it
    names, then caches the keys. A token signed with an unknown ``kid`` triggers a refetch, at most
    once per ``refetch_interval`` seconds (so a flood of forged kids cannot hammer the issuer); keys
    are also refetched after ``max_age`` seconds. Checks: see the module docstring; ``typ`` may be
    ``at+jwt``, plain ``JWT`` or absent (``allowed_types``).

    ``audience`` / ``audiences``: the token's ``aud`` must contain one of them (at least one is
    required). ``issuer``: the exact ``iss`` tokens must carry, when the issuer is reached at another
    address than the one it names itself (an engine inside the platform's network, a proxy); the
    discovery document must then name that issuer, and a ``jwks_uri`` under it is fetched at
    ``issuer_url`` too (the same server that answered discovery). Without it the discovery document
    must name ``issuer_url`` itself (OIDC Discovery §4.3; a trailing ``/`` aside), and tokens must
    carry the document's spelling.

    An issuer whose keys cannot be loaded raises :class:`IssuerUnavailable` (the previous keys, if
    any, keep serving); a bad token :class:`TokenRejected`.
    """

    def __init__(
        self,
        issuer_url: str,
        audience: str | None = None,
        *,
        audiences: Iterable[str] = (),
        issuer: str | None = None,
        http: httpx.Client | None = None,
        refetch_interval: float = 30.0,
        max_age: float = 3600.0,
        algorithms: Collection[str] = ASYMMETRIC_ALGORITHMS,
        allowed_types: Collection[str | None] = PLAIN_JWT_TYPES,
        leeway: int = LEEWAY_SECONDS,
    ):
        self.issuer_url = issuer_url
        self.audiences = tuple(_audiences([*([audience] if audience is not None else []), *audiences]))
        self.audience = self.audiences[0]
        self.expected_issuer = issuer
        self.refetch_interval = refetch_interval
        self.max_age = max_age
        self.algorithms = tuple(a for a in algorithms if a in ASYMMETRIC_ALGORITHMS)
        if not self.algorithms:
            raise ValueError("at least one asymmetric signing algorithm is required")
        self.allowed_types = tuple(allowed_types)
        self.leeway = leeway
        self._http = http or httpx.Client(timeout=10.0, follow_redirects=False)
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._iss = issuer if issuer is not None else issuer_url  # replaced by the discovery document's spelling
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")  # monotonic time of the last JWKS fetch attempt
        self.fetch_count = 0  # number of JWKS fetches (observable for tests and metrics)

    def verify(self, token: str) -> dict[str, Any]:
        """The token's claims, or :class:`TokenRejected` / :class:`IssuerUnavailable`."""
        kid = token_header(token).get("kid")  # malformed tokens fail before any network traffic
        keys = self._keyset(kid)
        return check_access_token(
            token,
            keys,
            issuer=self._iss,
            audience=self.audiences,
            algorithms=self.algorithms,
            allowed_types=self.allowed_types,
            leeway=self.leeway,
        )

    @property
    def issuer(self) -> str:
        """The exact ``iss`` this issuer's tokens carry (the discovery document's spelling once read)."""
        return self._iss

    def signing_keys(self, kid: str | None) -> KeySet:
        """The issuer's keys for a JWS naming ``kid`` (other JWTs it signs, e.g. back-channel logout tokens):
        the same cache and the same bounded refetch as access tokens. :class:`IssuerUnavailable` if none."""
        return self._keyset(kid)

    # -- key cache --------------------------------------------------------
    def _keyset(self, kid: str | None) -> KeySet:
        with self._lock:
            now = time.monotonic()
            stale = self._keys is None or now - self._fetched_at >= self.max_age
            unknown = kid is not None and self._keys is not None and all(k.kid != kid for k in self._keys)
            if stale or (unknown and now - self._fetched_at >= self.refetch_interval):
                self._refresh(now)
            if self._keys is None:
                raise IssuerUnavailable("The token issuer's signing keys are unavailable")
            return self._keys

    def _refresh(self, now: float) -> None:
        self._fetched_at = now
        try:
            if self._jwks_uri is None:
                self._jwks_uri = self._discover()
            doc = self._get_json(self._jwks_uri)
            keys = KeySet.import_key_set(doc)  # type: ignore[arg-type]  # validated by joserfc itself
        except (httpx.HTTPError, ValueError, KeyError, TypeError, JoseError) as exc:
            logger.warning("could not load the signing keys of issuer %s: %s", self.issuer_url, type(exc).__name__)
            return  # keep serving the previous keys, if any
        self._keys = KeySet([k for k in keys if k.get("use") in (None, "sig")] or list(keys))
        self.fetch_count += 1
        logger.info("loaded %d signing key(s) of issuer %s", len(self._keys.keys), self.issuer_url)

    def _discover(self) -> str:
        doc = self._get_json(self.issuer_url.rstrip("/") + "/.well-known/openid-configuration")
        named = doc.get("issuer")
        wanted = self.expected_issuer if self.expected_issuer is not None else self.issuer_url
        if not isinstance(named, str) or named.rstrip("/") != wanted.rstrip("/"):
            raise ValueError("discovery document names a different issuer")
        uri = doc.get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise ValueError("discovery document has no usable jwks_uri")
        if self.expected_issuer is None:
            self._iss = named
        elif uri.startswith(named.rstrip("/") + "/"):  # keys under the issuer: fetched where discovery was
            uri = self.issuer_url.rstrip("/") + uri[len(named.rstrip("/")) :]
        return uri

    def _get_json(self, url: str) -> dict[str, Any]:
        resp = self._http.get(url, headers={"Accept": "application/json"})
        resp.raise_for_status()
        doc = resp.json()
        if not isinstance(doc, dict):
            raise TypeError("expected a JSON object")
        return doc

    def __repr__(self) -> str:
        return f"{type(self).__name__}(issuer_url={self.issuer_url!r}, audience={self.audience!r})"
