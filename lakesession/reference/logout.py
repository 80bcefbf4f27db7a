"""OIDC back-channel logout: how a logout at an external issuer (Keycloak) ends the catalog's sessions too.

Why this and not introspection or short token lives alone: introspecting every token costs the issuer a
call per (uncached) request and the catalog its availability; short lives bound a revocation only by the
lifetime (Keycloak's default is 5 minutes). Back-channel logout (OpenID Connect Back-Channel Logout 1.0) has
the issuer *tell* the catalog, at once, server to server: Keycloak posts a signed logout token to the
client's ``backchannel.logout.url`` when a user logs out, an admin ends her sessions
(``POST /admin/realms/{realm}/users/{id}/logout``) or a session is deleted. Short token lives stay the
fallback bound for a logout the catalog never heard of (it was down, the network dropped the post).

``POST /oidc-backchannel-logout`` (form field ``logout_token``; unauthenticated by design: the token is the
proof) verifies the token with the issuer's JWKS (the access-token verifier's key cache, same bounded
refetch): an asymmetric signature, ``iss`` exactly the issuer's, ``aud`` one of
``backchannel_logout_clients``, ``iat`` within :data:`MAX_AGE` seconds (not in the future), ``exp`` if
present, a ``jti`` never seen before (replay), the back-channel logout event in ``events``, no ``nonce``
(an ID token is no logout token), and a ``sid`` and/or ``sub``. It records the logout in
``ls_oidc_logouts`` (the catalog's database: every replica shares it). Anything else is a 400 ErrorModel
naming ``logout_token`` that records nothing.

Effect (``RevokingVerifier``): with a ``sid``, every token of that sign-in session is refused (the user's
own and the engine's exchange of it: Keycloak's exchange keeps her ``sid``); with only a ``sub``, that
subject's tokens issued at or before the logout. The logout never reaches beyond its ``sid``/``sub``.
Bound: the replica that received the logout refuses from the next request; the others within
``CachingVerifier.generation_ttl`` (1 s).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request, Response
from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyIdError,
    JoseError,
    MissingClaimError,
)
from sqlalchemy import Engine, and_, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError

from .._wire import jwks
from . import store
from .errors import BadRequest, NotAuthorized, ServiceUnavailable

logger = logging.getLogger(__name__)

PATH = "/oidc-backchannel-logout"
LOGOUT_EVENT = "http://schemas.openid.net/event/backchannel-logout"
#: seconds after its ``iat`` a logout token is accepted (Keycloak posts it as it mints it)
MAX_AGE = 120
#: a recorded logout is kept this long (longer than any access token it must refuse lives)
RETENTION = 7 * 24 * 3600
_TYPES = (None, "JWT", "jwt", "logout+jwt", "application/logout+jwt")
_MAX_ID = 255
LOGGED_OUT = "Token rejected: its sign-in session was logged out at the identity provider; log in again"


class LogoutStore:
    """The ended sessions (``ls_oidc_logouts``), shared by every replica through the catalog's database."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.on_record: list[Callable[[], None]] = []  # e.g. the token cache: re-check at once

    def record(self, *, jti: str, iss: str, sid: str | None, sub: str | None) -> bool:
        """Record one logout; False when its ``jti`` was recorded before (a replay)."""
        now = time.time()
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(store.oidc_logouts).values(jti=jti, iss=iss, sid=sid, sub=sub, logged_out_at=now))
                conn.execute(delete(store.oidc_logouts).where(store.oidc_logouts.c.logged_out_at < now - RETENTION))
        except IntegrityError:
            return False
        for hook in self.on_record:
            hook()
        return True

    def revoked(self, claims: dict[str, Any]) -> bool:
        """Whether a logout ended the token with these (verified) claims: its ``sid``, or its ``sub`` since."""
        t = store.oidc_logouts
        iss, sid, sub, iat = claims.get("iss"), claims.get("sid"), claims.get("sub"), claims.get("iat")
        if not isinstance(iss, str):
            return False
        matches = []
        if isinstance(sid, str) and sid:
            matches.append(t.c.sid == sid)
        if isinstance(sub, str) and sub:
            issued = float(iat) if isinstance(iat, (int, float)) and not isinstance(iat, bool) else float("inf")
            matches.append(and_(t.c.sid.is_(None), t.c.sub == sub, t.c.logged_out_at >= issued))
        if not matches:
            return False
        with self.engine.connect() as conn:
            row = conn.execute(select(t.c.jti).where(and_(t.c.iss == iss, or_(*matches))).limit(1)).first()
        return row is not None

    def generation(self) -> tuple[int, float]:
        """(logouts, latest): moves with every logout, on any replica."""
        t = store.oidc_logouts
        with self.engine.connect() as conn:
            row = conn.execute(select(func.count(), func.max(t.c.logged_out_at))).one()
        return int(row[0]), float(row[1] or 0.0)


