"""``RemoteVerifier``: trust an external OIDC issuer, validating its tokens against its published JWKS.

Discovery, the key cache and the checks are ``lakesession._wire.jwks.RemoteVerifier`` (a trusted engine
verifies users' tokens with the very same code); this is the catalog's ``TokenVerifier`` around it.
"""

from __future__ import annotations

from typing import Any

import httpx

from ..._wire import jwks
from ..errors import NotAuthorized, ServiceUnavailable


class RemoteVerifier(jwks.RemoteVerifier):
    """A ``TokenVerifier`` for tokens of an external issuer.

    On first use it reads ``{issuer_url}/.well-known/openid-configuration`` and the
    ``jwks_uri`` it names, then caches the keys. A token signed with an unknown
    ``kid`` triggers a refetch, at most once per ``refetch_interval`` seconds (so a
    flood of forged kids cannot hammer the issuer); keys are also refetched after
    ``max_age`` seconds. Checks: signature (asymmetric algorithms only), ``iss``,
    ``aud`` containing ``audience``, ``exp``/``nbf``/``iat`` with 30 s leeway, and a
    ``typ`` of ``at+jwt`` or plain ``JWT`` (or none).

    A rejected token raises ``NotAuthorized`` (401); an unreachable issuer ``ServiceUnavailable`` (503).
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
        super().__init__(issuer_url, audience, http=http, refetch_interval=refetch_interval, max_age=max_age)

    def verify(self, token: str) -> dict[str, Any]:
        try:
            return super().verify(token)
        except jwks.TokenRejected as exc:
            raise NotAuthorized(str(exc)) from None
        except jwks.IssuerUnavailable as exc:
            raise ServiceUnavailable(str(exc)) from None
