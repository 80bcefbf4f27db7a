"""Who is calling: every gRPC call carries the user's OIDC access token, verified here.

The token is checked by OIDC discovery and the issuer's JWKS (``_wire.jwks``: joserfc does the
cryptography): signature, issuer, audience, expiry. The principal is the configured claim
(``sub`` by default). Nothing the client says about itself (Spark Connect's ``user_id``) is
believed: the front door replaces it with this principal.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._wire.jwks import IssuerUnavailable, RemoteVerifier, TokenRejected

__all__ = ["Authenticator", "Caller", "Unauthenticated"]


class Unauthenticated(Exception):
    """No usable token: the message is safe to show the caller (it never echoes the token)."""


@dataclass(frozen=True)
class Caller:
    """An authenticated caller: the principal, its verified claims and the token it presented."""

    principal: str
    claims: dict[str, Any]
    token: str

    @property
    def expires_at(self) -> float:
        exp = self.claims.get("exp")
        return float(exp) if isinstance(exp, (int, float)) else 0.0

    def __repr__(self) -> str:  # never the token
        return f"Caller(principal={self.principal!r})"


class Authenticator:
    """Verifies bearer tokens of one issuer for the engine's audience; remembers good tokens briefly.

    Verified tokens are cached by their SHA-256 until they expire (at most ``cache_seconds``), so
    a query's dozens of gRPC calls cost one signature check.
    """

    def __init__(
        self,
        issuer: str,
        audiences: Sequence[str],
        *,
        principal_claim: str = "sub",
        verifier: Any = None,
        cache_seconds: float = 60.0,
    ) -> None:
        self.issuer = issuer
        self.audiences = tuple(audiences)
        self.principal_claim = principal_claim
        self._verifier = verifier or RemoteVerifier(issuer, self.audiences[0], audiences=self.audiences)
        self._cache: dict[str, tuple[float, Caller]] = {}
        self._lock = threading.Lock()
        self._cache_seconds = cache_seconds

    def authenticate(self, metadata: Sequence[tuple[str, Any]]) -> Caller:
        """The caller of a gRPC call, from its ``authorization: Bearer …`` metadata."""
        header = next((str(v) for k, v in metadata if k.lower() == "authorization"), "")
        scheme, _, token = header.partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthenticated(
                "the engine needs your access token (authorization: Bearer …); "
                "lakesession.connect(..., engine=...) sends it for you"
            )
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.time()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
        try:
            claims = self._verifier.verify(token)
        except TokenRejected as exc:
            raise Unauthenticated(f"access token refused: {exc}") from None
        except IssuerUnavailable:
            raise Unauthenticated("the token issuer's keys are unavailable; try again shortly") from None
        name = claims.get(self.principal_claim)
        if not isinstance(name, str) or not name:
            raise Unauthenticated(f"access token refused: no {self.principal_claim!r} claim naming a principal")
        caller = Caller(name, claims, token)
        until = min(caller.expires_at, now + self._cache_seconds)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
            self._cache[key] = (until, caller)
        return caller