class RevokingVerifier:
    """An external issuer's verifier whose tokens die with their sign-in session (``CachingVerifier`` asks
    ``claims_revoked`` about cached tokens whenever ``revocation_generation`` moved)."""

    revoked_message = LOGGED_OUT

    def __init__(self, inner: Any, logouts: LogoutStore):
        self.inner = inner
        self.logouts = logouts

    def verify(self, token: str) -> dict[str, Any]:
        claims: dict[str, Any] = self.inner.verify(token)
        if self.logouts.revoked(claims):
            raise NotAuthorized(LOGGED_OUT)
        return claims

    def revocation_generation(self) -> object:
        return self.logouts.generation()

    def claims_revoked(self, claims: dict[str, Any]) -> bool:
        return self.logouts.revoked(claims)

    def session_revoked(self, sid: str) -> bool:
        return self.logouts.revoked({"iss": self.inner.issuer, "sid": sid})


def _refuse(why: str) -> BadRequest:
    return BadRequest(f"Invalid logout_token: {why}")


def check_logout_token(token: str, verifier: jwks.RemoteVerifier, clients: list[str]) -> dict[str, Any]:
    """The claims of a valid back-channel logout token (module docstring), else a 400 naming the reason."""
    try:
        header = jwks.token_header(token)
    except jwks.TokenRejected:
        raise _refuse("not a compact JWT") from None
    if header.get("alg") not in jwks.ASYMMETRIC_ALGORITHMS:
        raise _refuse("signing algorithm not accepted")
    if header.get("typ") not in _TYPES:
        raise _refuse("wrong token type (logout+jwt expected)")
    try:
        keys = verifier.signing_keys(header.get("kid"))
    except jwks.IssuerUnavailable:
        raise ServiceUnavailable("The issuer's signing keys are unavailable; the logout cannot be checked") from None
    try:
        claims = dict(jwt.decode(token, keys, algorithms=list(jwks.ASYMMETRIC_ALGORITHMS)).claims)
    except InvalidKeyIdError:
        raise _refuse("signed by an unknown key") from None
    except BadSignatureError:
        raise _refuse("invalid signature") from None
    except (JoseError, ValueError, TypeError):
        raise _refuse("malformed token") from None
    registry = jwt.JWTClaimsRegistry(
        leeway=jwks.LEEWAY_SECONDS,
        iss={"essential": True, "value": verifier.issuer},
        aud={"essential": True, "values": clients},
        iat={"essential": True},
        jti={"essential": True},
    )
    try:
        registry.validate(claims)
    except ExpiredTokenError:
        raise _refuse("expired") from None
    except MissingClaimError as exc:
        raise _refuse(f"missing claim {exc.claim}") from None
    except InvalidClaimError as exc:
        raise _refuse(f"invalid claim {exc.claim}") from None
    iat = claims["iat"]
    if not isinstance(iat, (int, float)) or time.time() - iat > MAX_AGE + jwks.LEEWAY_SECONDS:
        raise _refuse(f"issued more than {MAX_AGE} s ago (iat)")
    events = claims.get("events")
    if not isinstance(events, dict) or not isinstance(events.get(LOGOUT_EVENT), dict):
        raise _refuse(f"events must hold {LOGOUT_EVENT!r} (an object)")
    if "nonce" in claims:
        raise _refuse("carries a nonce (an ID token is no logout token)")
    ids = {k: claims.get(k) for k in ("sid", "sub", "jti")}
    for name, value in ids.items():
        if value is not None and not (isinstance(value, str) and 0 < len(value) <= _MAX_ID):
            raise _refuse(f"{name} must be a string of 1 to {_MAX_ID} characters")
    if ids["sid"] is None and ids["sub"] is None:
        raise _refuse("names neither a session (sid) nor a subject (sub)")
    return claims


def router(verifier: jwks.RemoteVerifier, logouts: LogoutStore, clients: list[str], audit: Any) -> APIRouter:
    """``POST /oidc-backchannel-logout`` for the issuer ``verifier`` checks and the ``clients`` it posts for."""
    api = APIRouter()

    @api.post(PATH, include_in_schema=False)
    async def backchannel_logout(request: Request) -> Response:
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        form = parse_qs((await request.body()).decode("utf-8", "replace")) if kind.endswith("urlencoded") else {}
        values = form.get("logout_token") or []
        if len(values) != 1 or not values[0]:
            raise BadRequest(
                "Missing logout_token: post it form-encoded (application/x-www-form-urlencoded), once, as the "
                "OpenID Connect back-channel logout specification says"
            )
        claims = check_logout_token(values[0], verifier, clients)
        sid, sub = claims.get("sid"), claims.get("sub")
        if not logouts.record(jti=claims["jti"], iss=verifier.issuer, sid=sid, sub=sub):
            raise _refuse("replayed (its jti was seen before)")
        audit.record_many(
            [
                {
                    "principal": sub or "-",
                    "action": "backchannel_logout",
                    "securable": f"session {sid}" if sid else "sessions",
                    "decision": "revoked",
                    "request_id": claims["jti"][:64],
                    "detail": {"client": claims.get("aud"), "sid": sid, "sub": sub},
                }
            ]
        )
        logger.info("back-channel logout: %s ended", f"session {sid}" if sid else f"subject {sub}'s sessions")
        return Response(status_code=200, headers={"Cache-Control": "no-store"})

    return api
