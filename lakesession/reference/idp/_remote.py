"""``RemoteVerifier``: trust an external OIDC issuer, validating its tokens against its published JWKS."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import KeySet

from ..errors import ServiceUnavailable
from ._keys import ASYMMETRIC_ALGORITHMS, LEEWAY_SECONDS, PLAIN_JWT_TYPES, check_access_token, token_header

logger = logging.getLogger(__name__)


class RemoteVerifier:
    """A ``TokenVerifier`` for tokens of an external issuer.

    On first use it reads ``{issuer_url}/.well-known/openid-configuration`` and the
    ``jwks_uri`` it names, then caches the keys. A token signed with an unknown
    ``kid`` triggers a refetch, at most once per ``refetch_interval`` seconds (so a
    flood of forged kids cannot hammer the issuer); keys are also refetched after
    ``max_age`` seconds. Checks: signature (asymmetric algorithms only), ``iss``,
    ``aud`` containing ``audience``, ``exp``/``nbf``/``iat`` with 30 s leeway, and a
    ``typ`` of ``at+jwt`` or plain ``JWT`` (or none).

    An unreachable issuer raises ``ServiceUnavailable`` (503), not ``NotAuthorized``.
    """

    def __init__(
        self,
        issuer_url: str,
        audience: str,
        *,
        http: httpx.Client | None = None,
        refetch_interval: float = 30.0,
        max_age: float = 3600.0,
    ):
        self.issuer_url = issuer_url
        self.audience = audience
        self.refetch_interval = refetch_interval
        self.max_age = max_age
        self._http = http or httpx.Client(timeout=10.0, follow_redirects=False)
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._iss = issuer_url  # replaced by the discovery document's exact spelling (trailing slash and all)
        self._keys: KeySet | None = None
        self._fetched_at = float("-inf")  # monotonic time of the last JWKS fetch attempt
        self.fetch_count = 0  # number of JWKS fetches (observable for tests and metrics)

    def verify(self, token: str) -> dict[str, Any]:
        kid = token_header(token).get("kid")  # malformed tokens fail before any network traffic
        keys = self._keyset(kid)
        return check_access_token(
            token,
            keys,
            issuer=self._iss,
            audience=self.audience,
            algorithms=ASYMMETRIC_ALGORITHMS,
            allowed_types=PLAIN_JWT_TYPES,
            leeway=LEEWAY_SECONDS,
        )

    # -- key cache --------------------------------------------------------
    def _keyset(self, kid: str | None) -> KeySet:
        with self._lock:
            now = time.monotonic()
            stale = self._keys is None or now - self._fetched_at >= self.max_age
            unknown = kid is not None and self._keys is not None and all(k.kid != kid for k in self._keys)
            if stale or (unknown and now - self._fetched_at >= self.refetch_interval):
                self._refresh(now)
            if self._keys is None:
                raise ServiceUnavailable("The token issuer's signing keys are unavailable")
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
        issuer = doc.get("issuer")
        if not isinstance(issuer, str) or issuer.rstrip("/") != self.issuer_url.rstrip("/"):
            raise ValueError("discovery document names a different issuer")
        uri = doc.get("jwks_uri")
        if not isinstance(uri, str) or not uri.startswith(("https://", "http://")):
            raise ValueError("discovery document has no usable jwks_uri")
        self._iss = issuer
        return uri

    def _get_json(self, url: str) -> dict[str, Any]:
        resp = self._http.get(url, headers={"Accept": "application/json"})
        resp.raise_for_status()
        doc = resp.json()
        if not isinstance(doc, dict):
            raise TypeError("expected a JSON object")
        return doc

    def __repr__(self) -> str:
        return f"RemoteVerifier(issuer_url={self.issuer_url!r}, audience={self.audience!r})"
