"""Tokens shaped like Keycloak 26.7's, signed by a stand-in issuer (a reference catalog's embedded one).

The fast attack tests need what a real Keycloak puts in its tokens (recorded in ``docs/how-to/keycloak.md``
and checked against the real one by ``tests/keycloak``) without starting it: a second reference catalog's
issuer serves real discovery and JWKS over HTTP on loopback, and these helpers sign tokens with its key.
An attacker's tokens use a key of their own (:func:`attacker_key`).

* a user's token: ``sub`` a UUID, ``preferred_username``, ``azp`` the client she logged in with, ``sid``;
* the engine's exchange of it (standard token exchange v2): the same ``sub``/``sid``, ``azp`` = engine,
  **no** ``act``;
* the engine client's own service-account token: ``preferred_username`` ``service-account-engine``,
  ``azp`` and ``client_id`` = engine, no ``sid``;
* a back-channel logout token: ``iss``, ``aud`` = the client, ``iat``, ``jti``, ``sid``, ``sub``, ``events``.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from joserfc import jwt
from joserfc.jwk import ECKey

AUDIENCE = "lakesession"
LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"
#: users' stable ids, as Keycloak's UUIDs
SUBJECTS = {name: str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.lake.example")) for name in ("alice", "bob", "carol")}


def attacker_key() -> ECKey:
    return ECKey.generate_key("P-256", auto_kid=True)


def sign(idp: Any, claims: dict[str, Any], *, key: Any = None, typ: str | None = "JWT", kid: str | None = None) -> str:
    """``claims`` signed with ``idp``'s issuer key (its kid and algorithm), or with ``key`` (an attacker's)."""
    issuer = idp.app.state.issuer
    header: dict[str, Any] = {
        "alg": issuer.alg if key is None else "ES256",
        "kid": kid or (issuer.kid if key is None else key.kid),
    }
    if typ is not None:
        header["typ"] = typ
    return jwt.encode(header, claims, issuer.key if key is None else key)


def user_token(idp: Any, name: str, *, azp: str = "lakesession-cli", sid: str | None = None, **extra: Any) -> str:
    """``name``'s access token from logging in with client ``azp``."""
    now = int(time.time())
    claims = {
        "iss": idp.issuer_uri,
        "sub": SUBJECTS[name],
        "preferred_username": name,
        "aud": [AUDIENCE, "engine", "account"],
        "azp": azp,
        "typ": "Bearer",
        "sid": sid or str(uuid.uuid4()),
        "iat": now,
        "exp": now + 300,
        "scope": "openid email profile",
        **extra,
    }
    return sign(idp, {k: v for k, v in claims.items() if v is not None})


def engine_exchange(idp: Any, name: str, *, sid: str | None = None, **extra: Any) -> str:
    """What Keycloak's standard exchange gives the engine for ``name``'s token: ``azp`` engine, no ``act``."""
    return user_token(idp, name, azp="engine", sid=sid, aud=[AUDIENCE, "account"], scope="email profile", **extra)


def engine_service_account(idp: Any, **extra: Any) -> str:
    """The engine client's own client-credentials token."""
    now = int(time.time())
    claims = {
        "iss": idp.issuer_uri,
        "sub": str(uuid.uuid5(uuid.NAMESPACE_DNS, "service-account-engine")),
        "preferred_username": "service-account-engine",
        "aud": [AUDIENCE],
        "azp": "engine",
        "client_id": "engine",
        "typ": "Bearer",
        "iat": now,
        "exp": now + 300,
        **extra,
    }
    return sign(idp, {k: v for k, v in claims.items() if v is not None})


def logout_token(
    idp: Any, *, sid: str | None, sub: str | None, aud: str = "lakesession-cli", key: Any = None, **extra: Any
) -> str:
    """A back-channel logout token (OpenID Connect Back-Channel Logout 1.0 §2.4), Keycloak's shape."""
    now = int(time.time())
    claims = {
        "iss": idp.issuer_uri,
        "aud": aud,
        "iat": now,
        "exp": now + 120,
        "jti": str(uuid.uuid4()),
        "typ": "Logout",
        "sid": sid,
        "sub": sub,
        "events": {LOGOUT_EVENT: {}},
        **extra,
    }
    return sign(idp, {k: v for k, v in claims.items() if v is not None}, key=key, typ="logout+jwt")
